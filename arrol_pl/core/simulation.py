"""A torch-only simulation of ARRoL's pruning loop, for the self-check run and the balance tests.

Each prompt g has a difficulty a_g; each rollout i a latent success probability
``q*_i = sigmoid(a_g + spread · z_i)`` where z_i stands for what the partial rollout up to L_detect
reveals. Rewards are ``Y_i ~ Bernoulli(q*_i)``. The simulated quality head emits an *uncalibrated*
score ``s_i = scale · logit(q*_i) + shift + noise``, so the online calibrator has a real mapping to
learn. :func:`sample_oracle_groups` draws a task of set pass rate scored by an oracle of set AUC instead, and
:func:`balance_cell` measures every survival rule on the same such groups (the model-free balance grid). The loop
follows Algorithm 1: h_t from the calibrator → prune at L_detect → survivors'
rewards → calibrator update (survivors weighted by 1/p when importance weighting is on, and their survival
probabilities kept for the gate's AUC).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .metrics import balance_stats
from .decisions import decide_batch, floor_among_eligible, sample_keep
from .pruning import PRUNING_POLICIES, PruningConfig, build_pruner_params
from .scorers import oracle_scores


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
    scores = (
        score_scale * logit_star + score_shift + score_noise * torch.randn(num_groups, group_size, generator=generator)
    )
    return SimulatedBatch(q_star=q_star, rewards=rewards, scores=scores)


def run_pruning_simulation(
    config: PruningConfig,
    steps: int,
    num_groups: int,
    group_size: int,
    seed: int = 0,
    oracle: tuple[float, float, float] | None = None,
    **group_kwargs: float,
) -> list[dict[str, float]]:
    """Run ``steps`` simulated training steps; one dict of statistics per step. ``oracle = (pass rate, AUC,
    concentration)`` draws the groups with :func:`sample_oracle_groups` instead of :func:`sample_groups`."""
    gen = torch.Generator().manual_seed(seed)
    calibrator = config.make_calibrator()
    history = []
    group_ids = torch.arange(num_groups).repeat_interleave(group_size)
    eligible = torch.ones(num_groups * group_size, dtype=torch.bool)
    for step in range(steps):
        batch = (
            sample_groups(num_groups, group_size, gen, **group_kwargs)
            if oracle is None
            else sample_oracle_groups(num_groups, group_size, oracle[0], oracle[1], gen, concentration=oracle[2])
        )
        params = build_pruner_params(config, calibrator, step)
        decision = decide_batch(params, batch.scores.flatten(), eligible, group_ids)
        keep = decision.keep
        rewards = batch.rewards.flatten()
        weights = 1.0 / decision.survival[keep] if config.importance_weighting else None
        calibrator.update(
            batch.scores.flatten()[keep],
            rewards[keep],
            weights,
            group_ids[keep],
            decision.survival[keep],
            decision.joint[keep],
        )
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


def sample_oracle_groups(
    num_groups: int,
    group_size: int,
    pass_rate: float,
    auc: float,
    generator: torch.Generator,
    concentration: float = 2.0,
) -> SimulatedBatch:
    """Groups of a task with mean pass rate ``pass_rate`` scored by an oracle of set ``auc``: each prompt's pass
    probability ``θ_g ~ Beta(π c, (1 - π) c)`` (``c = concentration``: the smaller, the more all-right and all-wrong
    groups), rewards ``Y ~ Bernoulli(θ_g)``, scores the outcome through Gaussian noise
    (:func:`~arrol_pl.core.scorers.oracle_scores`). ``q_star`` is θ_g for every rollout of the group."""
    if not 0.0 < pass_rate < 1.0:
        raise ValueError(f"pass_rate must be in (0, 1), got {pass_rate}")
    seed = int(torch.randint(2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # Beta takes no generator: seed a forked global stream from ours
        prior = torch.distributions.Beta(
            torch.tensor(pass_rate * concentration, dtype=torch.float64),
            torch.tensor((1.0 - pass_rate) * concentration, dtype=torch.float64),
        )
        theta = prior.sample((num_groups, 1)).clamp(1e-6, 1 - 1e-6)
    rewards = (torch.rand(num_groups, group_size, generator=generator, dtype=torch.float64) < theta).float()
    scores = oracle_scores(rewards.flatten(), auc, generator).reshape(num_groups, group_size)
    return SimulatedBatch(q_star=theta.expand(num_groups, group_size).float(), rewards=rewards, scores=scores)


def _kept_per_group(rewards: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rewards, keep: (K, G)`` → each group's kept positive ratio ρ̂, ρ̂(1-ρ̂) and zero-advantage flag, ``(K,)``."""
    kept = keep.sum(1).to(torch.float64)
    positives = (rewards.to(torch.float64) * keep).sum(1)
    ratio = positives / kept.clamp(min=1.0)
    zero = (kept < 2) | (positives == 0) | (positives == kept)
    return ratio, ratio * (1 - ratio), zero.to(torch.float64)


def kept_group_stats(rewards: torch.Tensor, keep: torch.Tensor) -> dict[str, float]:
    """Table 4's figures over groups of equal size, vectorised: ``rewards, keep: (K, G)`` → the mean kept positive
    ratio ρ̂, E[ρ̂(1-ρ̂)], the share of zero-advantage groups (fewer than 2 survivors, or one reward among them) and
    the kept share, as :func:`~arrol_pl.core.metrics.balance_stats` computes them group by group."""
    ratio, balance, zero = _kept_per_group(rewards, keep)
    return {
        "positive_ratio": float(ratio.mean()),
        "balance": float(balance.mean()),
        "zero_advantage_fraction": float(zero.mean()),
        "keep_ratio": float(keep.sum() / keep.numel()),
    }


def balance_cell(
    rules: dict[str, PruningConfig],
    pass_rate: float,
    auc: float,
    num_groups: int = 2048,
    group_size: int = 8,
    seed: int = 0,
    calibration_rows: int = 4096,
    baseline: str = "random",
) -> dict[str, dict[str, float]]:
    """One cell of the model-free balance grid: each rule's :func:`kept_group_stats` on the same groups, scores and
    decision draws (common random numbers, so rules differ by their rule alone). Each rule's h_t comes from
    :func:`~arrol_pl.core.pruning.build_pruner_params` over a calibrator that has seen ``calibration_rows`` labelled
    rollouts of the same task, as an online calibrator has after its cold start. ``"none"`` is added: no pruning.
    Where ``rules`` holds ``baseline``, every rule also gets its differences to it, paired by group, with their
    standard errors: ``balance_gain``, ``balance_gain_se``, ``zero_advantage_change``, ``zero_advantage_change_se``."""
    gen = torch.Generator().manual_seed(seed)
    warm = sample_oracle_groups(max(1, calibration_rows // group_size), group_size, pass_rate, auc, gen)
    batch = sample_oracle_groups(num_groups, group_size, pass_rate, auc, gen)
    uniforms = torch.rand(num_groups, group_size, generator=gen)
    eligible = torch.ones(num_groups, group_size, dtype=torch.bool)
    warm_groups = torch.arange(warm.rewards.shape[0]).repeat_interleave(group_size)
    keeps = {"none": eligible}
    for name, config in rules.items():
        calibrator = config.make_calibrator()
        calibrator.update(warm.scores.flatten(), warm.rewards.flatten(), groups=warm_groups)
        params = build_pruner_params(replace(config, cold_start_steps=0, gate_auc=None), calibrator, step=0)
        floor = floor_among_eligible(eligible, params.min_keep_per_group)
        survival = PRUNING_POLICIES.get(params.policy)(params, params.posterior(batch.scores), batch.scores, floor)
        keeps[name] = sample_keep(survival, uniforms, eligible, min(params.min_keep_per_group, group_size), params.draw)
    out = {name: kept_group_stats(batch.rewards, keep) for name, keep in keeps.items()}
    if baseline in keeps:
        _, base_balance, base_zero = _kept_per_group(batch.rewards, keeps[baseline])
        for name, keep in keeps.items():
            _, balance, zero = _kept_per_group(batch.rewards, keep)
            for key, diff in (("balance_gain", balance - base_balance), ("zero_advantage_change", zero - base_zero)):
                out[name][key] = float(diff.mean())
                out[name][f"{key}_se"] = float(diff.std() / num_groups**0.5) if num_groups > 1 else float("nan")
    return out
