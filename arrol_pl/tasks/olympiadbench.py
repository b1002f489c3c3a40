"""OlympiadBench (He et al. 2024), text-only English competition maths with open-ended answers:
``Hothan/OlympiadBench``, config ``OE_TO_maths_en_COMP``, split ``train`` (674 problems).

Fields: ``id`` (int), ``question``, ``final_answer`` (a list of strings, usually one, each often
wrapped in ``$…$``), ``is_multiple_answer``, ``unit``, ``answer_type``, ``subfield``, ``solution``.
Multiple final answers are joined with ", " (math-verify compares comma lists as unordered sets).
"""

from __future__ import annotations

from typing import Any, Mapping

from arrol_pl.tasks.problem import BadRowError
from arrol_pl.tasks.rows import DatasetSpec, first_field

SPEC = DatasetSpec(
    name="olympiadbench",
    hub_id="Hothan/OlympiadBench",
    hub_config="OE_TO_maths_en_COMP",
    split="train",
    question_fields=("question", "problem"),
    answer_fields=("final_answer", "answer"),
)


def _unwrap(s: str) -> str:
    s = s.strip()
    return s[1:-1].strip() if len(s) >= 2 and s.startswith("$") and s.endswith("$") and s.count("$") == 2 else s


def answer_of(row: Mapping[str, Any], spec: DatasetSpec) -> str:
    name, value = first_field(row, spec.answer_fields)
    if name is None:
        raise BadRowError(f"missing answer (looked for {', '.join(spec.answer_fields)})", "missing_answer")
    parts = value if isinstance(value, list) else [value]
    if not parts:
        raise BadRowError(f"empty answer list in field {name!r}", "empty_answer")
    if not all(isinstance(p, str) for p in parts):
        raise BadRowError(f"answer field {name!r} must be a string or a list of strings", "wrong_type")
    answers = [_unwrap(p) for p in parts if p.strip()]
    if not answers:
        raise BadRowError(f"empty answer in field {name!r}", "empty_answer")
    return ", ".join(answers)
