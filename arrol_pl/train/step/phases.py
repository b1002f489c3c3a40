"""The phases of one ARRoL training step (Algorithm 1, frontend), each a function the module calls.

Decisions:
- Rewards, advantages, the policy loss and the head loss see only survivors (pruned rollouts are
  dropped before anything is computed on them; §4.3 (ii)).
- As verl: the old log-probs of the training rows are computed once per step, before the update and
  beside the reference's (the log-prob phase of Table 5); the update then runs ``algo.ppo_epochs``
  passes over ``prompts_per_step / ppo_mini_batch_size`` mini-batches of whole groups, one optimizer
  step each, so every mini-batch after the first is off-policy and the clip acts. With one mini-batch
  and one epoch the ratio is 1 and the update is plain on-policy GRPO: there ``algo.old_logprobs``
  (``auto``) skips that forward and takes π_old from the update's own log-probs, detached (as TRL does
  with one iteration); the engine-vs-trainer metrics and importance weights then use those.
- The head is trained (:mod:`arrol_pl.core.head_training`) with BCE on the detached detect-time features
  the engine returned, labelled by final correctness; with importance weighting each survivor counts 1/p.
- Policy weights go to the engine as (HF name, full tensor) pairs; under FSDP the caller gathers them.
- Each phase times itself on the step's :class:`PhaseTimer`, under the name its ``time/<name>`` metric carries
  (generation, reward and screen in the rounds, :mod:`.rollouts`; the others here and in the module's head
  phase), so the step itself times nothing.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from arrol_pl.core.advantages import compute_advantages, dynamic_sampling_mask
from arrol_pl.core.losses import PolicyLossOutput, batch_counts, ppo_clip_loss, truncated_is_weights
from arrol_pl.train.config.run import AlgoConfig
from arrol_pl.train.policy.logprobs import (MicroBatch, gather_rows, make_micro_batches, micro_batch_count,
                                            response_log_probs, score_rows)
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync


class PhaseTimer:
    """Accumulates wall seconds per named phase (Table 5's decomposition): ``with timer("update"): ...`` inside
    the phase; a phase run several times in a step (refill's rounds, PPO mini-batches) adds up. Each phase is one
    of :attr:`PHASES`, the history's ``time/<phase>`` keys."""

    PHASES = ("screen", "generation", "reward", "advantage", "old_logprob", "ref_logprob", "update", "head",
              "optimizer", "sync")
    """Every phase a step times, in the order a step runs them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if name not in self.PHASES:
            raise ValueError(f"no step phase is named {name!r}; the phases are {self.PHASES}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


@dataclass
class Survivors:
    """The unpruned rollouts of a step, flattened; ``group_ids`` are prompt indices."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    group_ids: torch.Tensor
    features: torch.Tensor
    scores: torch.Tensor
    survival: torch.Tensor
    golds: list[str]
    rollout_log_probs: list[torch.Tensor] | None = None
    """Per survivor, ``(R_i,)``: the engine's log-prob of each sampled response token (None if not returned)."""

    def subset(self, index: Sequence[int]) -> "Survivors":
        """The survivors at ``index``, in that order."""
        index = list(index)
        pick = torch.tensor(index, dtype=torch.long)
        return Survivors([self.prompt_ids[i] for i in index], [self.response_ids[i] for i in index],
                         [self.texts[i] for i in index], self.group_ids[pick], self.features[pick],
                         self.scores[pick], self.survival[pick], [self.golds[i] for i in index],
                         None if self.rollout_log_probs is None else [self.rollout_log_probs[i] for i in index])


def collect_survivors(rollouts: Sequence, golds_by_prompt: Sequence[str]) -> Survivors:
    """Drop pruned rollouts (Algorithm 1 line 8); ``rollouts`` are the engine's, ``golds_by_prompt[b]``."""
    kept = [r for r in rollouts if not r.pruned]
    if not kept:
        raise RuntimeError("every rollout was pruned; the per-group floor (pruning.min_keep_per_group) prevents this")
    return Survivors(
        prompt_ids=[r.prompt_token_ids for r in kept],
        response_ids=[r.response_token_ids for r in kept],
        texts=[r.text for r in kept],
        group_ids=torch.tensor([r.prompt_index for r in kept], dtype=torch.long),
        features=torch.stack([r.feature for r in kept]).float(),
        scores=torch.tensor([r.score for r in kept], dtype=torch.float32),
        survival=torch.tensor([1.0 if r.survival is None else r.survival for r in kept], dtype=torch.float32),
        golds=[golds_by_prompt[r.prompt_index] for r in kept],
        rollout_log_probs=sampled_log_probs(kept),
    )


def sampled_log_probs(rollouts: Sequence) -> list[torch.Tensor] | None:
    """The engine's log-prob of every sampled token, ``(R_i,)`` per rollout; None unless every rollout has them."""
    if any(r.sampled_logprobs is None for r in rollouts):
        return None
    return [r.sampled_logprobs for r in rollouts]


def sum_norm(algo: AlgoConfig, width: int, n_seq: int) -> dict[str, int | float]:
    """``norm_length`` and ``total_seqs`` of a micro-batch's loss: seq-mean-token-sum-norm's L is
    ``algo.loss_scale_factor``, else ``max_response_tokens`` (verl parity: the padded ``width``), and with verl parity
    that mode sums the sequences (``total_seqs`` 1) where this project averages them."""
    if algo.verl_parity and algo.loss_agg_mode == "seq-mean-token-sum-norm":
        return {"norm_length": algo.loss_scale_factor or width, "total_seqs": 1}
    return {"norm_length": algo.loss_scale_factor or algo.max_response_tokens, "total_seqs": n_seq}


def step_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, algo: AlgoConfig,
                    timer: PhaseTimer) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantage phase (timed as ``advantage``): group advantages ``(N,)`` over survivors and ``train_mask``
    ``(N,)``, the survivors that train (all, or DAPO's dynamic-sampling filter)."""
    with timer("advantage"):
        adv = compute_advantages(algo.advantage, rewards, group_ids, lone="verl" if algo.verl_parity else "zero")
        train_mask = (dynamic_sampling_mask(rewards, group_ids) if algo.dynamic_sampling
                      else torch.ones_like(rewards, dtype=torch.bool))
    return adv, train_mask


@dataclass
class StepLogProbs:
    """The log-prob phase's output, per trained survivor index ``i``: ``(R_i,)`` tensors over its response.

    ``old``: π_old (the policy before this step's update; None when the update reuses its own detached
    log-probs, ``algo.reuses_old_logprobs``, and then also ``is_weights`` and ``metrics`` come from the update); ``ref``: π_ref (None without a KL term);
    ``rollout``: the engine's sampling log-probs (None when the engine returned none); ``is_weights``:
    truncated importance weights (None unless ``algo.rollout_is_cap``); ``metrics``: the engine-vs-trainer
    mismatch of :func:`logprob_mismatch`.
    """

    old: dict[int, torch.Tensor] | None
    ref: dict[int, torch.Tensor] | None
    rollout: dict[int, torch.Tensor] | None
    is_weights: dict[int, torch.Tensor] | None
    metrics: dict[str, float]


def logprob_mismatch(old: Sequence[torch.Tensor], rollout: Sequence[torch.Tensor],
                     is_weights: Sequence[torch.Tensor] | None = None, cap: float | None = None) -> dict[str, float]:
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


def logprob_phase(policy: nn.Module, reference: nn.Module | None, survivors: Survivors, train_mask: torch.Tensor,
                  algo: AlgoConfig, pad_id: int, timer: PhaseTimer, ranks: RankSync = ONE_RANK) -> StepLogProbs:
    """Old log-probs of the survivors in ``train_mask`` under the current policy and, with a KL term, the
    reference's (Table 5's log-prob phase), each once per step, without gradient, in length buckets. ``ranks``: the
    ranks a sharded policy spans (:mod:`.rank_sync`), which this one matches forward for forward."""
    idx = torch.nonzero(train_mask, as_tuple=True)[0].tolist()
    prompts = [survivors.prompt_ids[i] for i in idx]
    responses = [survivors.response_ids[i] for i in idx]
    if survivors.rollout_log_probs is None and algo.rollout_is_cap is not None:
        raise ValueError("algo.rollout_is_cap is set but the engine returned no sampling log-probs")
    rollout = None if survivors.rollout_log_probs is None else {i: survivors.rollout_log_probs[i] for i in idx}
    old = None
    if not algo.reuses_old_logprobs:
        with timer("old_logprob"):
            # agreed before any forward: a collective must not meet another rank's forward
            n = micro_batch_count(prompts, responses, algo.micro_batch_tokens)
            ranks.idle_passes(policy, ranks.max(n) - n, pad_id)
            old = dict(zip(idx, score_rows(policy, prompts, responses, algo.micro_batch_tokens, pad_id,
                                           algo.temperature)))
    ref = None
    if reference is not None and algo.kl_coef > 0:
        with timer("ref_logprob"):  # a sharded reference too runs as many forwards as the busiest rank
            n = micro_batch_count(prompts, responses, algo.micro_batch_tokens)
            ranks.idle_passes(reference, ranks.max(n) - n, pad_id)
            ref = dict(zip(idx, score_rows(reference, prompts, responses, algo.micro_batch_tokens, pad_id,
                                           algo.temperature)))
    weights = None
    metrics: dict[str, float] = {}
    if rollout is not None and old is not None:
        rollout = {i: rollout[i].to(old[i].device) for i in idx}
        if algo.rollout_is_cap is not None:
            weights = {i: truncated_is_weights(old[i], rollout[i], algo.rollout_is_cap) for i in idx}
        metrics = logprob_mismatch([old[i] for i in idx], [rollout[i] for i in idx],
                                   None if weights is None else [weights[i] for i in idx], algo.rollout_is_cap)
    return StepLogProbs(old, ref, rollout, weights, metrics)


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


_MEAN_STATS = ("clip_fraction", "clip_fraction_low", "clip_fraction_high", "dual_clip_fraction", "ppo_kl",
               "approx_kl", "ratio_mean", "kl")

POLICY_SUMMARY = (*_MEAN_STATS, "ratio_min", "ratio_max", "grad_norm", "optimizer_steps",
                  "engine_logprob_diff_mean", "engine_logprob_diff_max")
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
            "ratio_min": self.ratio_min, "ratio_max": self.ratio_max}


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
            return (gather_rows([stored[i] for i in ids], width),
                    None if weights is None else gather_rows([weights[i] for i in ids], width))

        return from_phase
    if algo.optimizer_steps != 1:
        raise ValueError("policy_update: π_old can be reused only with one optimizer step per training step "
                         f"(algo.ppo_epochs={algo.ppo_epochs}, {algo.num_mini_batches} mini-batches)")

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
class UpdateInputs:
    """What one step's update trains on and how its losses reach the optimizer (:func:`policy_update`)."""

    survivors: Survivors
    advantages: torch.Tensor
    """``(N,)``, one per survivor (:func:`step_advantages`)."""
    train_mask: torch.Tensor
    """``(N,)`` bool: the survivors that train."""
    logps: StepLogProbs
    """The log-prob phase's output on the survivors in ``train_mask``."""
    backward: Callable[[torch.Tensor], None]
    """``backward(loss)``: the caller's (Lightning's ``manual_backward``; with several ranks ``ranks.scaled(...)``)."""
    optimizer_step: Callable[[bool], float]
    """``optimizer_step(last)``: clips, steps, zeroes the gradients and returns the gradient norm before clipping
    (``last``: the step's final one)."""


def policy_update(policy: nn.Module, inputs: UpdateInputs, algo: AlgoConfig, pad_id: int, timer: PhaseTimer,
                  ranks: RankSync = ONE_RANK) -> dict[str, float]:
    """``algo.ppo_epochs`` passes over :func:`ppo_mini_batches` of the training rows: per mini-batch, its rows
    re-batched into length buckets, the PPO loss against ``inputs.logps.old`` accumulated over the buckets with the
    mini-batch's own normaliser (so bucketing does not change the loss), then one optimizer step (timed as
    ``update`` and ``optimizer``). With no training row ``inputs.optimizer_step`` is still called once, on no
    gradient: the trainer counts training steps by optimizer steps. Returns the step's loss statistics.

    ``ranks`` (:mod:`.rank_sync`): the normaliser of each mini-batch is its count over all ranks, and this
    rank runs as many mini-batches and micro-batches as the busiest rank (idle ones add nothing); ``backward``
    must be ``ranks.scaled(...)``. The statistics stay this rank's. One rank alone: all of this is the identity.
    """
    survivors, advantages, logps = inputs.survivors, inputs.advantages, inputs.logps
    backward, optimizer_step = inputs.backward, inputs.optimizer_step
    reused = _ReusedOld()
    old_of = old_log_probs(logps, algo, reused)
    idx = torch.nonzero(inputs.train_mask, as_tuple=True)[0].tolist()
    minis = ppo_mini_batches(survivors.group_ids, idx, algo.num_mini_batches)
    minis += [[] for _ in range(ranks.max(len(minis)) - len(minis))]
    stats = _LossStats()
    losses: list[float] = []
    grad_norms: list[float] = []
    micro = 0
    total_steps = len(minis) * algo.ppo_epochs
    for _ in range(algo.ppo_epochs):
        for mini in minis:
            with timer("update"):
                batches = make_micro_batches([survivors.prompt_ids[i] for i in mini],
                                             [survivors.response_ids[i] for i in mini], algo.micro_batch_tokens, pad_id)
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
                        lp, old, advantages[ids].to(lp.device),
                        mb.response_mask.to(lp.device), algo.clip_low, algo.clip_high, algo.loss_agg_mode,
                        ref_log_probs=None if logps.ref is None else gather_rows([logps.ref[i] for i in ids], width),
                        kl_coef=algo.kl_coef, kl_estimator=algo.kl_estimator, **sum_norm(algo, width, n_seq),
                        total_tokens=n_tok, clip_ratio_c=algo.clip_ratio_c, is_weights=is_weights,
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
    return {"loss": float(np.mean(losses)) if losses else 0.0, **stats.result(),
            "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0,
            "optimizer_steps": float(len(grad_norms)), "mini_batches": float(len(minis)),
            "micro_batches": float(micro), "trained_tokens": float(sum(len(survivors.response_ids[i]) for i in idx)),
            "trained_rollouts": float(len(idx)), **logps.metrics, **reused.metrics(algo.rollout_is_cap)}


@contextmanager
def engine_asleep(engine, timer: PhaseTimer, new_weights: Callable[[], tuple[Iterable, Mapping[str, torch.Tensor]]],
                  every_weight: bool = True) -> Iterator[None]:
    """The engine asleep through the block (log-probs, update and head) and awake after it, holding the updated
    policy and head (Algorithm 1 l. 14; timed as ``sync``). ``new_weights() -> (policy weights, head state)`` is
    called once the block is done.

    GPU with ``engine.enable_sleep_mode``: the engine frees its KV cache and weights for the update, as verl and TRL
    do (:meth:`~arrol_pl.engine.protocol.RolloutEngine.sleep`). A sync of every weight follows, so they are
    discarded (level 2, no host copy); a partial sync (``every_weight`` False: ``model.trainable_layers``) needs the
    others back, so they wait in host memory (level 1). Waking, the weights come back first, take the sync, then
    the KV cache: it is never allocated while the sync's gathered tensors are. CPU: sleep is a no-op and this is
    the sync alone. A block that raises leaves the engine asleep: the step failed, and an engine woken without
    the sync would generate with weights it discarded."""
    asleep = engine.sleep(level=2 if every_weight else 1)
    yield
    with timer("sync"):
        if asleep:
            engine.wake_up(["weights"])
        engine.sync_weights(*new_weights(), every_weight=every_weight)
        if asleep:
            engine.wake_up(["kv_cache"])
