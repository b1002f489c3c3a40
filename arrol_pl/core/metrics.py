"""Evaluation and diagnostic metrics.

- ``pass_at_k``: the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``.
- ``mean_accuracy`` (avg@k) and ``vote_accuracy`` (maj@k and weighted votes).
- ``balance_stats`` (paper Table 4): per-group positive ratio ρ̂, ρ̂(1-ρ̂) and the fraction of
  groups with zero advantage (all survivors share one reward, or fewer than 2 survivors).
- ``mean_sd_se``: mean ± sd with the standard error, over seeds, problems or groups; ``mean_of_estimates``:
  the mean of independent estimates with their standard errors combined (per-seed differences).
- ``within_block_slope``: a slope with its standard error and degrees of freedom within blocks (a study's ladder,
  seed by seed).
- ``t_quantile``: Student's t quantile, by bisection on its CDF (the regularized incomplete beta, by its continued
  fraction; standard library only, no scipy), so a judgement over 3–5 seeds uses t_{0.975, df} (4.30, 3.18, 2.78 at
  df 2, 3, 4), not the normal 1.96 that "two standard errors" stands for. ``min_detectable_effect``: the smallest
  true effect a comparison detects at 80 % power, (t_{1−α/2, df} + t_{power, df})·SE, stated where an estimate is
  not distinguishable from 0 instead of calling it tied.
- ``time_to_reach``: the first time a ``(time, value)`` curve reaches a level (Fig. 4); ``reach_share``: when a curve
  reaches a reference's final value, as a share of the time the reference itself first reached it (1.0 for a curve
  against itself), never of the reference's whole run.
- ``binary_auc``, ``spearman`` (average ranks for ties) and ``expected_calibration_error`` for the
  quality head (Fig. 2); ``within_group_auc`` over pairs of one group. The AUCs over every rollout before pruning
  estimated from the survivors (pairs weighted by their chance to survive) are :mod:`~arrol_pl.core.survivor_auc`'s.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Hashable, Sequence

import torch

from .survivor_auc import weighted_within_group_auc


def mean_sd_se(values: Sequence[float] | torch.Tensor) -> tuple[float, float, float]:
    """Mean, sample standard deviation (n − 1) and standard error of the mean of ``values`` (a sequence
    or a tensor, flattened): how every "mean ± sd (SE)" of the reports is computed. The sd and SE are
    NaN below two values, the mean below one."""
    x = torch.as_tensor(values, dtype=torch.float64).flatten()
    n = x.numel()
    nan = float("nan")
    if n < 2:
        return (float(x.mean()) if n else nan), nan, nan
    sd = float(x.std())
    return float(x.mean()), sd, sd / math.sqrt(n)


def mean_of_estimates(estimates: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The mean of independent estimates ``(value, standard error)`` and its standard error, sqrt(Σ se²) / k."""
    k = len(estimates)
    return sum(v for v, _ in estimates) / k, math.sqrt(sum(se**2 for _, se in estimates)) / k


def within_block_slope(points: Sequence[tuple[Hashable, float, float]]) -> tuple[float, float, int] | None:
    """The slope of y on x within blocks, its standard error and the residual degrees of freedom: ``points`` are
    ``(block, x, y)``, each block (a seed, whose runs share a baseline) centred on its own means, then least squares
    through the origin (the fixed-effects estimator; points − blocks − 1 degrees of freedom). None when the centred x
    do not vary or too few points remain to estimate the noise."""
    blocks: dict[Hashable, list[tuple[float, float]]] = {}
    for block, x, y in points:
        blocks.setdefault(block, []).append((x, y))
    centred = []
    for members in blocks.values():
        mx, my = sum(x for x, _ in members) / len(members), sum(y for _, y in members) / len(members)
        centred += [(x - mx, y - my) for x, y in members]
    sxx = sum(x * x for x, _ in centred)
    dof = len(centred) - len(blocks) - 1
    if sxx <= 0 or dof < 1:
        return None
    slope = sum(x * y for x, y in centred) / sxx
    rss = sum((y - slope * x) ** 2 for x, y in centred)
    return slope, math.sqrt(rss / dof / sxx), dof


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes' ``betacf``),
    which converges fast for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):  # the odd step
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"the incomplete beta fraction did not converge at x={x}, a={a}, b={b}")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) = B(x; a, b) / B(a, b) for 0 ≤ x ≤ 1, a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b  # I_x(a, b) = 1 − I_{1−x}(b, a)


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` > 0 degrees of freedom (``math.inf``: the standard normal)."""
    if math.isinf(df):
        return NormalDist().cdf(t)
    tail = 0.5 * regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` > 0 degrees of freedom (``math.inf``: the normal's), by
    bisection on :func:`t_cdf` to 1e-12: t_quantile(0.975, 2) = 4.303, (0.975, 4) = 2.776, (0.975, inf) = 1.960."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:  # the upper bracket: the quantile grows without bound as df → 0 and p → 1
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def min_detectable_effect(se: float, df: float, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest true effect that a two-sided test at level ``alpha`` on an estimate with standard error ``se``
    and ``df`` degrees of freedom detects with probability ``power``: (t_{1−α/2, df} + t_{power, df})·SE (the
    usual approximation of the noncentral t). With 80 % power and α = 0.05: 2.80·SE in the normal limit, 5.36·SE at
    df 2. What the page states where an estimate is not distinguishable from 0."""
    return (t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)) * se


def time_to_reach(curve: Sequence[tuple[float, float]], level: float) -> float | None:
    """First time at which ``curve`` (``(time, value)`` pairs in time order) reaches ``level`` (None: never)."""
    return next((t for t, v in curve if v >= level), None)


def reach_share(curve: Sequence[tuple[float, float]], reference: Sequence[tuple[float, float]]) -> float | None:
    """When ``curve`` first reaches ``reference``'s final value, over when ``reference`` itself first reached it
    (both ``(time, value)`` in time order; Fig. 4's "time to GRPO's final accuracy"): 1.0 for a curve against
    itself, below 1 for a curve that gets there sooner. None: ``curve`` never reaches it; NaN: ``reference`` stood
    at its final value from its first point, so there is no time of its own to compare with."""
    level = reference[-1][1]
    own, ours = time_to_reach(reference, level), time_to_reach(curve, level)
    if ours is None:
        return None
    return ours / own if own > 0 else math.nan


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples (drawn without replacement from n with c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_accuracy(correct: Sequence[Sequence[bool]]) -> float:
    """avg@k: the mean correctness over all problems and samples (problems weighted equally)."""
    if not correct:
        raise ValueError("mean_accuracy needs at least one problem")
    return sum(sum(map(float, row)) / len(row) for row in correct) / len(correct)


def voted_answer_correct(answers: Sequence[Hashable | None], correct: Sequence[bool], winner: Hashable | None) -> bool:
    """A voted answer is correct when any sample carrying it was judged correct."""
    return winner is not None and any(c for a, c in zip(answers, correct) if a == winner)


def vote_accuracy(
    answers: Sequence[Sequence[Hashable | None]],
    correct: Sequence[Sequence[bool]],
    vote: Callable[..., Hashable | None],
    weights: Sequence[Sequence[float]] | None = None,
) -> float:
    """Fraction of problems whose voted answer is correct (maj@k with ``vote=majority_vote``).

    The voted answer counts as correct when any sample carrying that answer was judged correct.
    """
    hits = 0.0
    for i, (ans, cor) in enumerate(zip(answers, correct)):
        winner = vote(ans) if weights is None else vote(ans, weights[i])
        hits += float(voted_answer_correct(ans, cor, winner))
    return hits / len(answers)


def balance_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Table 4 statistics over groups: mean ρ̂, mean ρ̂(1-ρ̂), fraction of zero-advantage groups."""
    rewards = torch.as_tensor(rewards, dtype=torch.float64).flatten()
    group_ids = torch.as_tensor(group_ids).flatten()
    ratios, degenerate = [], 0
    groups = torch.unique(group_ids)
    for g in groups:
        r = rewards[group_ids == g]
        rho = float(r.mean())
        ratios.append(rho)
        degenerate += int(r.numel() < 2 or bool((r == r[0]).all()))
    rho_t = torch.tensor(ratios, dtype=torch.float64)
    return {
        "positive_ratio": float(rho_t.mean()),
        "balance": float((rho_t * (1 - rho_t)).mean()),
        "zero_advantage_fraction": degenerate / len(ratios),
    }


def average_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n with ties sharing their average rank."""
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(1, x.numel() + 1, dtype=torch.float64)
    uniq, inverse = torch.unique(x, return_inverse=True)
    sums = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, ranks)
    counts = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, torch.ones_like(ranks))
    return (sums / counts)[inverse]


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman rank correlation (Pearson on average ranks); NaN when either side is constant."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(torch.sqrt((rx**2).sum() * (ry**2).sum()))
    return float("nan") if denom == 0 else float((rx * ry).sum()) / denom


def binary_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC by the Mann–Whitney statistic (ties count 1/2); NaN when one class is absent."""
    scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
    labels = torch.as_tensor(labels).flatten().to(torch.bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = average_ranks(scores)
    return (float(ranks[labels].sum()) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def within_group_auc(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> float:
    """AUC over the (correct, incorrect) pairs of the *same* group: the share ordered right, ties 1/2.

    What balance and votes need: pruning and voting compare rollouts of one prompt, where the
    difficulty signal that lifts a pooled AUC is shared. ``scores, labels, group_ids: (N,)``; NaN when
    no group has both outcomes. O(N log N): the gate reads it over the calibrator's whole window every step.
    """
    scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
    return weighted_within_group_auc(scores, labels, group_ids, torch.ones_like(scores))


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, num_bins: int = 10) -> float:
    """ECE with ``num_bins`` equal-width bins: Σ_b (n_b/N) |mean(label) - mean(prob)|."""
    probs = torch.as_tensor(probs, dtype=torch.float64).flatten()
    labels = torch.as_tensor(labels, dtype=torch.float64).flatten()
    if probs.numel() == 0:
        raise ValueError("expected_calibration_error needs at least one prediction")
    idx = torch.clamp((probs * num_bins).long(), max=num_bins - 1)
    ece = 0.0
    for b in range(num_bins):
        sel = idx == b
        if sel.any():
            ece += float(sel.sum()) / probs.numel() * abs(float(labels[sel].mean() - probs[sel].mean()))
    return ece
