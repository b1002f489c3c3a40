"""The probe's measures as pure functions of tensors: the cosine of two gradients, the held-out likelihood margin
between right and wrong answers, and the statistics over batches (mean ± standard error, paired differences; the t
quantile that judges them is :func:`~arrol_pl.core.metrics.t_quantile`).

Decisions:
- **A zero gradient aligns with nothing.** Its cosine to any gradient is 0 (a subset whose every group has one
  outcome, or one survivor, gives no update), not NaN, so a batch's paired differences stay defined.
- **The margin is taken within problems.** Per held-out problem with both outcomes: the mean over its correct
  rollouts of their mean per-token log-prob, minus the same over its wrong ones; then the mean over those problems.
  Taken within problems, it moves only when the policy prefers a right answer to a wrong answer of the same
  question, not when it grows surer of easy questions than of hard ones.
- **Paired by batch.** Every subset is measured on the same batches, so a difference between two subsets is the
  mean of the per-batch differences, its standard error theirs, with ``batches - 1`` degrees of freedom. A batch
  where a measure is undefined (NaN: the cosine of a batch whose reference gradient is 0) is left out of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from arrol_pl.core.metrics import mean_sd_se


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine of two flat ``(D,)`` vectors in float64; 0 when either is zero."""
    a, b = a.double().flatten(), b.double().flatten()
    norms = float(a.norm() * b.norm())
    return float(a @ b) / norms if norms > 0 else 0.0


def likelihood_margin(mean_log_probs: torch.Tensor, correct: torch.Tensor, groups: torch.Tensor) -> float:
    """Mean over the problems with both outcomes of (mean of the correct rollouts' ``mean_log_probs`` − mean of the
    wrong ones'); NaN when no problem has both.

    ``mean_log_probs: (N,)`` each rollout's mean per-token log-prob; ``correct: (N,)`` 0/1; ``groups: (N,)`` problems.
    """
    values = torch.as_tensor(mean_log_probs, dtype=torch.float64).flatten()
    correct = torch.as_tensor(correct).flatten().bool()
    groups = torch.as_tensor(groups).flatten()
    gaps = []
    for g in torch.unique(groups):
        member = groups == g
        right, wrong = values[member & correct], values[member & ~correct]
        if right.numel() and wrong.numel():
            gaps.append(float(right.mean() - wrong.mean()))
    return sum(gaps) / len(gaps) if gaps else float("nan")


def summary(per_batch: Sequence[float]) -> dict[str, float]:
    """``{"mean", "se", "n"}`` of one measure over the batches where it is defined (NaN: not defined there)."""
    values = [v for v in per_batch if math.isfinite(v)]
    mean, _, se = mean_sd_se(values)
    return {"mean": mean, "se": se, "n": len(values)}


def paired_difference(values: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """``{"mean", "se", "n", "df"}`` of ``values − baseline``, paired by batch (same length; the batches where both
    are defined)."""
    if len(values) != len(baseline):
        raise ValueError(f"paired values need as many batches: {len(values)} and {len(baseline)}")
    out = summary([v - b for v, b in zip(values, baseline)])
    return {**out, "df": out["n"] - 1}
