"""AIME'25 (30 problems of AIME 2025 I and II): ``math-ai/aime25``, split ``test``.

Fields: ``problem``, ``answer`` (a string, 0-999), ``id``. ``yentinglin/aime_2025`` (split ``train``; also ``url``,
``year``) has the same fields.
"""

from __future__ import annotations

from arrol_pl.tasks.rows import DatasetSpec

SPEC = DatasetSpec(
    name="aime25",
    hub_id="math-ai/aime25",
    split="test",
    question_fields=("problem", "question"),
    answer_fields=("answer",),
    id_fields=("id",),
)
