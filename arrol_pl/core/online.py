"""ARRoL's online pruning state: the quality head, its calibrator, the replay window and the head's optimizer,
one object a trainer holds (paper §4.2–4.3, Algorithm 1 lines 5, 6 and 10).

A step asks it for h_t before generation (:meth:`OnlinePruning.params_for`), hands the engine the head's
weights, and after the rewards gives it the survivors' detect-time features, scores, labels and weights
(:meth:`OnlinePruning.update`): the calibrator takes the scores, the replay window the features, and the head
takes ``head.steps`` minibatch steps. :meth:`state_dict` holds everything an exact resume needs.

Decisions:
- The calibrator learns from the scores the engine computed at L_detect with the head the step started
  with, before the head changes (so h_t and the scores it maps stay one head's).
- The head's minibatches draw from a generator of their own, seeded once and checkpointed.
"""

from __future__ import annotations

import dataclasses

import torch

from arrol_pl.core.head_training import FeatureReplay, HeadConfig, head_update
from arrol_pl.core.pruning import PrunerParams, PruningConfig, build_pruner_params
from arrol_pl.core.quality_head import QualityHead


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

    def update(self, features: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor,
               weights: torch.Tensor) -> float:
        """Algorithm 1 line 10 (the head's part) from ``N`` labelled rollouts: the calibrator takes their ``(N,)``
        scores, 0/1 labels and weights (1/p with importance weighting); the ``(N, D)`` features join the replay window
        and the head takes ``head.steps`` BCE minibatch steps. Returns the head's mean loss."""
        self.calibrator.update(scores, labels, weights)
        self.replay.add(features, labels, weights)
        return head_update(self.head, self.optimizer, self.replay, self.recipe.steps, self.recipe.batch_size,
                           self.generator)

    def state_dict(self) -> dict:
        """Everything but the head's weights, which a trainer keeps with its own module state."""
        return {"calibrator": self.calibrator.state_dict(), "replay": self.replay.state_dict(),
                "head_optimizer": self.optimizer.state_dict(), "head_generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.calibrator.load_state_dict(state["calibrator"])
        self.replay.load_state_dict(state["replay"])
        self.optimizer.load_state_dict(state["head_optimizer"])
        self.generator.set_state(state["head_generator"])
