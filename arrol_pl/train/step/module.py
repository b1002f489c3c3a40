"""The Lightning module: Algorithm 1's frontend. It holds the policy, the frozen reference (with a KL term only)
and the pruning state (:class:`~arrol_pl.core.online.OnlinePruning`), and its ``training_step`` calls one function
per phase: the groups from the :class:`~.groups.GroupChooser`, the rest from :mod:`.phases`. It owns no algorithm;
what it decides (manual optimisation, exact resume, skipped steps, several ranks) is in docs/algorithm.md.
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
from arrol_pl.train.policy import weights as policy_weights
from arrol_pl.train.policy.sharding import shard_from_rank0
from arrol_pl.train.records.loggers import log_text
from arrol_pl.train.step import metrics as step_metrics
from arrol_pl.train.step import phases
from arrol_pl.train.step.context import PhaseTimer, StepContext
from arrol_pl.train.step.groups import GroupChooser
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync
from arrol_pl.train.step.reward_failures import RewardFailures
from arrol_pl.train.step.rollouts import StepGroups

logger = logging.getLogger(__name__)


class ArrolModule(L.LightningModule):
    def __init__(
        self,
        cfg: RunConfig,
        policy: torch.nn.Module,
        engine: RolloutEngine,
        chooser: GroupChooser | None,
        pad_id: int,
        reference: torch.nn.Module | None = None,
        *,
        pruning: OnlinePruning | None = None,
        history: list[dict[str, float]] | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        """``chooser``: what chooses, generates and rewards each step's groups (:class:`~.groups.GroupChooser`);
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
        self.chooser: GroupChooser = chooser
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
        return None if self.chooser is None else self.chooser.prompt_scorer

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
                raise ValueError(
                    "trainer.resume: the checkpoint has no prompt-screen state, but this run screens "
                    "prompts (pruning.screen.stages); resume with the run's own pruning.screen"
                )
            self.prompt_scorer.load_state_dict(state["prompt_scorer"])

    def record_heldout(self, result) -> None:
        """Attach a held-out evaluation to the latest step's history row and log it at that step."""
        metrics = {"heldout/accuracy": result.accuracy, "heldout/greedy_accuracy": result.greedy_accuracy}
        self.history[-1].update(metrics)
        for run_logger in self.loggers:
            run_logger.log_metrics(metrics, step=int(self.history[-1]["step"]))

    # ---------------------------------------------------------------- one step of Algorithm 1
    def training_step(self, batch, batch_idx: int) -> None:
        """Algorithm 1, one call per phase, each timing itself (docs/algorithm.md maps them to its lines)."""
        ctx = StepContext(self.global_step, self.cfg.algo, PhaseTimer(), self.ranks, self.pad_id)
        h_t = self.pruning.params_for(ctx.step, ctx.ranks.rank, ctx.ranks.world_size)
        groups = self.chooser.choose(ctx, batch, h_t)
        failed = self.reward_failures.observe(ctx.step, groups.scored, ctx.ranks)  # every rank, every step
        if ctx.ranks.any_rank(groups.survivors is None):  # a rank without survivors: all ranks skip
            return self._skip_step(ctx, "no_survivors", groups, h_t)
        if failed:  # no label among the rewards; enough such steps in a row stop the run, with a checkpoint
            if self.reward_failures.failure is not None:
                self.trainer.should_stop = True
            return self._skip_step(ctx, "reward_failed", groups, h_t)
        survivors = groups.survivors
        rewards = torch.as_tensor(groups.scored.rewards, dtype=torch.float32)
        labels = torch.as_tensor(groups.scored.correct, dtype=torch.float32)
        advantages, train_mask = phases.advantage_phase(ctx, rewards, survivors.group_ids)
        reference = self._reference[0] if self._reference else None
        with phases.engine_asleep(ctx, self.engine, self._new_weights, self.cfg.model.trainable_layers is None):
            logps = phases.logprob_phase(ctx, self.policy, reference, survivors, train_mask)
            hooks = phases.update_hooks(ctx, self.policy, self.optimizers(), self.manual_backward)
            stats = phases.update_phase(ctx, self.policy, survivors, advantages, train_mask, logps, hooks)
            learned = phases.head_phase(ctx, self.pruning, self.prompt_scorer, groups, labels, rewards)
        self._finish_step(ctx, groups, h_t, learned, stats)

    def _new_weights(self):
        """The policy's weights in the engine's dtype and the head's state: what a sync sends the engine."""
        return policy_weights.engine_weights(self.policy, self.engine.dtype), self.head.state_dict()

    def _finish_step(
        self, ctx: StepContext, groups: StepGroups, h_t: PrunerParams, learned: step_metrics.PruningUpdate, stats: dict
    ) -> None:
        """The step's history row, logged; every rank's metrics reduced, and sample texts every ``text_every``."""
        metrics = step_metrics.trained(
            groups, h_t, learned, stats, self.cfg.pruning.keep_ratio, len(self.calibrator) > 0
        )
        if not ctx.ranks.alone:
            metrics["ranks/pruning_state_identical"] = float(
                ctx.ranks.identical(
                    self.calibrator.state_dict(), self.head.state_dict(), self.pruning.replay.state_dict()
                )
            )
        ctx.ranks.reduce_step_metrics(metrics)
        self._record(ctx, metrics, len(groups.problems))
        t, step = self.cfg.trainer, ctx.step
        if t.sample_texts and step % t.text_every == 0 and self.loggers:
            text = step_metrics.sample_texts(groups, t.sample_texts)
            for run_logger in self.loggers:
                log_text(run_logger, "samples", text, step)

    def _record(self, ctx: StepContext, metrics: dict[str, float], batch_size: int) -> None:
        now = time.perf_counter()
        metrics = {
            **metrics,
            **self.reward_failures.metrics,
            **{f"skipped/{k}": float(v) for k, v in self.skipped.items()},
            **{f"time/{k}": v for k, v in ctx.timer.seconds.items()},
            "time/step": now - ctx.started,
            "time/wall": self._wall_offset + now - (self._fit_started or ctx.started) - self.paused_seconds,
        }
        step_metrics.credit_wall(metrics, self.history)
        self.history.append({"step": int(ctx.step), **metrics})
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=batch_size)
        if "reward/accuracy" in metrics:
            self.log(
                "acc", metrics["reward/accuracy"], prog_bar=True, on_step=True, batch_size=batch_size, logger=False
            )
        self.log(
            "keep", metrics["pruning/keep_ratio"], prog_bar=True, on_step=True, batch_size=batch_size, logger=False
        )

    def _skip_step(self, ctx: StepContext, reason: str, groups: StepGroups, h_t: PrunerParams) -> None:
        """A step that trains nothing: no reward, update, head or calibrator change. The optimizer still
        steps (every parameter's gradient is None, so AdamW leaves weights and moments alone) because
        Lightning counts steps by optimizer steps, and the prompt stream's position is the step count."""
        self.skipped[reason] += 1
        if groups.survivors is None:  # this rank's rollouts were all pruned (the others skip with it, silently)
            rollouts, skipped = len(groups.generation.rollouts), sum(self.skipped.values())
            logger.warning(step_metrics.skip_warning(ctx.step, reason, rollouts, ctx.ranks, skipped))
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        opt.step()
        metrics = step_metrics.skipped(groups, h_t, self.cfg.pruning.keep_ratio)
        ctx.ranks.reduce_step_metrics(metrics)
        self._record(ctx, metrics, len(groups.problems))
