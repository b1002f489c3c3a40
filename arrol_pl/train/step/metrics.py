"""A training step's history row, before its times and skip counts (the module adds those): the rewards, the
generation and pruning, the balance of the survivors' outcomes, the quality of the scores the decisions read, the
head's loss and the update's statistics. Every figure is over every rank's survivors (gathered) or reduced over
the ranks by the module.

The AUCs of the scores (``scorer/auc``, ``scorer/within_auc``, ``head/auc``, ``head/within_auc``) are those of every
rollout of the step before pruning, estimated from the survivors, a pair counting 1/(p_i p_j)
(:func:`~arrol_pl.core.survivor_auc.weighted_within_group_auc`): exact where the step pruned nothing (the cold start, a
closed gate: every p is 1), and the scorer's exact in the oracle's round, which decodes every rollout. The
survivors' own, ``scorer/auc_survivors`` and ``scorer/within_auc_survivors``, read the order of what the rule chose
to keep: the default rule keeps each group's two ends, and its survivors read above the scorer's AUC.

What the head phase (Algorithm 1 l. 10, the head's part) hands the row is a :class:`PruningUpdate`. Of the times,
the oracle's credited clock is :func:`credit_wall`'s. Besides the row, a step reports its sample texts
(:func:`sample_texts`) and, when a rank's rollouts were all pruned, a warning (:func:`skip_warning`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from arrol_pl.core.head_training import head_quality
from arrol_pl.core.metrics import balance_stats, binary_auc, within_group_auc
from arrol_pl.core.survivor_auc import survivor_aucs
from arrol_pl.train.step.rank_sync import RankSync


class AllSurvivors(NamedTuple):
    """Every rank's survivors of a step, gathered, ``(N,)`` each: prompt indices, detect-time scores (the
    scorer's, which the decisions read), labels (final correctness) and rewards."""

    group_ids: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    rewards: torch.Tensor
    survival: torch.Tensor
    """Each survivor's probability p of surviving the prune (1 where nothing could prune it)."""
    joint: torch.Tensor | None
    """``(N, 1 + G)``: the draw's pair chances (:func:`~arrol_pl.core.sampling.joint_rows`; None: independent)."""
    head_scores: torch.Tensor | None
    """With a scorer other than the head, the scores of the head the step started with (None with the head)."""
    every_rollout: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    """``(prompt indices, scores, labels)`` of every rollout, pruned ones included, where all outcomes are known
    (:attr:`~.rollouts.StepGroups.every_rollout`, gathered); None: the survivors' alone."""


class PruningUpdate(NamedTuple):
    """The head phase's result: the quality head's loss, the prompt head's metrics (named without a prefix;
    empty without a prompt stage) and the survivors they learned from."""

    head_loss: float
    prompt_head: dict[str, float]
    all_survivors: AllSurvivors


def trained(
    groups, pruner, learned: PruningUpdate, policy: dict[str, float], keep_ratio_target: float, calibrated: bool
) -> dict[str, float]:
    """A trained step's row from its groups (:class:`~.rollouts.StepGroups`), the pruner it generated with, the
    head phase's result and the update's ``policy`` statistics; ``calibrated``: the calibrator holds rows (the head's
    posteriors are defined)."""
    s = learned.all_survivors
    if s.head_scores is None:  # the head is the scorer: its scores are what the decisions read
        quality = head_quality(
            s.scores, pruner.posterior(s.scores) if calibrated else None, s.labels, s.group_ids, s.survival, s.joint
        )
    else:
        quality = head_quality(s.head_scores, None, s.labels, s.group_ids, s.survival, s.joint)
    return {
        **step_metrics(
            groups.scored,
            groups.generation,
            pruner,
            keep_ratio_target,
            s.rewards,
            s.labels,
            s.group_ids,
            quality,
            learned.head_loss,
            policy,
        ),
        **scorer_metrics(s.scores, s.labels, s.group_ids, s.survival, s.every_rollout, s.joint),
        **{f"screen/prompt_head_{k}": v for k, v in learned.prompt_head.items()},
        **groups.metrics,
    }


def skipped(groups, pruner, keep_ratio_target: float) -> dict[str, float]:
    """The row of a step that trained nothing (every rollout of a rank pruned): its generation and δ."""
    return {**generation_metrics(groups.generation, keep_ratio_target, pruner.active), "pruning/delta": pruner.delta}


def credit_wall(metrics: dict[str, float], history: list[dict[str, float]]) -> None:
    """Adds ``time/wall_credited`` to a row that has ``time/credit``: the oracle's modelled saving, this step's and
    every earlier row's in ``history``, apart from the measured clock (``time/wall``)."""
    if "time/credit" in metrics:
        credited = metrics["time/credit"] + sum(row.get("time/credit", 0.0) for row in history)
        metrics["time/wall_credited"] = metrics["time/wall"] - credited


def skip_warning(step: int, reason: str, rollouts: int, ranks: RankSync, skipped: int) -> str:
    """The warning of the rank whose ``rollouts`` were all pruned at ``step``; with several ranks it names the rank."""
    whose = f"all {rollouts} rollouts" + ("" if ranks.alone else f" of rank {ranks.rank}")
    return f"step {step} skipped ({reason}): {whose} were pruned; {skipped} steps skipped so far"


def sample_texts(groups, count: int) -> str:
    """The step's text sample (markdown): the first ``count`` survivors' completions, each with its reward and gold."""
    survivors = groups.survivors
    lines = [
        f"**reward {groups.scored.rewards[i]:.0f}**, gold `{survivors.golds[i]}`\n\n```\n{survivors.texts[i]}\n```"
        for i in range(min(count, len(survivors.texts)))
    ]
    return "\n\n".join(lines)


def step_metrics(
    scored,
    gen,
    pruner,
    keep_ratio_target: float,
    rewards: torch.Tensor,
    labels: torch.Tensor,
    group_ids: torch.Tensor,
    head: dict[str, float],
    head_loss: float,
    policy: dict[str, float],
) -> dict[str, float]:
    """A trained step's history row (before its times): rewards, generation and pruning, balance, the head's quality
    (``head``, from :func:`~arrol_pl.core.head_training.head_quality`) and loss, and the update's ``policy`` stats.
    ``rewards``, ``labels``, ``group_ids``: every rank's survivors, gathered."""
    metrics = {
        "reward/mean": float(rewards.mean()),
        "reward/accuracy": float(labels.mean()),
        **{k: float(v) for k, v in scored.metrics("reward/").items() if k.startswith("reward/frac_")},
        **generation_metrics(gen, keep_ratio_target, pruner.active),
        **balance_metrics(labels, group_ids),
        # undefined (one class, no posteriors yet): left out of the history
        **{f"head/{k}": v for k, v in head.items() if not math.isnan(v)},
        "head/loss": head_loss,
        **{f"policy/{k}": v for k, v in policy.items()},
        "pruning/delta": pruner.delta,
    }
    for key in ("window_auc", "window_within_auc"):  # undefined until the window holds both outcomes
        if math.isfinite(getattr(pruner, key)):  # (NaN breaks equality)
            metrics[f"pruning/{key}"] = getattr(pruner, key)
    return metrics


def scorer_metrics(
    scores: torch.Tensor,
    labels: torch.Tensor,
    group_ids: torch.Tensor,
    survival: torch.Tensor,
    every_rollout: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    joint: torch.Tensor | None = None,
) -> dict[str, float]:
    """The realised online AUC of the scores the decisions read (``pruning.scorer``'s, at L_detect), over the batch
    and within groups: ``scorer/auc`` and ``scorer/within_auc`` over every rollout before pruning (exact from
    ``every_rollout``, ``(prompt indices, scores, labels)`` of them all, else estimated from the survivors'
    ``scores, labels, group_ids, survival: (N,)`` and the draw's ``joint``), ``scorer/auc_survivors`` and
    ``scorer/within_auc_survivors``
    over the survivors as they are. Undefined ones (one class) left out."""
    if every_rollout is None:
        pooled, within = survivor_aucs(scores, labels, group_ids, survival, joint)
        every = {"scorer/auc": pooled, "scorer/within_auc": within}
    else:
        all_ids, all_scores, all_labels = every_rollout
        every = {
            "scorer/auc": binary_auc(all_scores, all_labels),
            "scorer/within_auc": within_group_auc(all_scores, all_labels, all_ids),
        }
    out = {
        **every,
        "scorer/auc_survivors": binary_auc(scores, labels),
        "scorer/within_auc_survivors": within_group_auc(scores, labels, group_ids),
    }
    return {k: v for k, v in out.items() if not math.isnan(v)}


def generation_metrics(result, keep_ratio_target: float, pruning_active: bool) -> dict[str, float]:
    rollouts = result.rollouts
    eligible = [r for r in rollouts if r.eligible]
    return {
        "pruning/keep_ratio": result.keep_ratio,
        "pruning/keep_ratio_target": keep_ratio_target if pruning_active else 1.0,
        "pruning/eligible_fraction": len(eligible) / max(len(rollouts), 1),
        "pruning/active": float(pruning_active),
        "tokens/generated": float(result.generated_tokens),
        "tokens/kept": float(sum(len(r.response_token_ids) for r in rollouts if not r.pruned)),
        "engine/detect_first": float(getattr(result, "detect_first", False)),
        "engine/steps": float(result.steps),
    }


def balance_metrics(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    stats = balance_stats(rewards, group_ids)
    return {
        "balance/positive_ratio": stats["positive_ratio"],
        "balance/rho_1_minus_rho": stats["balance"],
        "balance/zero_advantage_fraction": stats["zero_advantage_fraction"],
    }
