"""The phases of one ARRoL training step once its groups are chosen (Algorithm 1 lines 9, 10 and 6, frontend), one
function each, in the order ``training_step`` calls them: :func:`advantage_phase`, then, inside
:func:`engine_asleep`, :func:`logprob_phase`, :func:`update_phase` and :func:`head_phase`. Each takes the step's
:class:`~.context.StepContext` first and times itself on its timer under the name its ``time/<name>`` metric carries
(generation, reward and screen are timed in the rounds, :mod:`.rollouts`), so the step itself times nothing.

Decisions:
- Rewards, advantages, the policy loss and the head loss see only survivors (pruned rollouts are
  dropped before anything is computed on them; §4.3 (ii)).
- The old log-probs and the reference's are computed once per step, before the update (Table 5's log-prob phase);
  the update is verl's PPO over mini-batches of whole groups (:mod:`arrol_pl.train.policy.update`).
- The head is trained (:mod:`arrol_pl.core.head_training`) with BCE on the detached detect-time features
  the engine returned, labelled by final correctness; with importance weighting each survivor counts 1/p.
- Policy weights go to the engine as (HF name, full tensor) pairs; under FSDP the caller gathers them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from arrol_pl.core.advantages import compute_advantages, dynamic_sampling_mask
from arrol_pl.core.losses import truncated_is_weights
from arrol_pl.core.online import OnlinePruning
from arrol_pl.train.policy.logprobs import micro_batch_count, score_rows
from arrol_pl.train.policy.sharding import full_value
from arrol_pl.train.policy.update import StepLogProbs, UpdateHooks, UpdateRows, logprob_mismatch, policy_update
from arrol_pl.train.step.context import StepContext
from arrol_pl.train.step.metrics import AllSurvivors, PruningUpdate
from arrol_pl.train.step.rollouts import StepGroups
from arrol_pl.train.step.screening import PromptScorer
from arrol_pl.train.step.survivors import Survivors


def advantage_phase(
    ctx: StepContext, rewards: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1 line 9 (timed as ``advantage``): group advantages ``(N,)`` over survivors and ``train_mask``
    ``(N,)``, the survivors that train (all, or DAPO's dynamic-sampling filter)."""
    algo = ctx.algo
    with ctx.timer("advantage"):
        adv = compute_advantages(algo.advantage, rewards, group_ids, lone="verl" if algo.verl_parity else "zero")
        train_mask = (
            dynamic_sampling_mask(rewards, group_ids)
            if algo.dynamic_sampling
            else torch.ones_like(rewards, dtype=torch.bool)
        )
    return adv, train_mask


def logprob_phase(
    ctx: StepContext, policy: nn.Module, reference: nn.Module | None, survivors: Survivors, train_mask: torch.Tensor
) -> StepLogProbs:
    """Old log-probs of the survivors in ``train_mask`` under the current policy and, with a KL term, the
    reference's (Table 5's log-prob phase, timed as ``old_logprob`` and ``ref_logprob``), each once per step, without
    gradient, in length buckets. A sharded policy matches the other ranks (``ctx.ranks``) forward for forward."""
    algo, pad_id, timer, ranks = ctx.algo, ctx.pad_id, ctx.timer, ctx.ranks
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
            old = dict(
                zip(idx, score_rows(policy, prompts, responses, algo.micro_batch_tokens, pad_id, algo.temperature))
            )
    ref = None
    if reference is not None and algo.kl_coef > 0:
        with timer("ref_logprob"):  # a sharded reference too runs as many forwards as the busiest rank
            n = micro_batch_count(prompts, responses, algo.micro_batch_tokens)
            ranks.idle_passes(reference, ranks.max(n) - n, pad_id)
            ref = dict(
                zip(idx, score_rows(reference, prompts, responses, algo.micro_batch_tokens, pad_id, algo.temperature))
            )
    weights = None
    metrics: dict[str, float] = {}
    if rollout is not None and old is not None:
        rollout = {i: rollout[i].to(old[i].device) for i in idx}
        if algo.rollout_is_cap is not None:
            weights = {i: truncated_is_weights(old[i], rollout[i], algo.rollout_is_cap) for i in idx}
        metrics = logprob_mismatch(
            [old[i] for i in idx],
            [rollout[i] for i in idx],
            None if weights is None else [weights[i] for i in idx],
            algo.rollout_is_cap,
        )
    return StepLogProbs(old, ref, rollout, weights, metrics)


def update_phase(
    ctx: StepContext,
    policy: nn.Module,
    survivors: Survivors,
    advantages: torch.Tensor,
    train_mask: torch.Tensor,
    logps: StepLogProbs,
    hooks: UpdateHooks,
) -> dict[str, float]:
    """Algorithm 1 line 10, the policy's part (timed as ``update`` and ``optimizer``): the PPO update
    (:func:`~arrol_pl.train.policy.update.policy_update`) on the survivors in ``train_mask``; returns its statistics."""
    rows = UpdateRows(survivors.prompt_ids, survivors.response_ids, survivors.group_ids, advantages, train_mask, logps)
    return policy_update(ctx, policy, rows, hooks)


def update_hooks(ctx: StepContext, policy: nn.Module, optimizer, backward: Callable) -> UpdateHooks:
    """The update's backward (``backward``, scaled over ranks) and ``optimizer_step(last) -> grad norm`` on Lightning's
    ``optimizer``, the gradients clipped to ``algo.grad_clip``: the last PPO mini-batch steps Lightning's optimizer,
    the earlier ones the wrapped one, so global_step counts training steps."""
    opt, clip = optimizer, ctx.algo.grad_clip or float("inf")
    opt.zero_grad()

    def optimizer_step(last: bool) -> float:
        norm = full_value(torch.nn.utils.clip_grad_norm_(policy.parameters(), clip))
        (opt.step if last else opt.optimizer.step)()
        opt.zero_grad()
        return float(norm)

    return UpdateHooks(ctx.ranks.scaled(backward), optimizer_step)


def head_phase(
    ctx: StepContext,
    pruning: OnlinePruning,
    prompt_scorer: PromptScorer | None,
    groups: StepGroups,
    labels: torch.Tensor,
    rewards: torch.Tensor,
) -> PruningUpdate:
    """Algorithm 1 line 10, the head's part (timed as ``head``): the calibrator and the head learn from every
    rank's survivors (one pruning state), weighted 1/p with importance weighting, and the prompt head
    (``prompt_scorer``, None without a prompt screen) from this step's prompts."""
    survivors, config = groups.survivors, pruning.config
    weights = 1.0 / survivors.survival if config.importance_weighting else torch.ones_like(survivors.survival)
    joint = survivors.joint if survivors.joint is not None else torch.full((len(labels), 1), float("nan"))
    group_ids, scores, labels, weights, features, rewards, survival, joint = ctx.ranks.gather_survivors(
        survivors.group_ids, survivors.scores, labels, weights, survivors.features, rewards, survivors.survival, joint
    )
    every = None if groups.every_rollout is None else tuple(ctx.ranks.gather_survivors(*groups.every_rollout))
    head_scores = None
    if config.scorer != "head":  # the head the step started with (the engine's), on the same rows
        device = next(pruning.head.parameters()).device
        with torch.no_grad():
            head_scores = pruning.head(features.to(device)).float().cpu()
    with ctx.timer("head"):
        loss = pruning.update(*groups.head_rows(features, scores, labels, weights, group_ids, survival, joint))
        prompt_rows = groups.prompt_rows(labels, weights)
        prompt = {} if prompt_rows is None else prompt_scorer.learn(*prompt_rows)
    return PruningUpdate(
        loss, prompt, AllSurvivors(group_ids, scores, labels, rewards, survival, joint, head_scores, every)
    )


@contextmanager
def engine_asleep(
    ctx: StepContext,
    engine,
    new_weights: Callable[[], tuple[Iterable, Mapping[str, torch.Tensor]]],
    every_weight: bool = True,
) -> Iterator[None]:
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
    with ctx.timer("sync"):
        if asleep:
            engine.wake_up(["weights"])
        engine.sync_weights(*new_weights(), every_weight=every_weight)
        if asleep:
            engine.wake_up(["kv_cache"])
