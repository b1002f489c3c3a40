"""A reward of the user's own: a function named by import path (``reward.function=module:function``), called as
``function(prompt, completion, answer) -> float`` for every rollout, in the same worker processes and under the
same time limits as math-verify (:mod:`.pool`). :func:`make_reward` gives the run's reward for either.

Decisions:
- **Correct means a reward above 0.5.** The quality head and the calibrator learn a 0/1 label, and
  ``reward/accuracy`` and the held-out accuracy count correct rollouts: a rollout is correct when its reward is
  > :data:`CORRECT_ABOVE`, so a 0/1 reward gives its own labels, and a graded one needs its passing grade above 0.5.
  The advantages use the reward itself (plus DAPO's overlong penalty when ``algo.overlong_cache_length`` is set).
- **What the function sees.** ``prompt``: the prompt as the policy saw it (template and chat template applied);
  ``completion``: the generated text; ``answer``: the problem's gold answer (``data.answer_field``, after
  ``data.answer_pattern``). Each completion is scored, identical ones too (a function need not be deterministic).
- **Found the way Python finds it, and from the working directory.** A script's own directory is on
  ``sys.path``, the directory it was started from is not: :func:`resolve_reward_function` looks there too, and so
  does every worker, which imports the function itself when it starts (a module that imports in the trainer
  but not in a worker fails the pool's start with the worker's message).
- **A failure is counted, not a crash and not silent.** A function that raises, or returns something that is
  not a finite number, scores 0 with status ``error``; the batch logs a warning with the count and the first
  error. A function that runs past the pool's limit per item is killed with its worker (status ``timeout``).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import sys
import time
from typing import Callable, Sequence

import numpy as np

from arrol_pl.core.online import CORRECT_ABOVE
from arrol_pl.tasks.reward import MathReward, PooledReward, RewardConfig, RewardResult, counted, warn_failures

logger = logging.getLogger(__name__)

MATH_VERIFY = "math_verify"
"""``reward.function``'s built-in value: the last ``\\boxed{}`` checked against the gold with math-verify."""

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")

RewardFunction = Callable[[str, str, str], float]


def resolve_reward_function(path: str, search_dir: str | None = None) -> RewardFunction:
    """The callable at ``module:function`` (the function may be an attribute path, ``module:Class.method``),
    importing ``module`` from ``sys.path`` and then from ``search_dir`` (the working directory when None).
    A ValueError says what is wrong in one line."""
    if not IMPORT_PATH.match(path):
        raise ValueError(f"{path!r} is not an import path: write module:function (e.g. my_rewards:exact_match), "
                         f"or {MATH_VERIFY}")
    module_name, attribute = path.split(":")
    search_dir = os.getcwd() if search_dir is None else search_dir
    if search_dir not in sys.path:
        sys.path.append(search_dir)  # after everything else: a module of the working directory never shadows one
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 — the module's own error, named in the one-line message
        raise ValueError(f"cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    for name in attribute.split("."):
        if not hasattr(obj, name):
            raise ValueError(f"{module_name} has no {attribute}")
        obj = getattr(obj, name)
    if not callable(obj):
        raise ValueError(f"{path} is a {type(obj).__name__}, not a function")
    return obj


def call_reward(fn: RewardFunction, prompt: str, completion: str, answer: str) -> tuple[float, str, str]:
    """One item's ``(reward, status, note)``: ``status`` ``ok``, or ``error`` (reward 0) with the reason in ``note``
    when ``fn`` raised or returned no finite number."""
    try:
        value = fn(prompt, completion, answer)
    except Exception as exc:  # noqa: BLE001 — counted and reported by the batch (status error), never silent
        return 0.0, "error", f"{type(exc).__name__}: {exc}"
    try:
        reward = float(value)
    except (TypeError, ValueError):
        return 0.0, "error", f"returned {type(value).__name__} {value!r:.80}, not a number"
    if not math.isfinite(reward):
        return 0.0, "error", f"returned {reward}"
    return reward, "ok", ""


class FunctionReward(PooledReward):
    """Scores completions with the function at import path ``function`` (see the module docstring)."""

    def __init__(self, function: str, config: RewardConfig | None = None, search_dir: str | None = None) -> None:
        super().__init__(config)
        self.search_dir = os.getcwd() if search_dir is None else search_dir
        self.function = function
        self._fn = resolve_reward_function(function, self.search_dir)

    def score(
        self,
        completions: Sequence[str],
        golds: Sequence[str],
        lengths: Sequence[int] | np.ndarray | None = None,
        deadline_s: float | None = None,
        prompts: Sequence[str] | None = None,
    ) -> RewardResult:
        """Score ``function(prompts[i], completions[i], golds[i])``; ``lengths`` (tokens) feed the overlong penalty."""
        if len(completions) != len(golds) or prompts is None or len(prompts) != len(golds):
            raise ValueError(f"{len(completions)} completions, {len(golds)} golds and "
                             f"{'no' if prompts is None else len(prompts)} prompts: a reward function reads all three")
        t0 = time.perf_counter()
        outcomes = self._score_items([(p, c, str(g)) for p, c, g in zip(prompts, completions, golds)], deadline_s)
        raw = np.array([float(value) for value, _, _ in outcomes], dtype=np.float32)
        status = [s for _, s, _ in outcomes]
        result = RewardResult(self._shaped(raw, lengths), raw > CORRECT_ABOVE, np.array([s == "ok" for s in status]),
                              [None] * len(status), status, counted(status), time.perf_counter() - t0)
        first = next((note for _, _, note in outcomes if note), "")
        warn_failures(logger, f"reward {self.function}", result, f"first error: {first}" if first else
                      "see RewardResult.status")
        return result

    def _score_here(self, items: list[tuple[str, ...]]) -> list[tuple]:
        return [call_reward(self._fn, *item) for item in items]


def make_reward(function: str, config: RewardConfig | None = None) -> PooledReward:
    """The run's reward: math-verify's (``function`` = :data:`MATH_VERIFY`) or the function at that import path."""
    return MathReward(config) if function == MATH_VERIFY else FunctionReward(function, config)
