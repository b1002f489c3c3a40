"""ARRoL's online pruning state: the quality head, its calibrator, the replay window and the head's optimizer,
one object a trainer holds (paper §4.2–4.3, Algorithm 1 lines 5, 6 and 10).

A step asks it for h_t before generation (:meth:`OnlinePruning.params_for`), hands the engine the head's
weights, and after the rewards gives it the survivors' detect-time features, scores, labels and weights
(:meth:`OnlinePruning.update`): the calibrator takes the scores, the replay window the features, and the head
takes ``head.steps`` minibatch steps. :meth:`state_dict` holds everything an exact resume needs.
:meth:`OnlinePruning.observe` is that feeding for a trainer of one's own (docs/library.md): a generation's
rollouts and their rewards in, the survivors' rows taken from them as the Lightning trainer takes them.

Decisions:
- The calibrator learns from the scores the engine computed at L_detect with the head the step started
  with, before the head changes (so h_t and the scores it maps stay one head's).
- The head's minibatches draw from a generator of their own, seeded once and checkpointed.
- A rollout is correct, the head's label, when its reward is above :data:`CORRECT_ABOVE` (0.5): a 0/1 reward
  gives its own labels (math-verify's and ``reward.function``'s in the trainer, :mod:`arrol_pl.tasks.reward_function`).
- :meth:`OnlinePruning.observe` reads rollouts by their fields (:class:`ObservedRollout`), so the core stays free of
  the engine: any backend's records that carry them will do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol, Sequence

import torch

from arrol_pl.core.head_training import FeatureReplay, HeadConfig, head_update
from arrol_pl.core.pruning import PrunerParams, PruningConfig, build_pruner_params
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.core.sampling import joint_rows


CORRECT_ABOVE = 0.5
"""A rollout whose reward is above this is correct: the label the head and the calibrator learn."""


class ObservedRollout(Protocol):
    """What :meth:`OnlinePruning.observe` reads of a rollout (the engine's
    :class:`~arrol_pl.engine.protocol.Rollout` has these fields)."""

    pruned: bool
    """Stopped at L_detect: no reward, nothing learned from it."""
    feature: torch.Tensor | None
    """``(D,)``: its detect-time feature, the head's input."""
    score: float | None
    """The score at L_detect the decision read (the head's raw logit)."""
    survival: float | None
    """p_i, its survival probability under h_t (None: it could not be pruned, p = 1)."""
    # Read where present (a backend whose draws are independent may leave them out):
    # sample_index: int, its index in its group; joint: tuple[float, ...] | None, its chance of surviving together
    # with each member of its group by index (the engine's Rollout.joint; None: drawn independently).


class ObservedGeneration(Protocol):
    """A generation's rollouts (the engine's :class:`~arrol_pl.engine.protocol.GenerationResult`)."""

    rollouts: Sequence[ObservedRollout]


class OnlinePruning:
    """The head, calibrator, replay window and optimizer of one run, for a policy of width ``hidden_size``."""

    def __init__(self, pruning: PruningConfig, head: HeadConfig, hidden_size: int, seed: int) -> None:
        self.config, self.recipe = pruning, head
        self.head = QualityHead.for_input(head.input, hidden_size, head.hidden_dim)
        self.calibrator = pruning.make_calibrator()
        self.replay = FeatureReplay(head.replay)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=head.lr)
        self.generator = torch.Generator().manual_seed(seed)

    def params_for(self, step: int, rank: int = 0, world_size: int = 1) -> PrunerParams:
        """Algorithm 1 line 5: h_t for ``step``. With several ranks every rank gets the same h_t but draws its
        prune decisions from a stream of its own."""
        params = build_pruner_params(self.config, self.calibrator, step)
        if world_size > 1:
            params = dataclasses.replace(params, seed=(params.seed * world_size + rank) % (2**31 - 1))
        return params

    def update(
        self,
        features: torch.Tensor,
        scores: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor,
        groups: torch.Tensor | None = None,
        survival: torch.Tensor | None = None,
        joint: torch.Tensor | None = None,
    ) -> float:
        """Algorithm 1 line 10 (the head's part) from ``N`` labelled rollouts: the calibrator takes their ``(N,)``
        scores, 0/1 labels, weights (1/p with importance weighting), groups (prompt indices, for the AUC within
        groups that ``gate_metric=within`` reads), survival probabilities p (None: nothing was pruned) and the draw's
        pair chances ``joint`` (:func:`~arrol_pl.core.sampling.joint_rows`; None: independent draws; the gate's AUC
        counts a pair 1/π_ij, whatever the weights); the ``(N, D)`` features join the replay window and the
        head takes ``head.steps`` BCE minibatch steps. Returns the head's mean loss."""
        self.calibrator.update(scores, labels, weights, groups, survival, joint)
        self.replay.add(features, labels, weights)
        return head_update(
            self.head, self.optimizer, self.replay, self.recipe.steps, self.recipe.batch_size, self.generator
        )

    def observe(
        self,
        generation: ObservedGeneration,
        rewards: Sequence[float] | torch.Tensor,
        labels: Sequence[float] | torch.Tensor | None = None,
    ) -> float:
        """Algorithm 1 line 10 (the head's part) from one generation, fed as the trainer's step feeds it: the
        survivors (rollouts not pruned) with their features and scores, labelled correct when their reward is above
        :data:`CORRECT_ABOVE` (or by ``labels``, 0/1), weighted 1/p (their survival probability) with
        ``pruning.importance_weighting`` so that the calibrator and the head see the unpruned distribution, go to
        :meth:`update`. ``rewards`` (and ``labels``): one per survivor in rollout order, or one per rollout (the
        pruned ones' are ignored). Returns the head's mean loss; NaN, and nothing learned, when no survivor has a
        feature. Several ranks: gather the rows and call :meth:`update` with them instead, so that every rank
        learns the same."""
        rollouts = list(generation.rollouts)
        kept = [i for i, r in enumerate(rollouts) if not r.pruned]
        rewards = self._per_survivor(rewards, kept, len(rollouts), "rewards")
        labels = (
            (rewards > CORRECT_ABOVE).float()
            if labels is None
            else self._per_survivor(labels, kept, len(rollouts), "labels")
        )
        rows = [
            (j, rollouts[i])
            for j, i in enumerate(kept)
            if rollouts[i].feature is not None and rollouts[i].score is not None
        ]
        if not rows:
            return math.nan
        pick = torch.tensor([j for j, _ in rows], dtype=torch.long)
        features = torch.stack([r.feature for _, r in rows]).float()
        scores = torch.tensor([r.score for _, r in rows], dtype=torch.float32)
        survival = torch.tensor([1.0 if r.survival is None else r.survival for _, r in rows], dtype=torch.float32)
        weights = 1.0 / survival if self.config.importance_weighting else torch.ones_like(survival)
        groups = torch.tensor([r.prompt_index for _, r in rows], dtype=torch.long)
        joint = joint_rows(
            [getattr(r, "sample_index", 0) for _, r in rows], [getattr(r, "joint", None) for _, r in rows]
        )
        return self.update(features, scores, labels[pick], weights, groups, survival, joint)

    @staticmethod
    def _per_survivor(values, kept: list[int], n_rollouts: int, name: str) -> torch.Tensor:
        """``values`` as a ``(len(kept),)`` float32 tensor: given per survivor, or per rollout and then picked."""
        values = torch.as_tensor(values, dtype=torch.float32).flatten()
        if len(values) == len(kept):
            return values
        if len(values) == n_rollouts:
            return values[torch.tensor(kept, dtype=torch.long)]
        raise ValueError(
            f"{len(values)} {name} for {len(kept)} survivors of {n_rollouts} rollouts: give one per "
            "survivor (in rollout order) or one per rollout"
        )

    def state_dict(self) -> dict:
        """Everything but the head's weights, which a trainer keeps with its own module state."""
        return {
            "calibrator": self.calibrator.state_dict(),
            "replay": self.replay.state_dict(),
            "head_optimizer": self.optimizer.state_dict(),
            "head_generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.calibrator.load_state_dict(state["calibrator"])
        self.replay.load_state_dict(state["replay"])
        self.optimizer.load_state_dict(state["head_optimizer"])
        self.generator.set_state(state["head_generator"])
