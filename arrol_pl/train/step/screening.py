"""The group screen in a training step: :func:`screened` runs one step's screen around a rollout round, and
:class:`PromptScorer` is the prompt stage's learned state, checkpointed with the module. The rules and the step's
screen (:class:`~arrol_pl.core.screening.ScreenStep`) are in :mod:`arrol_pl.core.screening`.

One step with ``pruning.screen`` on, for the ``drawn`` prompts of the step:
1. **Prompt stage** (``prompt`` in ``stages``): the engine's prefill gives each prompt's last hidden state;
   the prompt head and its calibrator turn it into q, ``P0 = q^G + (1 − q)^G``, and the prompts with the
   lowest P0 go on (``ScreenStep.plan_prompts``).
2. **Detect stage** (``detect``): the engine ranks the groups at L_detect and aborts all but B
   (:class:`~arrol_pl.core.screening.GroupScreen`).
3. **Audit**: the audited groups' complete texts are scored, and each stage's
   :class:`~arrol_pl.core.screen_audit.AuditCounts` recorded (``ScreenStep.audit``).
4. **Learning**: the prompt head learns from the survivors (weighted 1/p, as the quality head) and from the
   shadow groups' complete rollouts, weighted 1/audit share: those stand for every prompt the stage dropped.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from arrol_pl.core.head_training import HeadConfig, head_quality
from arrol_pl.core.online import OnlinePruning
from arrol_pl.core.pruning import PrunerParams, PruningConfig
from arrol_pl.core.screening import ScreenStep, screen_seed
from arrol_pl.train.step.rollouts import RolloutRound, StepGroups


class PromptScorer(OnlinePruning):
    """The prompt stage's head (on the last prompt token's hidden state), calibrator, replay window and optimizer."""

    def __init__(self, hidden_size: int, head: HeadConfig, pruning: PruningConfig, seed: int) -> None:
        super().__init__(pruning, dataclasses.replace(head, input="last"), hidden_size, seed + 1)

    def scores(self, features: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return self.head(features.float()).float()

    def posteriors(self, scores: torch.Tensor) -> torch.Tensor:
        """Calibrated chance that one rollout of the prompt is correct (0.5 before any label)."""
        if len(self.calibrator) == 0:
            return torch.full(scores.shape, 0.5)
        return self.calibrator.posterior(scores).float()

    def learn(self, features: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> dict[str, float]:
        """One update from rows ``(features (N, H), labels (N,), weights (N,))``; returns the head's quality on
        them, measured before the update, and its loss."""
        scores = self.scores(features)
        quality = head_quality(scores, self.posteriors(scores) if len(self.calibrator) else None, labels)
        self.head.train()
        loss = self.update(features, scores, labels, weights)
        return {**{k: v for k, v in quality.items() if not math.isnan(v)}, "loss": loss}

    def state_dict(self) -> dict:
        state = super().state_dict()
        return {
            "head": self.head.state_dict(),
            "calibrator": state["calibrator"],
            "replay": state["replay"],
            "optimizer": state["head_optimizer"],
            "generator": state["head_generator"],
        }

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        super().load_state_dict(
            {
                "calibrator": state["calibrator"],
                "replay": state["replay"],
                "head_optimizer": state["optimizer"],
                "head_generator": state["generator"],
            }
        )


def screened(
    cfg, step: int, prompts: list, rollout_round: RolloutRound, params: PrunerParams, scorer: PromptScorer | None
) -> StepGroups:
    """A step's groups with the screen (``pruning.screen``): the prompt stage chooses who generates (the engine
    gives each drawn prompt's last hidden state, timed as ``screen``), one round generates with the engine's
    detect stage, and the audited groups' complete texts are scored (timed as ``reward``)."""
    screen = ScreenStep(
        cfg.pruning.screen,
        cfg.algo.prompts_per_step,
        cfg.algo.group_size,
        active=step >= cfg.pruning.cold_start_steps,
        seed=screen_seed(cfg.trainer.seed, step),
    )
    features = None
    if screen.config.prompt_stage:
        with rollout_round.timer("screen"):
            features = rollout_round.engine.prompt_features([p.prompt for p in prompts])
    screen.plan_prompts(len(prompts), scorer, features)
    prompts = [prompts[i] for i in screen.order]
    groups = rollout_round.generate_groups(prompts, params, screen.engine_screen())
    if groups.survivors is None:
        return groups
    groups.screen = screen
    with rollout_round.timer("reward"):
        groups.metrics.update(
            screen.audit(
                groups.generation.rollouts,
                lambda texts, ks: (
                    rollout_round.reward.score(
                        texts, [prompts[k].answer for k in ks], prompts=[prompts[k].prompt for k in ks]
                    ).correct
                ),
            )
        )
    groups.metrics.update(screen.metrics, **screen.detect_metrics(groups.generation.rollouts))
    return groups
