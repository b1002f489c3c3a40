"""The Lightning module: Algorithm 1's frontend. It orchestrates; the algorithm lives in ``core`` and
each phase in :mod:`.phases`.

Holds the policy (a transformers causal LM), an optional frozen reference (only when ``algo.kl_coef > 0``;
kept out of the checkpoint and the optimizer) and the pruning state (:class:`~arrol_pl.core.online.OnlinePruning`:
the quality head, the online calibrator, the replay window and the head's optimizer). Its collaborators come in
through the constructor: the :class:`~.groups.GroupChooser` that chooses, generates and rewards each step's groups,
and the rollout engine (:class:`~arrol_pl.engine.protocol.RolloutEngine`), which sleeps through the update and
wakes with its weights (:func:`.phases.engine_asleep`). Manual optimisation: Lightning's optimizer holds the policy
and takes the last PPO mini-batch step of each training step (the earlier ones step the wrapped optimizer), so
``global_step`` counts training steps; the head's optimizer is stepped several times per training step on the
replay window, and saved with the checkpoint.

Exact resume: everything a step draws from is either restored from the checkpoint (weights, both
optimizers, calibrator, replay window, the head's minibatch generator, the prompt stream's position)
or a function of the step: the engine's sampling generators are re-seeded at every step start, and the
prune decisions are seeded by the step in h_t. A step whose rollouts were all pruned, or whose every reward
failed (:mod:`.reward_failures`), carries no signal: it is skipped (counted in ``skipped/no_survivors``,
``skipped/reward_failed``) but still counts toward ``max_steps``.
The per-step history is not in the checkpoint (its size would grow with the step count): the run's
``history.jsonl`` holds it, and the experiment gives a resumed module the rows before the checkpoint's step;
the checkpoint keeps the training clock (``wall``) and the skipped-step counts.

Several ranks (Lightning's ``ModelParallelStrategy``, FSDP2; :mod:`.rank_sync`, :mod:`arrol_pl.train.policy.sharding`): ``configure_model`` shards
the policy; each rank generates whole groups for its share of the step's prompts with its own engine, the
update normalises globally, the survivors of all ranks update one calibrator and one head (identical on
every rank), metrics are global, and each rank's engine receives the gathered full weights.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import lightning as L
import torch

from arrol_pl.core.online import OnlinePruning
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.engine.protocol import RolloutEngine, engine_step_cost, restore_engine_step_cost
from arrol_pl.train.config.run import RunConfig
from arrol_pl.train.policy.sharding import full_value, shard_from_rank0
from arrol_pl.train.policy import weights as policy_weights
from arrol_pl.train.records.loggers import log_text
from arrol_pl.train.step import metrics as step_metrics
from arrol_pl.train.step import phases
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync
from arrol_pl.train.step.groups import GroupChooser
from arrol_pl.train.step.reward_failures import RewardFailures
from arrol_pl.train.step.rollouts import StepGroups

logger = logging.getLogger(__name__)


class ArrolModule(L.LightningModule):
    def __init__(self, cfg: RunConfig, policy: torch.nn.Module, engine: RolloutEngine, groups: GroupChooser | None,
                 pad_id: int, reference: torch.nn.Module | None = None, *, pruning: OnlinePruning | None = None,
                 history: list[dict[str, float]] | None = None, run_info: dict[str, Any] | None = None) -> None:
        """``groups``: what chooses, generates and rewards each step's groups (:class:`~.groups.GroupChooser`);
        ``pruning``: the head, calibrator and replay window (a fresh one from ``cfg`` when None); ``history``: the
        rows before a resumed checkpoint's step (the run's ``history.jsonl``); ``run_info``: what evaluation and a
        resume need to know about the run (``policy_dir``, the held-out accuracy before training; built-in types
        only), saved in every checkpoint."""
        super().__init__()
        self.automatic_optimization = False
        self.cfg = cfg
        self.policy = policy.train()  # from_pretrained returns eval mode; Lightning warns before on_train_start
        if cfg.model.trainable_layers is not None:
            policy_weights.freeze_lower_layers(policy, cfg.model.trainable_layers)
        if cfg.model.activation_checkpointing:
            # Non-reentrant: it recomputes under FSDP2's hooks (the block's weights are gathered again) and needs
            # no input that requires grad, so frozen embeddings and lower blocks stay frozen.
            policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.pruning = pruning or OnlinePruning(cfg.pruning, cfg.head, policy.config.hidden_size, cfg.trainer.seed)
        self.head = self.pruning.head  # a submodule: checkpointed with the policy's weights
        self.engine = engine
        self.groups: GroupChooser = groups
        self.pad_id = pad_id
        # A list keeps the frozen reference out of state_dict, parameters() and the optimizer.
        self._reference = [reference.eval().requires_grad_(False)] if reference is not None else []
        self.history: list[dict[str, float]] = list(history or [])
        """One row per finished step; a resumed run starts from the rows before its checkpoint's step."""
        self.skipped: dict[str, int] = {"no_survivors": 0, "reward_failed": 0}
        """Steps that trained nothing, by reason."""
        self.reward_failures = RewardFailures(cfg.reward.function, cfg.reward.max_failed_steps)
        self.run_info: dict[str, Any] = dict(run_info or {})
        self._fit_started: float | None = None
        self._wall_offset = 0.0
        """``time/wall`` at the resumed checkpoint (0 for a fresh run): a resumed run continues its training clock."""
        self.paused_seconds = 0.0
        """Seconds spent outside training since fit started (held-out evaluations): not in ``time/wall``."""
        self.ranks = ONE_RANK
        """The ranks the policy is sharded over (``configure_model``); one rank alone until then, and on one
        device (every collective the identity)."""

    @property
    def calibrator(self):
        return self.pruning.calibrator

    @property
    def prompt_scorer(self):
        """The group screen's prompt stage (:mod:`.screening`); None without it."""
        return None if self.groups is None else self.groups.prompt_scorer

    # ---------------------------------------------------------------- Lightning plumbing
    def configure_optimizers(self):
        a = self.cfg.algo
        trained = [p for p in self.policy.parameters() if p.requires_grad]
        return torch.optim.AdamW(trained, lr=a.lr, weight_decay=a.weight_decay)

    def configure_model(self) -> None:
        """FSDP2 over the data-parallel mesh of Lightning's ``ModelParallelStrategy`` (several ranks only): the
        policy, and the frozen reference the same way (each rank holds its shard; a forward gathers one block at a
        time). Rank 0 alone loaded the weights (the others built the models on the meta device): its state fills
        every rank's shards, so no meta tensor is left for Lightning to initialise."""
        if self.device_mesh is None or not self.ranks.alone:
            return
        shard_from_rank0(self.policy, self.device_mesh["data_parallel"])
        if self._reference:
            shard_from_rank0(self._reference[0], self.device_mesh["data_parallel"])
        self.ranks = RankSync()

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # a PromptBatch of Problems: text, consumed by the engine

    def on_train_start(self) -> None:
        self._fit_started = time.perf_counter()
        # A resumed run continues the training clock of the run it resumes (wall-clock curves, Fig. 4): the
        # offset is the checkpoint's (on_load_checkpoint), 0 for a fresh run.
        self.policy.train()
        self.head.train()
        if self._reference:
            self._reference[0].to(self.device)
        # The engine may hold other weights (a resumed run, or a fresh engine): align it first.
        self.engine.sync_weights(*self._new_weights(), every_weight=self.cfg.model.trainable_layers is None)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["arrol"] = {
            **self.pruning.state_dict(),
            "wall": self.history[-1]["time/wall"] if self.history else self._wall_offset,
            "skipped": dict(self.skipped),
            "prompt_scorer": self.prompt_scorer.state_dict() if self.prompt_scorer is not None else None,
            "engine_step_cost": engine_step_cost(self.engine),
            "config": dataclasses.asdict(self.cfg),
            **self.run_info,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("arrol")
        if state is None:
            raise ValueError("checkpoint has no 'arrol' entry (calibrator state): not written by ArrolModule")
        self.pruning.load_state_dict(state)
        # Checkpoints written before the history left them hold it instead of the clock.
        old = state.get("history")
        self._wall_offset = float(state["wall"] if "wall" in state else old[-1]["time/wall"] if old else 0.0)
        self.skipped.update(state["skipped"])
        restore_engine_step_cost(self.engine, state.get("engine_step_cost"))
        if self.prompt_scorer is not None:
            if state.get("prompt_scorer") is None:
                raise ValueError("trainer.resume: the checkpoint has no prompt-screen state, but this run screens "
                                 "prompts (pruning.screen.stages); resume with the run's own pruning.screen")
            self.prompt_scorer.load_state_dict(state["prompt_scorer"])

    def record_heldout(self, result) -> None:
        """Attach a held-out evaluation to the latest step's history row and log it at that step."""
        metrics = {"heldout/accuracy": result.accuracy, "heldout/greedy_accuracy": result.greedy_accuracy}
        self.history[-1].update(metrics)
        for run_logger in self.loggers:
            run_logger.log_metrics(metrics, step=int(self.history[-1]["step"]))

    # ---------------------------------------------------------------- one step of Algorithm 1
    def training_step(self, batch, batch_idx: int) -> None:
        """Algorithm 1, one call per phase, each timing itself: h_t; the groups, generated with pruning and rewarded
        (with the screen and refill when configured); the survivors' advantages; with the engine asleep, log-probs,
        the update and the head and calibrator; the weights into the engine as it wakes."""
        step, algo, timer = self.global_step, self.cfg.algo, phases.PhaseTimer()
        step_start = time.perf_counter()
        pruner = self.pruning.params_for(step, self.ranks.rank, self.ranks.world_size)
        groups = self.groups.choose(step, batch, pruner, timer, self.ranks)
        failed = self.reward_failures.observe(step, groups.scored, self.ranks)  # every rank, every step
        if self.ranks.max(int(groups.survivors is None)) == 1:  # a rank without survivors: all ranks skip
            return self._skip_step(step, "no_survivors", groups, pruner, timer, step_start)
        if failed:  # no label among the rewards; enough such steps in a row stop the run, with a checkpoint
            if self.reward_failures.failure is not None:
                self.trainer.should_stop = True
            return self._skip_step(step, "reward_failed", groups, pruner, timer, step_start)
        survivors = groups.survivors
        rewards = torch.as_tensor(groups.scored.rewards, dtype=torch.float32)
        labels = torch.as_tensor(groups.scored.correct, dtype=torch.float32)
        advantages, train_mask = phases.step_advantages(rewards, survivors.group_ids, algo, timer)
        reference = self._reference[0] if self._reference else None
        with phases.engine_asleep(self.engine, timer, self._new_weights, self.cfg.model.trainable_layers is None):
            logps = phases.logprob_phase(self.policy, reference, survivors, train_mask, algo, self.pad_id, timer,
                                         self.ranks)
            update = phases.UpdateInputs(survivors, advantages, train_mask, logps,
                                         self.ranks.scaled(self.manual_backward), self._optimizer_step())
            stats = phases.policy_update(self.policy, update, algo, self.pad_id, timer, self.ranks)
            learned = self._learn_pruning(groups, labels, rewards, timer)
        self._finish_step(step, groups, pruner, learned, stats, timer, step_start)

    def _new_weights(self):
        """The policy's weights in the engine's dtype and the head's state: what a sync sends the engine."""
        return policy_weights.engine_weights(self.policy, self.engine.dtype), self.head.state_dict()

    def _optimizer_step(self):
        """The update's optimizer step: ``optimizer_step(last) -> grad norm``. Lightning counts every
        LightningOptimizer.step as a global step; the earlier PPO mini-batches step the wrapped optimizer so that
        global_step keeps counting training steps."""
        opt, clip = self.optimizers(), self.cfg.algo.grad_clip or float("inf")
        opt.zero_grad()

        def optimizer_step(last: bool) -> float:
            norm = full_value(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), clip))
            (opt.step if last else opt.optimizer.step)()
            opt.zero_grad()
            return float(norm)

        return optimizer_step

    def _learn_pruning(self, groups: StepGroups, labels: torch.Tensor, rewards: torch.Tensor,
                       timer: phases.PhaseTimer) -> step_metrics.PruningUpdate:
        """Algorithm 1 line 10, the head's part (timed as ``head``): the calibrator and the head learn from every
        rank's survivors (one pruning state), weighted 1/p with importance weighting, and the prompt head from this
        step's prompts."""
        survivors = groups.survivors
        weights = (1.0 / survivors.survival if self.cfg.pruning.importance_weighting
                   else torch.ones_like(survivors.survival))
        group_ids, scores, labels, weights, features, rewards, survival = self.ranks.gather_survivors(
            survivors.group_ids, survivors.scores, labels, weights, survivors.features, rewards, survivors.survival)
        every = None if groups.every_rollout is None else tuple(self.ranks.gather_survivors(*groups.every_rollout))
        head_scores = None
        if self.cfg.pruning.scorer != "head":  # the head the step started with (the engine's), on the same rows
            with torch.no_grad():
                head_scores = self.head(features.to(self.device)).float().cpu()
        with timer("head"):
            loss = self.pruning.update(*groups.head_rows(features, scores, labels, weights, group_ids, survival))
            prompt_rows = groups.prompt_rows(labels, weights)
            prompt = {} if prompt_rows is None else self.prompt_scorer.learn(*prompt_rows)
        return step_metrics.PruningUpdate(
            loss, prompt, step_metrics.AllSurvivors(group_ids, scores, labels, rewards, survival, head_scores, every))

    def _finish_step(self, step: int, groups: StepGroups, pruner: PrunerParams, learned: step_metrics.PruningUpdate,
                     stats: dict, timer, step_start: float) -> None:
        """The step's history row, logged; every rank's metrics reduced, and sample texts every ``text_every``."""
        metrics = step_metrics.trained(groups, pruner, learned, stats, self.cfg.pruning.keep_ratio,
                                       len(self.calibrator) > 0)
        if not self.ranks.alone:
            metrics["ranks/pruning_state_identical"] = float(self.ranks.identical(
                self.calibrator.state_dict(), self.head.state_dict(), self.pruning.replay.state_dict()))
        self.ranks.reduce_step_metrics(metrics)
        self._record(step, metrics, timer, step_start, len(groups.problems))
        t, survivors = self.cfg.trainer, groups.survivors
        if t.sample_texts and step % t.text_every == 0 and self.loggers:
            lines = [f"**reward {groups.scored.rewards[i]:.0f}**, gold `{survivors.golds[i]}`\n\n```\n"
                     f"{survivors.texts[i]}\n```" for i in range(min(t.sample_texts, len(survivors.texts)))]
            for run_logger in self.loggers:
                log_text(run_logger, "samples", "\n\n".join(lines), step)

    def _record(self, step: int, metrics: dict[str, float], timer, step_start: float, batch_size: int) -> None:
        now = time.perf_counter()
        metrics = {
            **metrics,
            **self.reward_failures.metrics,
            **{f"skipped/{k}": float(v) for k, v in self.skipped.items()},
            **{f"time/{k}": v for k, v in timer.seconds.items()},
            "time/step": now - step_start,
            "time/wall": self._wall_offset + now - (self._fit_started or step_start) - self.paused_seconds,
        }
        if "time/credit" in metrics:  # the oracle's modelled saving, apart from the measured clock
            credited = metrics["time/credit"] + sum(row.get("time/credit", 0.0) for row in self.history)
            metrics["time/wall_credited"] = metrics["time/wall"] - credited
        self.history.append({"step": int(step), **metrics})
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=batch_size)
        if "reward/accuracy" in metrics:
            self.log("acc", metrics["reward/accuracy"], prog_bar=True, on_step=True, batch_size=batch_size, logger=False)
        self.log("keep", metrics["pruning/keep_ratio"], prog_bar=True, on_step=True, batch_size=batch_size, logger=False)

    def _skip_step(self, step: int, reason: str, groups: StepGroups, pruner: PrunerParams, timer,
                   step_start: float) -> None:
        """A step that trains nothing: no reward, update, head or calibrator change. The optimizer still
        steps (every parameter's gradient is None, so AdamW leaves weights and moments alone) because
        Lightning counts steps by optimizer steps, and the prompt stream's position is the step count."""
        self.skipped[reason] += 1
        if groups.survivors is None:  # this rank's rollouts were all pruned (the others skip with it, silently)
            logger.warning(skip_warning(step, reason, len(groups.generation.rollouts), self.ranks,
                                        sum(self.skipped.values())))
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        opt.step()
        metrics = step_metrics.skipped(groups, pruner, self.cfg.pruning.keep_ratio)
        self.ranks.reduce_step_metrics(metrics)
        self._record(step, metrics, timer, step_start, len(groups.problems))


def skip_warning(step: int, reason: str, rollouts: int, ranks: RankSync, skipped: int) -> str:
    """The warning of the rank whose ``rollouts`` were all pruned at ``step``; with several ranks it names the rank."""
    whose = f"all {rollouts} rollouts" + ("" if ranks.alone else f" of rank {ranks.rank}")
    return f"step {step} skipped ({reason}): {whose} were pruned; {skipped} steps skipped so far"
