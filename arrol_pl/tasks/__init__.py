"""Tasks: datasets → ``Problem(id, prompt, answer)``, the built-in arithmetic task, and the math reward.

Imports stay light (no ``datasets``, no ``math_verify``): those load inside the functions that need
them. Entry points: :func:`load_problems` (datasets by name), :func:`arrol_pl.tasks.registry.load_data`
(a run's training and held-out sets), :class:`arrol_pl.tasks.reward.MathReward`
(R = 1[answer ≡ gold]: :mod:`.extraction` of the boxed answer, :mod:`.verify` with math-verify, in the
worker processes of :mod:`.pool`), :mod:`arrol_pl.tasks.arithmetic` (the CPU default task).
"""

from arrol_pl.tasks.problem import DatasetUnavailableError, Problem, ProblemSet
from arrol_pl.tasks.prompts import render_prompt
from arrol_pl.tasks.registry import load_problems

__all__ = ["DatasetUnavailableError", "Problem", "ProblemSet", "load_problems", "render_prompt"]
