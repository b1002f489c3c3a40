"""AUC estimators over survivors: the AUC over every rollout before pruning, from the rollouts a prune kept.

- ``weighted_within_group_auc``: the AUC over pairs of one group with each pair weighted (``inverse_survival`` gives
  the weights, 1/p), which undoes a prune's selection of survivors drawn independently; ``weighted_pair_sums`` its
  numerator and denominator.
- ``survivor_aucs``: the pooled AUC and the AUC within groups with each pair of one group weighted by its own chance
  of surviving, whatever the draw (``pair_auc_sums`` per row, ``pooled_auc`` the pooled one from them).
"""

from __future__ import annotations

import torch

from .sampling import group_inclusion


def weighted_within_group_auc(
    scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor
) -> float:
    """:func:`~arrol_pl.core.metrics.within_group_auc` with each (correct i, incorrect j) pair of one group counted
    ``w_i w_j``.

    ``scores, labels, group_ids, weights: (N,)``, weights finite and >= 0. With ``w = 1/p``, p each survivor's
    probability of surviving the prune, drawn independently, a pair of survivors counts 1/(p_i p_j), the inverse of
    its chance to be observed: the result estimates the AUC over each group's rollouts before pruning (a ratio of
    Horvitz–Thompson sums, consistent over many groups), where the plain AUC of the survivors reads the order of
    the rollouts the rule chose to keep. NaN when no group has a correct and an incorrect row of positive weight.
    A draw of fixed size pairs its survivors with other chances: :func:`survivor_aucs`.
    """
    right, pairs = weighted_pair_sums(scores, labels, group_ids, weights)
    return right / pairs if pairs else float("nan")


def weighted_pair_sums(
    scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor
) -> tuple[float, float]:
    """:func:`weighted_within_group_auc`'s numerator and denominator: the weight of the (correct, incorrect) pairs of
    one group ordered right (ties 1/2) and of them all. O(N log N)."""
    scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
    labels = torch.as_tensor(labels).flatten().to(torch.bool)
    group_ids = torch.as_tensor(group_ids).flatten().to(torch.long)
    weights = torch.as_tensor(weights, dtype=torch.float64).flatten()
    n = scores.numel()
    if not labels.numel() == group_ids.numel() == weights.numel() == n:
        raise ValueError(
            f"scores, labels, group_ids and weights differ in length: {n}, {labels.numel()}, "
            f"{group_ids.numel()}, {weights.numel()}"
        )
    if n == 0:
        return 0.0, 0.0
    # rows sorted by group, then score; a "block" is a run of equal scores within one group
    by_score = torch.sort(scores, stable=True).indices
    order = by_score[torch.sort(group_ids[by_score], stable=True).indices]
    s, y, g, w = scores[order], labels[order], group_ids[order], weights[order]
    new_group = torch.ones(n, dtype=torch.bool)
    new_group[1:] = g[1:] != g[:-1]
    new_block = new_group.clone()
    new_block[1:] |= s[1:] != s[:-1]
    index = torch.arange(n)
    group_start = torch.cummax(torch.where(new_group, index, 0), 0).values
    block_start = torch.cummax(torch.where(new_block, index, 0), 0).values
    wrong = torch.where(y, 0.0, w)  # each row's weight as an incorrect one
    wrong_before = torch.cumsum(wrong, 0) - wrong  # over all groups, up to the row
    block_id = torch.cumsum(new_block.long(), 0) - 1
    wrong_in_block = torch.zeros(int(block_id[-1]) + 1, dtype=torch.float64).index_add_(0, block_id, wrong)
    below = wrong_before[block_start] - wrong_before[group_start]  # incorrect weight of the group scored lower
    right = float((w[y] * (below[y] + 0.5 * wrong_in_block[block_id[y]])).sum())
    group_id = torch.cumsum(new_group.long(), 0) - 1
    pos = torch.zeros(int(group_id[-1]) + 1, dtype=torch.float64).index_add_(0, group_id, torch.where(y, w, 0.0))
    neg = torch.zeros_like(pos).index_add_(0, group_id, wrong)
    return right, float((pos * neg).sum())


def pair_auc_sums(
    scores: torch.Tensor,
    labels: torch.Tensor,
    group_ids: torch.Tensor,
    survival: torch.Tensor,
    joint: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row ``(N,)`` each, the (correct, incorrect) pairs of one group it forms with the rows after it, each
    counted 1/π_ij, the chance both survived (:func:`~arrol_pl.core.sampling.group_inclusion` from ``survival``
    and the draw's ``joint`` rows; 0 where π_ij = 0): their weight ordered right (ties 1/2) and their weight. Summed
    over rows, the numerator and denominator of the AUC within groups over every rollout before pruning; a pair sits
    on its earlier row, so a window that forgets its oldest rows first forgets a pair with its first row. Group by
    group, O(N·G)."""
    scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
    labels = torch.as_tensor(labels).flatten().to(torch.bool)
    n = scores.numel()
    if labels.numel() != n or torch.as_tensor(group_ids).numel() != n or torch.as_tensor(survival).numel() != n:
        raise ValueError(f"scores ({n}), labels ({labels.numel()}), group_ids and survival differ in length")
    index, valid, inclusion = group_inclusion(group_ids, survival, joint)  # (K, M) rows of each group, in order
    s, y = scores[index], labels[index]
    m = index.shape[1]
    later = torch.ones(m, m, dtype=torch.bool).triu(1)
    pair = later & valid[:, :, None] & valid[:, None, :] & (y[:, :, None] != y[:, None, :])
    tiny = torch.finfo(torch.float64).tiny
    weight = torch.where(pair & (inclusion > 0), 1.0 / inclusion.clamp(min=tiny), 0.0)
    margin = torch.where(y[:, :, None], s[:, :, None] - s[:, None, :], s[:, None, :] - s[:, :, None])
    right = (weight * ((margin > 0).to(torch.float64) + 0.5 * (margin == 0).to(torch.float64))).sum(2)
    out_right = torch.zeros(n, dtype=torch.float64)
    out_total = torch.zeros(n, dtype=torch.float64)
    out_right[index[valid]], out_total[index[valid]] = right[valid], weight.sum(2)[valid]
    return out_right, out_total


def survivor_aucs(
    scores: torch.Tensor,
    labels: torch.Tensor,
    group_ids: torch.Tensor,
    survival: torch.Tensor,
    joint: torch.Tensor | None = None,
) -> tuple[float, float]:
    """``(pooled AUC, AUC within groups)`` over every rollout before pruning, estimated from survivors ``scores,
    labels, group_ids, survival: (N,)``: a pair of one group counts 1/π_ij, from the draw's ``joint`` rows
    (:func:`~arrol_pl.core.sampling.joint_rows`) where they are known; pairs of different groups (drawn apart) and
    rows without them 1/(p_i p_j) (Horvitz–Thompson)."""
    w = inverse_survival(survival)
    if joint is None or bool(torch.isnan(torch.as_tensor(joint)[:, 0]).all()):
        return (
            weighted_within_group_auc(scores, labels, torch.zeros_like(torch.as_tensor(group_ids)), w),
            weighted_within_group_auc(scores, labels, group_ids, w),
        )
    right, total = (float(x.sum()) for x in pair_auc_sums(scores, labels, group_ids, survival, joint))
    return pooled_auc(scores, labels, group_ids, w, right, total), right / total if total else float("nan")


def pooled_auc(
    scores: torch.Tensor,
    labels: torch.Tensor,
    group_ids: torch.Tensor,
    weights: torch.Tensor,
    right_within: float,
    total_within: float,
) -> float:
    """The AUC over every pair: each pair at ``weights`` ``w_i w_j`` (1/(p_i p_j)) but those of one group, whose
    sums ``right_within`` and ``total_within`` come from their draw (:func:`pair_auc_sums`)."""
    right_all, total_all = weighted_pair_sums(scores, labels, torch.zeros_like(torch.as_tensor(group_ids)), weights)
    right_product, total_product = weighted_pair_sums(scores, labels, group_ids, weights)
    total = total_all - total_product + total_within
    right = right_all - right_product + right_within
    return right / total if total > 1e-12 * max(total_all, 1.0) else float("nan")


def inverse_survival(survival: torch.Tensor) -> torch.Tensor:
    """``(N,)`` survival probabilities p → ``(N,)`` float64 pair weights 1/p for :func:`weighted_within_group_auc`;
    0 where p = 0: such a row survived only by the per-group floor's revival, which no draw of p gives."""
    p = torch.as_tensor(survival, dtype=torch.float64).flatten()
    return torch.where(p > 0, 1.0 / p.clamp(min=torch.finfo(torch.float64).tiny), 0.0)
