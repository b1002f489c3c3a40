"""The policy's update of one training step (Algorithm 1 line 10, the policy's part): verl's PPO over mini-batches
of whole groups, on the rows of the survivors that train.

Decisions:
- As verl: the old log-probs of the training rows are computed once per step, before the update and
  beside the reference's (the log-prob phase of Table 5, :func:`~arrol_pl.train.step.phases.logprob_phase`); the
  update then runs ``algo.ppo_epochs`` passes over ``prompts_per_step / ppo_mini_batch_size`` mini-batches of whole
  groups, one optimizer step each, so every mini-batch after the first is off-policy and the clip acts. With one
  mini-batch and one epoch the ratio is 1 and the update is plain on-policy GRPO: there ``algo.old_logprobs``
  (``auto``) skips that forward and takes π_old from the update's own log-probs, detached (as TRL does with one
  iteration); the engine-vs-trainer metrics and importance weights then use those.
- Each mini-batch's rows are re-batched into length buckets and its loss normaliser is the mini-batch's own, so
  bucketing does not change the loss.
- Several ranks (:class:`~arrol_pl.train.policy.collectives.UpdateRanks`): each mini-batch's normaliser is its count
  over all ranks, and every rank runs as many mini-batches and micro-batches as the busiest one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, ContextManager, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from arrol_pl.core.losses import PolicyLossOutput, batch_counts, ppo_clip_loss, truncated_is_weights
from arrol_pl.train.config.sections import AlgoConfig
from arrol_pl.train.policy.collectives import UpdateRanks
from arrol_pl.train.policy.logprobs import MicroBatch, gather_rows, make_micro_batches, response_log_probs


class UpdateContext(Protocol):
    """What the update reads of its step besides its rows (the step's
    :class:`~arrol_pl.train.step.context.StepContext` is one)."""

    algo: AlgoConfig
    timer: Callable[[str], ContextManager[None]]
    """``with timer("update"): ...`` adds the block's wall seconds to that phase."""
    ranks: UpdateRanks
    pad_id: int


@dataclass
class StepLogProbs:
    """The log-prob phase's output, per trained survivor index ``i``: ``(R_i,)`` tensors over its response.

    ``old``: π_old (the policy before this step's update; None when the update reuses its own detached
    log-probs, ``algo.reuses_old_logprobs``, and then also ``is_weights`` and ``metrics`` come from the update);
    ``ref``: π_ref (None without a KL term); ``rollout``: the engine's sampling log-probs (None when the engine
    returned none); ``is_weights``: truncated importance weights (None unless ``algo.rollout_is_cap``); ``metrics``:
    the engine-vs-trainer mismatch of :func:`logprob_mismatch`.
    """

    old: dict[int, torch.Tensor] | None
    ref: dict[int, torch.Tensor] | None
    rollout: dict[int, torch.Tensor] | None
    is_weights: dict[int, torch.Tensor] | None
    metrics: dict[str, float]


def logprob_mismatch(
    old: Sequence[torch.Tensor],
    rollout: Sequence[torch.Tensor],
    is_weights: Sequence[torch.Tensor] | None = None,
    cap: float | None = None,
) -> dict[str, float]:
    """Engine vs trainer on the same tokens: mean and max ``|log π_engine - log π_old|`` over all tokens
    (the first check when a vLLM-plus-trainer stack drifts); with importance weights, their mean and the
    fraction of tokens at the cap. Empty without tokens."""
    if not old:
        return {}
    diff = torch.cat([(o.float().cpu() - r.float().cpu()).abs() for o, r in zip(old, rollout)])
    out = {"engine_logprob_diff_mean": float(diff.mean()), "engine_logprob_diff_max": float(diff.max())}
    if is_weights is not None and cap is not None:
        w = torch.cat([x.float().cpu() for x in is_weights])
        out.update({"is_weight_mean": float(w.mean()), "is_capped_fraction": float((w >= cap).float().mean())})
    return out


def sum_norm(algo: AlgoConfig, width: int, n_seq: int) -> dict[str, int | float]:
    """``norm_length`` and ``total_seqs`` of a micro-batch's loss: seq-mean-token-sum-norm's L is
    ``algo.loss_scale_factor``, else ``max_response_tokens`` (verl parity: the padded ``width``), and with verl parity
    that mode sums the sequences (``total_seqs`` 1) where this project averages them."""
    if algo.verl_parity and algo.loss_agg_mode == "seq-mean-token-sum-norm":
        return {"norm_length": algo.loss_scale_factor or width, "total_seqs": 1}
    return {"norm_length": algo.loss_scale_factor or algo.max_response_tokens, "total_seqs": n_seq}


def ppo_mini_batches(group_ids: torch.Tensor, idx: Sequence[int], n: int) -> list[list[int]]:
    """Split the training rows ``idx`` into at most ``n`` mini-batches of whole groups, in prompt order.

    The groups left to train (after dynamic sampling) are divided as evenly as possible among the ``n``
    mini-batches, so every training step makes the same number of optimizer steps while at least ``n``
    groups train; a group's survivors always share a mini-batch (their advantages are relative to one
    another). Order is kept, as verl's actor does by default (``shuffle: false``): the dataloader already
    shuffles the prompts.
    """
    groups: dict[int, list[int]] = {}
    for i in idx:
        groups.setdefault(int(group_ids[i]), []).append(i)
    keys = list(groups)
    if not keys:
        return []
    chunks = np.array_split(np.arange(len(keys)), min(n, len(keys)))
    return [[i for k in chunk for i in groups[keys[k]]] for chunk in chunks]


_MEAN_STATS = (
    "clip_fraction",
    "clip_fraction_low",
    "clip_fraction_high",
    "dual_clip_fraction",
    "ppo_kl",
    "approx_kl",
    "ratio_mean",
    "kl",
)

POLICY_SUMMARY = (
    *_MEAN_STATS,
    "ratio_min",
    "ratio_max",
    "grad_norm",
    "optimizer_steps",
    "engine_logprob_diff_mean",
    "engine_logprob_diff_max",
)
"""``policy/*`` metrics whose run means ``summary.json`` reports."""


class _LossStats:
    """Token-weighted means, min and max of :class:`PolicyLossOutput` diagnostics over micro-batches."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.tokens = 0
        self.ratio_min, self.ratio_max = math.inf, -math.inf

    def add(self, out: PolicyLossOutput) -> None:
        if out.tokens == 0:
            return
        for key in _MEAN_STATS:
            self.sums[key] += float(getattr(out, key)) * out.tokens
        self.tokens += out.tokens
        self.ratio_min = min(self.ratio_min, float(out.ratio_min))
        self.ratio_max = max(self.ratio_max, float(out.ratio_max))

    def result(self) -> dict[str, float]:
        if not self.tokens:
            return {key: 0.0 for key in _MEAN_STATS} | {"ratio_min": 1.0, "ratio_max": 1.0, "ratio_mean": 1.0}
        return {key: self.sums[key] / self.tokens for key in _MEAN_STATS} | {
            "ratio_min": self.ratio_min,
            "ratio_max": self.ratio_max,
        }


class _ReusedOld:
    """Per-row π_old, engine log-probs and importance weights of an update that reuses its own log-probs,
    collected over micro-batches for :func:`logprob_mismatch`."""

    def __init__(self) -> None:
        self.old: list[torch.Tensor] = []
        self.rollout: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []

    def add(self, old: torch.Tensor, rollout: torch.Tensor, weights: torch.Tensor | None, lengths: list[int]) -> None:
        for row, n in enumerate(lengths):
            self.old.append(old[row, :n])
            self.rollout.append(rollout[row, :n])
            if weights is not None:
                self.weights.append(weights[row, :n])

    def metrics(self, cap: float | None) -> dict[str, float]:
        return logprob_mismatch(self.old, self.rollout, self.weights if self.weights else None, cap)


OldLogProbs = Callable[[torch.Tensor, list[int], MicroBatch], tuple[torch.Tensor, torch.Tensor | None]]
"""``(log-probs of a micro-batch's forward (b, T), its rows' indices, the micro-batch) -> (π_old (b, T), truncated-IS
weights (b, T) or None)``."""


def old_log_probs(logps: StepLogProbs, algo: AlgoConfig, reused: _ReusedOld) -> OldLogProbs:
    """Where the update's π_old comes from, chosen once before its loop: the log-prob phase's (``logps.old``), or,
    when the update reuses its own (one optimizer step: module doc), each micro-batch's forward itself, detached,
    collected with the engine's log-probs in ``reused`` for the mismatch metrics."""
    if logps.old is not None:
        stored, weights = logps.old, logps.is_weights

        def from_phase(lp: torch.Tensor, ids: list[int], mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
            width = lp.shape[1]
            return (
                gather_rows([stored[i] for i in ids], width),
                None if weights is None else gather_rows([weights[i] for i in ids], width),
            )

        return from_phase
    if algo.optimizer_steps != 1:
        raise ValueError(
            "policy_update: π_old can be reused only with one optimizer step per training step "
            f"(algo.ppo_epochs={algo.ppo_epochs}, {algo.num_mini_batches} mini-batches)"
        )

    def this_forward(lp: torch.Tensor, ids: list[int], mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        old, is_weights = lp.detach(), None
        if logps.rollout is not None:
            rollout = gather_rows([logps.rollout[i].to(lp.device) for i in ids], lp.shape[1])
            if algo.rollout_is_cap is not None:
                is_weights = truncated_is_weights(old, rollout, algo.rollout_is_cap)
            reused.add(old, rollout, is_weights, [int(n) for n in mb.response_lengths])
        return old, is_weights

    return this_forward


@dataclass
class UpdateRows:
    """What one step's update trains on, one row ``i`` per survivor: ``prompt_ids[i]``, ``response_ids[i]``,
    ``group_ids (N,)`` (prompt indices), ``advantages (N,)``, ``train_mask (N,)`` (bool: the rows that train) and
    ``logps``, the log-prob phase's output on the rows in ``train_mask``."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    group_ids: torch.Tensor
    advantages: torch.Tensor
    train_mask: torch.Tensor
    logps: StepLogProbs


@dataclass
class UpdateHooks:
    """How the update's losses reach the optimizer: the caller's backward and optimizer step."""

    backward: Callable[[torch.Tensor], None]
    """``backward(loss)``: the caller's (Lightning's ``manual_backward``; with several ranks ``ranks.scaled(...)``)."""
    optimizer_step: Callable[[bool], float]
    """``optimizer_step(last)``: clips, steps, zeroes the gradients and returns the gradient norm before clipping
    (``last``: the step's final one)."""


def policy_update(ctx: UpdateContext, policy: nn.Module, rows: UpdateRows, hooks: UpdateHooks) -> dict[str, float]:
    """``algo.ppo_epochs`` passes over :func:`ppo_mini_batches` of the training rows: per mini-batch, its rows
    re-batched into length buckets, the PPO loss against ``rows.logps.old`` accumulated over the buckets with the
    mini-batch's own normaliser (so bucketing does not change the loss), then one optimizer step (timed as
    ``update`` and ``optimizer``). With no training row ``hooks.optimizer_step`` is still called once, on no
    gradient: the trainer counts training steps by optimizer steps. Returns the step's loss statistics.

    ``ctx.ranks`` (:class:`~arrol_pl.train.policy.collectives.UpdateRanks`): the normaliser of each mini-batch is its
    count over all ranks, and this rank runs as many mini-batches and micro-batches as the busiest rank (idle ones
    add nothing); ``hooks.backward`` must be ``ranks.scaled(...)``. The statistics stay this rank's. One rank alone:
    all of this is the identity.
    """
    algo, pad_id, timer, ranks = ctx.algo, ctx.pad_id, ctx.timer, ctx.ranks
    advantages, logps = rows.advantages, rows.logps
    backward, optimizer_step = hooks.backward, hooks.optimizer_step
    reused = _ReusedOld()
    old_of = old_log_probs(logps, algo, reused)
    idx = torch.nonzero(rows.train_mask, as_tuple=True)[0].tolist()
    minis = ppo_mini_batches(rows.group_ids, idx, algo.num_mini_batches)
    minis += [[] for _ in range(ranks.max(len(minis)) - len(minis))]
    stats = _LossStats()
    losses: list[float] = []
    grad_norms: list[float] = []
    micro = 0
    total_steps = len(minis) * algo.ppo_epochs
    for _ in range(algo.ppo_epochs):
        for mini in minis:
            with timer("update"):
                batches = make_micro_batches(
                    [rows.prompt_ids[i] for i in mini],
                    [rows.response_ids[i] for i in mini],
                    algo.micro_batch_tokens,
                    pad_id,
                )
                counts = [batch_counts(mb.response_mask) for mb in batches]
                n_tok, n_seq = sum(c[0] for c in counts), sum(c[1] for c in counts)
                if algo.verl_parity:  # verl divides the seq-mean modes by every row of the mini-batch
                    n_seq = len(mini)
                n_tok, n_seq = ranks.counts(n_tok, n_seq)
                ranks.idle_passes(policy, ranks.max(len(batches)) - len(batches), pad_id, backward)
                loss = 0.0
                for mb in batches:
                    ids = [mini[j] for j in mb.indices]
                    lp = response_log_probs(policy, mb, algo.temperature)
                    width = lp.shape[1]
                    old, is_weights = old_of(lp, ids, mb)
                    out = ppo_clip_loss(
                        lp,
                        old,
                        advantages[ids].to(lp.device),
                        mb.response_mask.to(lp.device),
                        algo.clip_low,
                        algo.clip_high,
                        algo.loss_agg_mode,
                        ref_log_probs=None if logps.ref is None else gather_rows([logps.ref[i] for i in ids], width),
                        kl_coef=algo.kl_coef,
                        kl_estimator=algo.kl_estimator,
                        **sum_norm(algo, width, n_seq),
                        total_tokens=n_tok,
                        clip_ratio_c=algo.clip_ratio_c,
                        is_weights=is_weights,
                    )
                    backward(out.loss)
                    stats.add(out)
                    loss += float(out.loss.detach())
                micro += len(batches)
            with timer("optimizer"):
                grad_norms.append(optimizer_step(len(grad_norms) + 1 == total_steps))
            losses.append(loss)
    if not minis:
        with timer("optimizer"):
            optimizer_step(True)
    return {
        "loss": float(np.mean(losses)) if losses else 0.0,
        **stats.result(),
        "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0,
        "optimizer_steps": float(len(grad_norms)),
        "mini_batches": float(len(minis)),
        "micro_batches": float(micro),
        "trained_tokens": float(sum(len(rows.response_ids[i]) for i in idx)),
        "trained_rollouts": float(len(idx)),
        **logps.metrics,
        **reused.metrics(algo.rollout_is_cap),
    }
