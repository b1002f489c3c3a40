"""AMC'23 (40 problems of the 2023 AMC 12; integer answers): ``math-ai/amc23``, split ``test``.

Fields: ``id``, ``question``, ``answer`` (some copies store it as a float, e.g. ``27.0``;
integral values become ``"27"``), ``url``.
"""

from __future__ import annotations

from arrol_pl.tasks.rows import DatasetSpec

SPEC = DatasetSpec(
    name="amc23",
    hub_id="math-ai/amc23",
    split="test",
    question_fields=("question", "problem"),
    answer_fields=("answer",),
    id_fields=("id",),
)
