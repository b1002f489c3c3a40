"""Group-relative advantages over the surviving rollouts (paper §3; GRPO, Dr.GRPO) and DAPO's filter.

Decisions:
- Advantages are computed over each group's *survivors* only: pruned rollouts never reach the
  frontend (Algorithm 1 line 8).
- GRPO: ``A_i = (r_i - mean_g) / (std_g + eps)`` with the unbiased (n-1) std, as verl and TRL do.
- Dr.GRPO (Liu et al. 2025): ``A_i = r_i - mean_g``, no std normalisation.
- A group with fewer than 2 survivors has no baseline: its advantage is 0 (a deliberate choice: a lone survivor
  says nothing about its prompt's other answers). verl gives it ``r / (1 + eps)`` (mean 0, std 1; Dr.GRPO: ``r``);
  ``lone="verl"`` does the same (``algo.verl_parity``).
- DAPO dynamic sampling (Yu et al. 2025): drop groups whose survivors all share one reward.
"""

from __future__ import annotations

from typing import Callable

import torch

from .registry import Registry

ADVANTAGE_ESTIMATORS: Registry[Callable[..., torch.Tensor]] = Registry("advantage estimator")


def _group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group size, mean and unbiased std, each ``(N,)``; std is 0 for groups of size 1."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    v = values.to(torch.float64)
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(v))
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, v)
    mean = total / count
    sq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, (v - mean[inverse]) ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    return count[inverse], mean[inverse], std[inverse]


LONE_SURVIVOR = ("zero", "verl")
"""What a group of one gets: ``zero`` (no baseline, no signal) or ``verl`` (verl's mean 0, std 1)."""


def _lone(adv: torch.Tensor, rewards: torch.Tensor, count: torch.Tensor, lone: str, scale: float) -> torch.Tensor:
    if lone not in LONE_SURVIVOR:
        raise ValueError(f"lone={lone!r}; choose one of {list(LONE_SURVIVOR)}")
    alone = rewards.to(torch.float64) / scale if lone == "verl" else torch.zeros_like(adv)
    return torch.where(count >= 2, adv, alone).to(torch.float32)


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, lone: str = "zero"
) -> torch.Tensor:
    """``rewards: (N,)``, ``group_ids: (N,)`` → ``(N,)`` GRPO advantages (a singleton group: see ``lone``)."""
    count, mean, std = _group_stats(rewards, group_ids)
    centred = rewards.to(torch.float64) - mean
    # A constant group has centred == 0; guard the division so eps = 0 gives 0, not NaN.
    adv = centred / torch.where(std + eps > 0, std + eps, torch.ones_like(std))
    return _lone(adv, rewards, count, lone, 1.0 + eps)


@ADVANTAGE_ESTIMATORS.register("drgrpo", "dr_grpo")
def drgrpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, lone: str = "zero"
) -> torch.Tensor:
    """Dr.GRPO: mean-centred rewards, no std. ``(N,)`` → ``(N,)`` (a singleton group: see ``lone``)."""
    count, mean, _ = _group_stats(rewards, group_ids)
    adv = rewards.to(torch.float64) - mean
    return _lone(adv, rewards, count, lone, 1.0)


def compute_advantages(
    name: str, rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, lone: str = "zero"
) -> torch.Tensor:
    """Pick an estimator by name (``grpo`` | ``drgrpo``); ``lone``: :data:`LONE_SURVIVOR`."""
    return ADVANTAGE_ESTIMATORS.get(name)(rewards, group_ids, eps=eps, lone=lone)


def dynamic_sampling_mask(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """DAPO's filter: ``(N,)`` bool, True for rollouts in groups of >= 2 whose rewards differ."""
    count, _, std = _group_stats(rewards, group_ids)
    return (count >= 2) & (std > 0)
