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
- **Found the way Python finds it, and from the working directory** (:mod:`.user_function`, which every worker
  runs too: a module that imports in the trainer but not in a worker fails the pool's start with the worker's
  message).
- **A failure is counted, not a crash and not silent.** A function that raises, or returns something that is
  not a finite number, scores 0 with status ``error``; the batch logs a warning with the count and the first
  error. A function that runs past the pool's limit per item is killed with its worker (status ``timeout``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Sequence

import numpy as np

from arrol_pl.core.online import CORRECT_ABOVE
from arrol_pl.tasks.reward import MathReward, PooledReward, RewardConfig, RewardResult, counted, warn_failures
from arrol_pl.tasks.user_function import MATH_VERIFY, call_reward, resolve_reward_function

logger = logging.getLogger(__name__)


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
            raise ValueError(
                f"{len(completions)} completions, {len(golds)} golds and "
                f"{'no' if prompts is None else len(prompts)} prompts: a reward function reads all three"
            )
        t0 = time.perf_counter()
        outcomes = self._score_items([(p, c, str(g)) for p, c, g in zip(prompts, completions, golds)], deadline_s)
        raw = np.array([float(value) for value, _, _ in outcomes], dtype=np.float32)
        status = [s for _, s, _ in outcomes]
        result = RewardResult(
            self._shaped(raw, lengths),
            raw > CORRECT_ABOVE,
            np.array([s == "ok" for s in status]),
            [None] * len(status),
            status,
            counted(status),
            time.perf_counter() - t0,
        )
        first = next((note for _, _, note in outcomes if note), "")
        warn_failures(
            logger, f"reward {self.function}", result, f"first error: {first}" if first else "see RewardResult.status"
        )
        return result

    def _score_here(self, items: list[tuple[str, ...]]) -> list[tuple]:
        return [call_reward(self._fn, *item) for item in items]


def make_reward(function: str, config: RewardConfig | None = None) -> PooledReward:
    """The run's reward: math-verify's (``function`` = :data:`MATH_VERIFY`) or the function at that import path."""
    return MathReward(config) if function == MATH_VERIFY else FunctionReward(function, config)
