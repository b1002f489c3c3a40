"""A torch-only simulation of ARRoL's pruning loop, for the self-check run and the balance tests.

Each prompt g has a difficulty a_g; each rollout i a latent success probability
``q*_i = sigmoid(a_g + spread · z_i)`` where z_i stands for what the partial rollout up to L_detect
reveals. Rewards are ``Y_i ~ Bernoulli(q*_i)``. The simulated quality head emits an *uncalibrated*
score ``s_i = scale · logit(q*_i) + shift + noise``, so the online calibrator has a real mapping to
learn. The loop follows Algorithm 1: h_t from the calibrator → prune at L_detect → survivors'
rewards → calibrator update (survivors weighted by 1/p when importance weighting is on).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .metrics import balance_stats
from .pruning import PruningConfig, build_pruner_params, decide_batch


@dataclass(frozen=True)
class SimulatedBatch:
    """``q_star, rewards, scores: (B, G)``."""

    q_star: torch.Tensor
    rewards: torch.Tensor
    scores: torch.Tensor


def sample_groups(
    num_groups: int,
    group_size: int,
    generator: torch.Generator,
    difficulty_mean: float = 0.0,
    difficulty_std: float = 1.5,
    spread: float = 2.0,
    score_scale: float = 0.7,
    score_shift: float = -0.5,
    score_noise: float = 0.5,
) -> SimulatedBatch:
    a = difficulty_mean + difficulty_std * torch.randn(num_groups, 1, generator=generator)
    logit_star = a + spread * torch.randn(num_groups, group_size, generator=generator)
    q_star = torch.sigmoid(logit_star)
    rewards = (torch.rand(num_groups, group_size, generator=generator) < q_star).float()
    scores = score_scale * logit_star + score_shift + score_noise * torch.randn(num_groups, group_size, generator=generator)
    return SimulatedBatch(q_star=q_star, rewards=rewards, scores=scores)


def run_pruning_simulation(
    config: PruningConfig, steps: int, num_groups: int, group_size: int, seed: int = 0, **group_kwargs: float
) -> list[dict[str, float]]:
    """Run ``steps`` simulated training steps; one dict of statistics per step."""
    gen = torch.Generator().manual_seed(seed)
    calibrator = config.make_calibrator()
    history = []
    group_ids = torch.arange(num_groups).repeat_interleave(group_size)
    eligible = torch.ones(num_groups * group_size, dtype=torch.bool)
    for step in range(steps):
        batch = sample_groups(num_groups, group_size, gen, **group_kwargs)
        params = build_pruner_params(config, calibrator, step)
        decision = decide_batch(params, batch.scores.flatten(), eligible, group_ids)
        keep = decision.keep
        rewards = batch.rewards.flatten()
        weights = 1.0 / decision.survival[keep] if config.importance_weighting else None
        calibrator.update(batch.scores.flatten()[keep], rewards[keep], weights, group_ids[keep])
        kept = balance_stats(rewards[keep], group_ids[keep])
        full = balance_stats(rewards, group_ids)
        history.append(
            {
                "step": step,
                "pruning_active": float(params.active),
                "keep_ratio": float(keep.float().mean()),
                "kept_balance": kept["balance"],
                "kept_zero_advantage_fraction": kept["zero_advantage_fraction"],
                "kept_positive_ratio": kept["positive_ratio"],
                "unpruned_balance": full["balance"],
                "unpruned_zero_advantage_fraction": full["zero_advantage_fraction"],
                "posterior_mae": float((decision.posterior - batch.q_star.flatten()).abs().mean()),
            }
        )
    return history
