"""MinervaMath (Lewkowycz et al. 2022; 272 problems): ``math-ai/minervamath``, split ``test``.

Fields: ``question``, ``answer`` (LaTeX, often with units). Copies that only carry a worked
``solution`` (Qwen2.5-Math's ``minerva_math/test.jsonl``: ``problem``, ``solution``) are read too; the
gold is then the solution's last ``\\boxed{}``.
"""

from __future__ import annotations

from typing import Any, Mapping

from arrol_pl.tasks.problem import BadRowError
from arrol_pl.tasks.rows import DatasetSpec, answer_value, first_field
from arrol_pl.tasks.extraction import extract_boxed

SPEC = DatasetSpec(
    name="minerva",
    hub_id="math-ai/minervamath",
    split="test",
    question_fields=("question", "problem"),
    answer_fields=("answer",),
    id_fields=("id", "idx"),
)


def answer_of(row: Mapping[str, Any], spec: DatasetSpec) -> str:
    if first_field(row, spec.answer_fields)[0] is not None:
        return answer_value(row, spec.answer_fields)
    _, solution = first_field(row, ("solution",))
    if not isinstance(solution, str):
        raise BadRowError("missing answer (looked for answer, and a \\boxed{} in solution)", "missing_answer")
    boxed = extract_boxed(solution)
    if not boxed:
        raise BadRowError("missing answer: no answer field and no \\boxed{} in solution", "missing_answer")
    return boxed
