"""Evaluation and diagnostic metrics.

- ``pass_at_k``: the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``.
- ``mean_accuracy`` (avg@k) and ``vote_accuracy`` (maj@k and weighted votes).
- ``balance_stats`` (paper Table 4): per-group positive ratio ρ̂, ρ̂(1-ρ̂) and the fraction of
  groups with zero advantage (all survivors share one reward, or fewer than 2 survivors).
- ``mean_sd_se``: mean ± sd with the standard error, over seeds, problems or groups; ``mean_of_estimates``:
  the mean of independent estimates with their standard errors combined (per-seed differences).
- ``within_block_slope``: a slope with its standard error within blocks (a study's ladder, seed by seed).
- ``time_to_reach``: the first time a ``(time, value)`` curve reaches a level (Fig. 4).
- ``binary_auc``, ``spearman`` (average ranks for ties) and ``expected_calibration_error`` for the
  quality head (Fig. 2).
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Sequence

import torch


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
    return sum(v for v, _ in estimates) / k, math.sqrt(sum(se ** 2 for _, se in estimates)) / k


def within_block_slope(points: Sequence[tuple[Hashable, float, float]]) -> tuple[float, float] | None:
    """The slope of y on x within blocks, and its standard error: ``points`` are ``(block, x, y)``, each block (a
    seed, whose runs share a baseline) centred on its own means, then least squares through the origin (the
    fixed-effects estimator). None when the centred x do not vary or too few points remain to estimate the noise."""
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
    return slope, math.sqrt(rss / dof / sxx)


def time_to_reach(curve: Sequence[tuple[float, float]], level: float) -> float | None:
    """First time at which ``curve`` (``(time, value)`` pairs in time order) reaches ``level`` (None: never)."""
    return next((t for t, v in curve if v >= level), None)


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
    labels = torch.as_tensor(labels).flatten().to(torch.bool)
    group_ids = torch.as_tensor(group_ids).flatten().to(torch.long)
    n = scores.numel()
    if n == 0:
        return float("nan")
    # rows sorted by group, then score; a "block" is a run of equal scores within one group
    by_score = torch.sort(scores, stable=True).indices
    order = by_score[torch.sort(group_ids[by_score], stable=True).indices]
    s, y, g = scores[order], labels[order], group_ids[order]
    new_group = torch.ones(n, dtype=torch.bool)
    new_group[1:] = g[1:] != g[:-1]
    new_block = new_group.clone()
    new_block[1:] |= s[1:] != s[:-1]
    index = torch.arange(n)
    group_start = torch.cummax(torch.where(new_group, index, 0), 0).values
    block_start = torch.cummax(torch.where(new_block, index, 0), 0).values
    negatives_before = torch.cumsum((~y).long(), 0) - (~y).long()  # wrong rows before each row, over all groups
    block_id = torch.cumsum(new_block.long(), 0) - 1
    negatives_in_block = torch.zeros(int(block_id[-1]) + 1, dtype=torch.long).index_add_(0, block_id, (~y).long())
    below = negatives_before[block_start] - negatives_before[group_start]  # wrong rows of the group scored lower
    right = float((below[y] + 0.5 * negatives_in_block[block_id[y]]).sum())
    group_id = torch.cumsum(new_group.long(), 0) - 1
    pos = torch.zeros(int(group_id[-1]) + 1, dtype=torch.long).index_add_(0, group_id, y.long())
    neg = torch.zeros_like(pos).index_add_(0, group_id, (~y).long())
    pairs = float((pos * neg).sum())
    return right / pairs if pairs else float("nan")


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
