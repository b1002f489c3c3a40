"""MATH-500 (Lightman et al. 2023; a MATH subset): ``HuggingFaceH4/MATH-500``, split ``test``.

Fields: ``problem``, ``solution``, ``answer`` (LaTeX, e.g. ``\\left( 3, \\frac{\\pi}{2} \\right)``),
``subject``, ``level``, ``unique_id`` (e.g. ``test/precalculus/807.json``).
"""

from __future__ import annotations

from arrol_pl.tasks.rows import DatasetSpec

SPEC = DatasetSpec(
    name="math500",
    hub_id="HuggingFaceH4/MATH-500",
    split="test",
    question_fields=("problem",),
    answer_fields=("answer",),
    id_fields=("unique_id", "id"),
)
