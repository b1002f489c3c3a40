"""AIME'24 (30 problems of AIME 2024 I and II): ``HuggingFaceH4/aime_2024``, split ``train``.

Fields: ``id``, ``problem``, ``solution``, ``answer`` (a string, 0-999), ``url``, ``year``. The capitalised fields of
``Maxwell-Jia/AIME_2024`` (``ID``, ``Problem``, ``Answer``) load too.
"""

from __future__ import annotations

from arrol_pl.tasks.rows import DatasetSpec

SPEC = DatasetSpec(
    name="aime24",
    hub_id="HuggingFaceH4/aime_2024",
    split="train",
    question_fields=("problem", "Problem", "question"),
    answer_fields=("answer", "Answer"),
    id_fields=("id", "ID"),
)
