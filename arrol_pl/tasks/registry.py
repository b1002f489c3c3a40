"""Datasets by name: ``load_problems("math500", path=...)`` → :class:`ProblemSet`.

The names are the config's ``data=`` choices. Adapter modules are imported on first use, so asking
for one dataset never imports the others' dependencies.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from arrol_pl.tasks.problem import ProblemSet, load_spec

ADAPTERS: dict[str, str] = {
    "arithmetic": "arrol_pl.tasks.arithmetic",
    "dapo_math": "arrol_pl.tasks.dapo_math",
    "math500": "arrol_pl.tasks.math500",
    "minerva": "arrol_pl.tasks.minerva",
    "olympiadbench": "arrol_pl.tasks.olympiadbench",
    "amc23": "arrol_pl.tasks.amc23",
    "aime24": "arrol_pl.tasks.aime24",
    "aime25": "arrol_pl.tasks.aime25",
    "jsonl": "arrol_pl.tasks.jsonl",
}
"""Dataset name → adapter module: it exposes ``load(path=None, split=None, ...)``, or a
:class:`DatasetSpec` ``SPEC`` (plus ``question_of`` / ``answer_of`` where a field needs unwrapping),
loaded by :func:`load_spec`."""

ALIASES = {
    "dapo": "dapo_math",
    "dapo-math-17k": "dapo_math",
    "math-500": "math500",
    "minervamath": "minerva",
    "minerva_math": "minerva",
    "olympiad": "olympiadbench",
    "amc": "amc23",
    "aime2024": "aime24",
    "aime2025": "aime25",
}

EVAL_SETS = ("math500", "minerva", "olympiadbench", "amc23", "aime24", "aime25")
"""The paper's evaluation sets (Tables 1–3), in its column order."""


def available() -> list[str]:
    return sorted(ADAPTERS)


def canonical_name(name: str) -> str:
    """The adapter key of ``name`` (aliases and case folded); ValueError naming the choices if unknown."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in ADAPTERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(available())}")
    return key


def load_problems(name: str, path: str | os.PathLike | None = None, split: str | None = None, **kwargs: Any) -> ProblemSet:
    """The problems of dataset ``name`` from ``path`` (local copy) or its hub id.

    ``kwargs`` go to the adapter: ``template``, ``limit``; the field names and ``hub_id`` of
    ``jsonl``; the difficulty of ``arithmetic`` (see :class:`ArithmeticConfig`).
    """
    module = importlib.import_module(ADAPTERS[canonical_name(name)])
    if hasattr(module, "load"):
        return module.load(path=path, split=split, **kwargs)
    return load_spec(module.SPEC, path, split, question_of=getattr(module, "question_of", None),
                     answer_of=getattr(module, "answer_of", None), **kwargs)
