"""Test-time answer aggregation (paper §4.4, Table 3).

- ``majority_vote``: the most frequent answer.
- ``weighted_vote``: answers weighted by a per-sample weight (DeepConf: trace confidence).
- ``arrol_vote``: the quality head's raw scores are uncalibrated, so they become rank weights:
  candidates sorted by score, ranks rescaled linearly to [0, 1] (lowest 0, highest 1; ties share
  their average rank; a single candidate gets 1).
Answers are hashable canonical forms; ``None`` (no extractable answer) never wins. Ties go to the
answer seen first, so results are deterministic.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch


def weighted_vote(answers: Sequence[Hashable | None], weights: Sequence[float] | torch.Tensor) -> Hashable | None:
    """The answer with the largest total weight (``None`` when no sample has an answer)."""
    w = [float(x) for x in weights]
    if len(w) != len(answers):
        raise ValueError(f"{len(answers)} answers but {len(w)} weights")
    totals: dict[Hashable, float] = {}
    for answer, weight in zip(answers, w):
        if answer is not None:
            totals[answer] = totals.get(answer, 0.0) + weight
    if not totals:
        return None
    best = max(totals.values())
    return next(a for a, t in totals.items() if t == best)


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    return weighted_vote(answers, [1.0] * len(answers))


def rank_weights(scores: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """``(k,)`` scores → ``(k,)`` ranks rescaled to [0, 1] (average ranks for ties)."""
    s = torch.as_tensor(scores, dtype=torch.float64).flatten()
    k = s.numel()
    if k == 0:
        return s
    if k == 1:
        return torch.ones(1, dtype=torch.float64)
    order = torch.argsort(s, stable=True)
    ranks = torch.empty(k, dtype=torch.float64)
    ranks[order] = torch.arange(k, dtype=torch.float64)
    for value in torch.unique(s):
        tied = s == value
        if int(tied.sum()) > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks / (k - 1)


def arrol_vote(answers: Sequence[Hashable | None], head_scores: Sequence[float] | torch.Tensor) -> Hashable | None:
    """Vote weighted by the quality head's rank weights (§4.4)."""
    return weighted_vote(answers, rank_weights(head_scores))
