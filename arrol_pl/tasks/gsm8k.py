"""GSM8K (Cobbe et al. 2021; 7,473 train / 1,319 test grade-school word problems): ``openai/gsm8k``,
config ``main``, splits ``train`` and ``test``.

Fields: ``question`` and ``answer``, a worked solution whose last line is ``#### 72``. The gold is that
number (thousands separators dropped: ``#### 1,250`` → ``1250``), never the whole solution, from which
math-verify would pick some other number. The solution above the ``####`` line, without GSM8K's
calculator annotations (``<<48/2=24>>``) and ending in ``\\boxed{gold}``, is the problem's worked
solution: what the tiny policy's warm start trains on. Rows have no id: ids are ``gsm8k-{row index}``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from arrol_pl.tasks.problem import ProblemSet
from arrol_pl.tasks.rows import DatasetSpec, load_spec

SPEC = DatasetSpec(
    name="gsm8k",
    hub_id="openai/gsm8k",
    hub_config="main",
    split="train",
    question_fields=("question",),
    answer_fields=("answer",),
    answer_pattern=r"#### (.+)$",
)

_CALCULATOR = re.compile(r"<<[^<>]*>>")

SOLUTIONS = True
"""Every usable row carries a worked solution (the tiny policy's warm start can use it)."""


def load(path: str | os.PathLike | None = None, split: str | None = None, **kwargs: Any) -> ProblemSet:
    problems = load_spec(SPEC, path, split, **kwargs)
    problems.problems = [
        dataclasses.replace(p, solution=_CALCULATOR.sub("", p.solution)) if p.solution else p for p in problems
    ]
    return problems
