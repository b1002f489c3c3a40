"""The keep/prune decisions drawn from h_t at L_detect (Algorithm 1 lines 20–22), per group and per batch.

A decision reads :class:`~arrol_pl.core.pruning.PrunerParams` (h_t): the policy's survival probabilities
(:data:`~arrol_pl.core.pruning.PRUNING_POLICIES`), then the draw (:mod:`~arrol_pl.core.sampling`) from a generator
seeded per (step seed, prompt index), then the per-group floor's revivals; :mod:`~arrol_pl.core.pruning` says why each
is so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .pruning import PRUNING_POLICIES, PrunerParams
from .sampling import DRAWS, fixed_size_draws, joint_by_sample_index, joint_rows


@dataclass(frozen=True)
class PruneDecision:
    """``keep``: (n,) bool; ``survival``: (n,) p_i; ``posterior``: (n,) q_i; ``inclusion``: (n, n) float64 π_ij, the
    chance that rollouts i and j both survive the draw (p_i on the diagonal)."""

    keep: torch.Tensor
    survival: torch.Tensor
    posterior: torch.Tensor
    inclusion: torch.Tensor


def floor_among_eligible(eligible: torch.Tensor, min_keep: int) -> torch.Tensor:
    """``eligible: (K, n)`` → ``(K,)`` the survivors the floor guarantees among each row's eligible rollouts: the
    floor less the rollouts kept anyway (finished before L_detect), at most the eligible ones."""
    eligible = torch.as_tensor(eligible, dtype=torch.bool)
    floor = min(min_keep, eligible.shape[1]) - (~eligible).sum(1)
    return torch.minimum(floor.clamp(min=0), eligible.sum(1))


def sample_keep(
    survival: torch.Tensor, uniforms: torch.Tensor, eligible: torch.Tensor, min_keep: int, draw: str = DRAWS[0]
) -> torch.Tensor:
    """Keep/prune for rows of groups (Algorithm 1 lines 20–22): ``survival, uniforms, eligible: (K, n)`` → keep
    ``(K, n)`` bool (:func:`draw_keep` without the pair probabilities)."""
    return draw_keep(survival, uniforms, eligible, min_keep, draw)[0]


def draw_keep(
    survival: torch.Tensor, uniforms: torch.Tensor, eligible: torch.Tensor, min_keep: int, draw: str = DRAWS[0]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep/prune for rows of groups: ``survival, uniforms, eligible: (K, n)`` → ``(keep (K, n) bool, inclusion
    (K, n, n) float64)``. Each row is drawn by ``draw`` (:mod:`~arrol_pl.core.sampling`) from its uniforms, with
    survival p (ineligible rollouts 1: they always survive); a row left below ``min_keep`` survivors revives its
    highest-p pruned rollouts, ties broken by the draw (random among equals). ``inclusion`` is the draw's π_ij."""
    p = torch.where(eligible, survival.to(torch.float64), 1.0)
    if draw == "independent":  # one comparison for every row
        keep = uniforms < p
        inclusion = p[:, :, None] * p[:, None, :]
        inclusion.diagonal(dim1=1, dim2=2).copy_(p)
    elif draw == "fixed_size":
        keep, inclusion = fixed_size_draws(p, uniforms)
    else:
        raise ValueError(f"unknown draw {draw!r}; choose one of {', '.join(DRAWS)}")
    return _revive(keep, survival, uniforms, min_keep), inclusion


def _revive(keep: torch.Tensor, survival: torch.Tensor, uniforms: torch.Tensor, min_keep: int) -> torch.Tensor:
    """The per-group floor: each row of ``keep (K, n)`` left below ``min_keep`` survivors gets back its highest-p
    pruned rollouts, ties broken by the draw."""
    deficit = min_keep - keep.sum(1, keepdim=True).clamp(max=min_keep)
    if not bool((deficit > 0).any()):
        return keep
    by_draw = torch.argsort(uniforms, dim=1, stable=True)
    key = torch.where(keep, float("-inf"), survival.to(torch.float64)).gather(1, by_draw)
    order = by_draw.gather(1, torch.argsort(-key, dim=1, stable=True))  # pruned by p descending, then by draw
    revive = torch.zeros_like(keep)
    revive.scatter_(1, order, torch.arange(keep.shape[1]).expand_as(keep) < deficit)
    return keep | (revive & ~keep)


def decide_group(
    params: PrunerParams, scores: torch.Tensor, eligible: torch.Tensor, generator: torch.Generator
) -> PruneDecision:
    """Sample the keep/prune decision for the rollouts of one group (Algorithm 1 lines 20–22).

    Args:
        scores: ``(n,)`` raw quality-head logits at L_detect.
        eligible: ``(n,)`` bool, False for rollouts that finished before L_detect (always kept).
        generator: from :meth:`PrunerParams.group_generator`.
    """
    return decide_groups(params, [scores], [eligible], [generator])[0]


def decide_groups(
    params: PrunerParams,
    scores: Sequence[torch.Tensor],
    eligible: Sequence[torch.Tensor],
    generators: Sequence[torch.Generator],
) -> list[PruneDecision]:
    """:func:`decide_group` for many groups at once, each with its own generator (so a group's decision does not
    depend on which others it is decided with); groups of one size share one draw call."""
    decisions: list[PruneDecision | None] = [None] * len(scores)
    rule = PRUNING_POLICIES.get(params.policy)
    scores = [torch.as_tensor(s, dtype=torch.float32).flatten() for s in scores]
    eligible = [torch.as_tensor(e, dtype=torch.bool).flatten() for e in eligible]
    for s, e in zip(scores, eligible):
        if e.numel() != s.numel():
            raise ValueError(f"eligible has {e.numel()} entries for {s.numel()} scores")
    posteriors = params.posterior(torch.cat(scores)).split([s.numel() for s in scores]) if scores else []
    # Drawn for every group, even inactive, so the random stream does not depend on the cold-start state.
    uniforms = [torch.rand(s.numel(), generator=g) for s, g in zip(scores, generators)]
    decided = not params.active or params.policy == "none"
    whole: dict[int, list[int]] = {}  # groups of n rollouts, all eligible: one call of the rule for all of them
    pending: dict[int, list[tuple[int, torch.Tensor]]] = {}
    for k, (group_scores, group_eligible, q) in enumerate(zip(scores, eligible, posteriors)):
        n = group_scores.numel()
        if decided or not bool(group_eligible.any()):
            p = torch.ones(n, dtype=torch.float32)
            decisions[k] = PruneDecision(torch.ones(n, dtype=torch.bool), p, q, torch.ones(n, n, dtype=torch.float64))
        elif bool(group_eligible.all()):
            whole.setdefault(n, []).append(k)
        else:
            floor = floor_among_eligible(group_eligible.unsqueeze(0), params.min_keep_per_group)
            p = torch.ones(n, dtype=torch.float32)
            p[group_eligible] = rule(
                params, q[group_eligible].unsqueeze(0), group_scores[group_eligible].unsqueeze(0), floor
            )[0].to(torch.float32)
            pending.setdefault(n, []).append((k, p))
    for n, ks in whole.items():
        floor = floor_among_eligible(torch.ones(len(ks), n, dtype=torch.bool), params.min_keep_per_group)
        q, s = torch.stack([posteriors[k] for k in ks]), torch.stack([scores[k] for k in ks])
        pending.setdefault(n, []).extend(zip(ks, rule(params, q, s, floor).to(torch.float32)))
    for n, rows in pending.items():
        rows.sort(key=lambda row: row[0])
        keep, inclusion = draw_keep(
            torch.stack([p for _, p in rows]),
            torch.stack([uniforms[k] for k, _ in rows]),
            torch.stack([eligible[k] for k, _ in rows]),
            min(params.min_keep_per_group, n),
            params.draw,
        )
        for j, (k, p) in enumerate(rows):
            decisions[k] = PruneDecision(keep[j], p, posteriors[k], inclusion[j])
    return decisions


@dataclass(frozen=True)
class BatchDecision:
    """:func:`decide_batch`'s answer for a flat batch of N rollouts: ``keep``, ``survival``, ``posterior`` ``(N,)``
    as in :class:`PruneDecision`, and ``joint`` ``(N, 1 + G)``, each rollout's π row within its group
    (:func:`~arrol_pl.core.sampling.joint_rows`: column 0 its index in the group); rollouts of different groups are
    drawn apart (π = p_i p_j), so no (N, N) matrix is built."""

    keep: torch.Tensor
    survival: torch.Tensor
    posterior: torch.Tensor
    joint: torch.Tensor


def decide_batch(
    params: PrunerParams,
    scores: torch.Tensor,
    eligible: torch.Tensor,
    group_ids: torch.Tensor,
    sample_index: Sequence[int] | None = None,
) -> BatchDecision:
    """:func:`decide_group` over every group of a flat batch. ``group_ids: (N,)`` prompt indices; ``sample_index``
    each rollout's index in its group (default: its order among the group's rows), which names the columns of its
    ``joint`` row."""
    scores = torch.as_tensor(scores, dtype=torch.float32).flatten()
    eligible = torch.as_tensor(eligible, dtype=torch.bool).flatten()
    group_ids = torch.as_tensor(group_ids, dtype=torch.long).flatten()
    keep = torch.ones(scores.numel(), dtype=torch.bool)
    survival = torch.ones(scores.numel(), dtype=torch.float32)
    posterior = torch.zeros(scores.numel(), dtype=torch.float32)
    members = [torch.nonzero(group_ids == g, as_tuple=True)[0] for g in torch.unique(group_ids).tolist()]
    decisions = decide_groups(
        params,
        [scores[idx] for idx in members],
        [eligible[idx] for idx in members],
        [params.group_generator(int(group_ids[idx[0]])) for idx in members],
    )
    index = [0] * scores.numel()
    rows: list[tuple[float, ...] | None] = [None] * scores.numel()
    for idx, d in zip(members, decisions):
        keep[idx], survival[idx], posterior[idx] = d.keep, d.survival, d.posterior
        order = list(range(idx.numel())) if sample_index is None else [int(sample_index[i]) for i in idx]
        for i, k, row in zip(idx.tolist(), order, joint_by_sample_index(d.inclusion, order)):
            index[i], rows[i] = k, row
    return BatchDecision(keep, survival, posterior, joint_rows(index, rows))
