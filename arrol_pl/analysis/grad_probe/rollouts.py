"""The probe's data: the policy as a model directory, its rollouts from the vLLM engine (scored by the reward), and
the scorers the survival rules read, each with its calibrator.

Decisions:
- **Scorers.** The learned quality head, fitted on the engine's hidden state at L_detect of the head prompts'
  rollouts but a held-apart share of the prompts, on whose scores its calibrator is fitted (scores the head never
  trained on, as the online calibrator sees them: :mod:`arrol_pl.analysis.head_probe.fit`); and oracles of set AUCs
  (the outcome plus noise, :func:`~arrol_pl.core.scorers.oracle_scores`), which learn nothing, so their calibrators
  are fitted on every head-prompt rollout.
- **Bins.** One per 32 rollouts a calibrator is fitted on, at most 128 (the engine's 128 over its 4096-rollout
  window), unless ``calibration_bins`` says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.head_probe.fit import fit_calibrator, head_scores, split_by_problem, train_probe
from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.metrics import binary_auc, within_group_auc
from arrol_pl.core.scorers import oracle_scores
from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.prompts import PromptFormat, render_problems


@dataclass
class Rollouts:
    """One generation's rollouts, flattened in (prompt, sample) order, with their rewards and labels."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    features: torch.Tensor
    """``(N, D)`` the engine's hidden state at L_detect."""
    eligible: torch.Tensor
    """``(N,)`` reached L_detect unfinished."""
    rewards: torch.Tensor
    correct: torch.Tensor
    problem: torch.Tensor
    """``(N,)`` the prompt's index in its generation."""
    seconds: float
    step_seconds: list[float] = field(default_factory=list)
    """The generation's engine steps: seconds each, and how many requests each advanced (the decode-cost model's
    data, :mod:`arrol_pl.core.decode_cost`)."""
    step_requests: list[int] = field(default_factory=list)


def policy_directory(config: GradProbeConfig) -> Path:
    """The policy as a model directory: ``tiny`` built (or found) as the default experiment builds it for this
    ``data``, ``smollm2`` converted, or the directory given."""
    if config.policy == "smollm2":
        from arrol_pl.models.smollm2 import prepare_smollm2

        return prepare_smollm2(config.cache_dir)
    if config.policy == "tiny":
        from arrol_pl.train.config.model import ModelConfig
        from arrol_pl.train.config.sections import TrainerConfig
        from arrol_pl.train.run.warmstart import prepare_tiny_policy

        return prepare_tiny_policy(
            ModelConfig(cache_dir=config.cache_dir), config.data, config.max_tokens, TrainerConfig.seed
        )
    return Path(config.policy)


def _generate(
    engine, reward, problems: list[Problem], samples: int, config: GradProbeConfig, sampling: dict[str, Any]
) -> Rollouts:
    """``samples`` rollouts per problem, scored."""
    result = engine.generate(
        [p.prompt for p in problems], samples, sampling, detect_length=config.detect_length, progress="generate"
    )
    rs = result.rollouts
    scored = reward.score(
        [r.text for r in rs],
        [problems[r.prompt_index].answer for r in rs],
        prompts=[problems[r.prompt_index].prompt for r in rs],
    )
    return Rollouts(
        [list(r.prompt_token_ids) for r in rs],
        [list(r.response_token_ids) for r in rs],
        torch.stack([r.feature for r in rs]).float(),
        torch.tensor([r.eligible for r in rs]),
        torch.as_tensor(scored.rewards, dtype=torch.float32),
        torch.as_tensor(scored.correct, dtype=torch.float32),
        torch.tensor([r.prompt_index for r in rs]),
        result.wall_seconds,
        list(result.step_seconds),
        list(result.step_requests),
    )


def sample_rollouts(
    policy: Path,
    problem_sets: Sequence[list[Problem]],
    samples: Sequence[int],
    config: GradProbeConfig,
    prompt_format: PromptFormat,
    trim: Callable[[int, list[Rollouts]], int] | None = None,
) -> list[Rollouts]:
    """``samples[i]`` rollouts per problem of ``problem_sets[i]`` (prompts placed in ``prompt_format``), from one
    engine on ``policy``, each set scored. ``trim(i, done)``: how many of set i's problems to sample, given the sets
    sampled before it (a budget), else all."""
    from transformers import AutoTokenizer

    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.tasks.reward_function import make_reward
    from arrol_pl.train.run.build import context_length

    tokenizer = AutoTokenizer.from_pretrained(policy)
    sets = [render_problems(problems, tokenizer, prompt_format) for problems in problem_sets]
    longest = context_length(tokenizer, [p for s in sets for p in s], config.max_tokens)
    engine = ArrolEngine(str(policy), EngineConfig(dtype=config.engine_dtype, max_model_len=longest), seed=config.seed)
    reward = make_reward(config.reward.function, config.reward.pool_config())
    sampling = {
        "temperature": config.temperature,
        "top_p": 1.0,
        "max_tokens": config.max_tokens,
        **prompt_format.sampling(),
    }
    try:
        done: list[Rollouts] = []
        for i, (problems, n) in enumerate(zip(sets, samples)):
            done.append(_generate(engine, reward, problems[: trim(i, done)] if trim else problems, n, config, sampling))
        return done
    finally:
        reward.close()
        engine.close()


def fit_scorers(
    config: GradProbeConfig, fitting: Rollouts, group_features: torch.Tensor, group_correct: torch.Tensor
) -> dict[str, tuple[BinnedCalibrator, torch.Tensor]]:
    """Per scorer (``head``, ``oracle_<auc>``): its calibrator and its scores of the batches' groups ``(P, G)``.
    The head learns on the head prompts' rollouts but a held-apart share, on which its calibrator is fitted; an
    oracle learns nothing, so its calibrator is fitted on every head-prompt rollout.
    ``group_features: (P, G, D)``, ``group_correct: (P, G)``."""
    settings = config.settings
    calibration = split_by_problem(fitting.problem, config.calibration_fraction, config.seed)

    def bins(rows: int) -> int:
        return settings.calibration_bins or min(128, max(1, rows // 32))

    head, _ = train_probe(fitting.features[~calibration], fitting.correct[~calibration], settings)
    p, g, d = group_features.shape
    labels = fitting.correct[calibration]
    scorers = {
        "head": (
            fit_calibrator(head_scores(head, fitting.features[calibration]), labels, bins(labels.numel())),
            head_scores(head, group_features.reshape(p * g, d)).view(p, g),
        )
    }
    for k, auc in enumerate(config.oracle_aucs):
        noise = torch.Generator().manual_seed(config.seed * 1_000 + k)
        scores = oracle_scores(fitting.correct, auc, noise)
        scorers[f"oracle_{auc:g}"] = (
            fit_calibrator(scores, fitting.correct, bins(scores.numel())),
            oracle_scores(group_correct.flatten(), auc, noise).view(p, g),
        )
    return scorers


def scorer_quality(
    scorers: dict[str, tuple[BinnedCalibrator, torch.Tensor]], correct: torch.Tensor
) -> dict[str, dict[str, float]]:
    """Each scorer's realised AUC on the batches' groups, pooled and within groups (what choosing among a group's
    rollouts can use), and its calibrator's bins."""
    groups = torch.arange(correct.shape[0]).unsqueeze(1).expand_as(correct).flatten()
    return {
        name: {
            "auc": binary_auc(scores.flatten(), correct.flatten()),
            "within_auc": within_group_auc(scores.flatten(), correct.flatten(), groups),
            "bins": calibrator.num_bins,
        }
        for name, (calibrator, scores) in scorers.items()
    }
