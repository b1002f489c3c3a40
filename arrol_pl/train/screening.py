"""The group screen in a training step (:mod:`arrol_pl.core.screening` holds the rules).

One step with ``pruning.screen`` on, for the ``drawn`` prompts of the step:
1. **Prompt stage** (``prompt`` in ``stages``): the engine's prefill gives each prompt's last hidden state;
   the prompt head and its calibrator turn it into q, ``P0 = q^G + (1 − q)^G``, and the prompts with the
   lowest P0 go on (:meth:`ScreenStep.plan_prompts`).
2. **Detect stage** (``detect``): the engine ranks the groups at L_detect and aborts all but B
   (:class:`~arrol_pl.core.screening.GroupScreen`).
3. **Audit**: the audited groups' complete texts are scored, and each stage's :class:`AuditCounts` recorded
   (:meth:`ScreenStep.audit`).
4. **Learning**: the prompt head learns from the survivors (weighted 1/p, as the quality head) and from the
   shadow groups' complete rollouts, weighted 1/audit share: those stand for every prompt the stage dropped.

:class:`PromptScorer` is the prompt stage's learned state, checkpointed with the module.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from arrol_pl.core.head_training import HeadConfig, head_quality
from arrol_pl.core.online import OnlinePruning
from arrol_pl.core.pruning import PrunerParams, PruningConfig
from arrol_pl.core.screening import (AuditCounts, GroupScreen, ScreenConfig, audit_mask, select_groups,
                                     zero_advantage_probability, zero_variance)
from arrol_pl.train.rollouts import RolloutRound, StepGroups


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
        return {"head": self.head.state_dict(), "calibrator": state["calibrator"], "replay": state["replay"],
                "optimizer": state["head_optimizer"], "generator": state["head_generator"]}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        super().load_state_dict({"calibrator": state["calibrator"], "replay": state["replay"],
                                 "head_optimizer": state["optimizer"], "head_generator": state["generator"]})


def screened(cfg, step: int, prompts: list, rollout: RolloutRound, params: PrunerParams,
             scorer: PromptScorer | None) -> StepGroups:
    """A step's groups with the screen (``pruning.screen``): the prompt stage chooses who generates (the engine
    gives each drawn prompt's last hidden state, timed as ``screen``), one round generates with the engine's
    detect stage, and the audited groups' complete texts are scored (timed as ``reward``)."""
    screen = ScreenStep(cfg.pruning.screen, cfg.algo.prompts_per_step, cfg.algo.group_size,
                        active=step >= cfg.pruning.cold_start_steps, seed=screen_seed(cfg.trainer.seed, step))
    features = None
    if screen.config.prompt_stage:
        with rollout.timer("screen"):
            features = rollout.engine.prompt_features([p.prompt for p in prompts])
    screen.plan_prompts(len(prompts), scorer, features)
    prompts = [prompts[i] for i in screen.order]
    groups = rollout(prompts, params, screen.engine_screen())
    if groups.survivors is None:
        return groups
    groups.screen = screen
    with rollout.timer("reward"):
        groups.metrics.update(screen.audit(groups.generation.rollouts, lambda texts, ks: rollout.reward.score(
            texts, [prompts[k].answer for k in ks]).correct))
    groups.metrics.update(screen.metrics, **screen.detect_metrics(groups.generation.rollouts))
    return groups


def screen_seed(seed: int, step: int) -> int:
    """The screen's draws at ``step`` (apart from sampling's and the prune decisions' streams)."""
    return (seed * 2_000_029 + step * 7 + 3) % (2**31 - 1)


@dataclass
class ScreenStep:
    """One step's screen: which of the ``drawn`` prompts generate, what the engine is told, and the audit.

    ``order``: indices into the drawn prompts, in generation order (passed prompts, then shadow ones).
    """

    config: ScreenConfig
    prompts_per_step: int
    group_size: int
    active: bool
    seed: int
    drawn: int = 0
    order: list[int] = field(default_factory=list)
    passed: int = 0
    """Prompts that generate to be trained on (the first ``passed`` of ``order``)."""
    prompt_audited: torch.Tensor | None = None
    """(drawn,) bool: the prompt stage's audit sample."""
    features: torch.Tensor | None = None
    """(drawn, H): the prompt features (prompt stage)."""
    metrics: dict[str, float] = field(default_factory=dict)
    audit_correct: dict[int, torch.Tensor] = field(default_factory=dict)
    """Generation-order group index → its audited rollouts' correctness ``(G,)``."""
    detect_audited: torch.Tensor | None = None
    """(passed,) bool: the detect stage's audit sample."""

    def groups(self, rollouts) -> list:
        """The generation's rollouts cut into its groups, in generation order."""
        g = self.group_size
        return [rollouts[k * g:(k + 1) * g] for k in range(len(rollouts) // g)]

    def generator(self, salt: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 31 + salt) % (2**63 - 1))

    def plan_prompts(self, drawn: int, scorer: PromptScorer | None = None, features: torch.Tensor | None = None) -> None:
        """Choose the prompts that generate. Without the prompt stage all ``drawn`` do."""
        self.drawn = drawn
        if not self.config.prompt_stage:
            self.order, self.passed = list(range(drawn)), drawn
            return
        n_pass = min(self.config.counts(self.prompts_per_step)[1], drawn)
        scores = scorer.scores(features)
        p0 = zero_advantage_probability(scorer.posteriors(scores), group_size=self.group_size)
        keep = select_groups(p0 if self.active else None, n_pass, self.generator(1), drawn)
        self.prompt_audited = audit_mask(drawn, self.config.audit, self.generator(2))
        shadow = [i for i in range(drawn) if self.prompt_audited[i] and not keep[i]]
        self.order = [i for i in range(drawn) if keep[i]] + shadow
        self.passed, self.features = n_pass, features
        self.metrics.update({"screen/prompt_p0_kept": float(p0[keep].mean()),
                             "screen/prompt_p0_dropped": float(p0[~keep].mean()) if bool((~keep).any()) else 0.0})

    def engine_screen(self) -> GroupScreen:
        """The engine's part: the detect stage (keep B of the passed groups), the audited and shadow groups."""
        audited = set()
        if self.prompt_audited is not None:
            audited |= {k for k, i in enumerate(self.order[:self.passed]) if self.prompt_audited[i]}
        if self.config.detect_stage:
            self.detect_audited = audit_mask(self.passed, self.config.audit, self.generator(3))
            audited |= {k for k in range(self.passed) if self.detect_audited[k]}
        return GroupScreen(
            keep=self.prompts_per_step if self.config.detect_stage else None, active=self.active, seed=self.seed,
            audited=frozenset(audited), shadow=frozenset(range(self.passed, len(self.order))))

    def audit(self, rollouts, score) -> dict[str, float]:
        """Score the audited groups' complete texts with ``score(texts, group positions) -> correct (N,)`` and
        return this step's audit counts per stage as metrics (summed over a run by the summary); counts are
        zero while the screen is not active (the cold start), whose labels still teach the heads."""
        groups = self.groups(rollouts)
        audited = [k for k, g in enumerate(groups) if g[0].audited]
        if not audited:
            return self._empty_audit()
        texts = [r.full_text for k in audited for r in groups[k]]
        correct = torch.as_tensor(score(texts, [k for k in audited for _ in groups[k]]), dtype=torch.float32)
        g = self.group_size
        self.audit_correct = {k: correct[j * g:(j + 1) * g] for j, k in enumerate(audited)}
        if not self.active:  # a cold-start screen is random: its audit would only dilute the screen's figures
            return self._empty_audit()
        zero = {k: zero_variance(v) for k, v in self.audit_correct.items()}
        metrics: dict[str, float] = {}
        if self.prompt_audited is not None:
            ks = [k for k in audited if self.prompt_audited[self.order[k]]]
            counts = AuditCounts.of_step(torch.tensor([zero[k] for k in ks], dtype=torch.bool),
                                         torch.tensor([k >= self.passed for k in ks], dtype=torch.bool),
                                         1 - self.passed / self.drawn)
            metrics.update(counts_metrics("prompt", counts))
        if self.config.detect_stage:
            ks = [k for k in audited if k < self.passed and self.detect_audited[k]]
            counts = AuditCounts.of_step(torch.tensor([zero[k] for k in ks], dtype=torch.bool),
                                         torch.tensor([groups[k][0].screened for k in ks], dtype=torch.bool),
                                         1 - self.prompts_per_step / self.passed)
            metrics.update(counts_metrics("detect", counts))
        return metrics

    def _empty_audit(self) -> dict[str, float]:
        """A step that audited nothing still records zero counts, so every step has the same keys."""
        stages = [s for s, on in (("prompt", self.config.prompt_stage), ("detect", self.config.detect_stage)) if on]
        return {k: v for s in stages for k, v in counts_metrics(s, AuditCounts()).items()}

    def detect_metrics(self, rollouts) -> dict[str, float]:
        """The detect stage's P0 of the groups it kept and dropped, and the tokens the dropped ones cost."""
        groups = self.groups(rollouts)[:self.passed]
        kept = [g[0].group_p0 for g in groups if not g[0].screened and g[0].group_p0 is not None]
        dropped = [g[0].group_p0 for g in groups if g[0].screened and g[0].group_p0 is not None]
        out = {"screen/groups_generated": float(len(self.order)),
               "screen/tokens_dropped_groups": float(sum(r.generated_tokens for g in groups if g[0].screened
                                                         for r in g))}
        if kept:
            out["screen/detect_p0_kept"] = sum(kept) / len(kept)
        if dropped:
            out["screen/detect_p0_dropped"] = sum(dropped) / len(dropped)
        return out

    def prompt_rows(self, survivor_groups: torch.Tensor, survivor_labels: torch.Tensor,
                    survivor_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The prompt head's training rows: each survivor with its prompt's feature (weight 1/p), and the shadow
        groups' complete rollouts (weight 1 / audit share). None without the prompt stage."""
        if self.features is None:
            return None
        feats = [self.features[self.order[int(k)]] for k in survivor_groups]
        labels, weights = [survivor_labels.float()], [survivor_weights.float()]
        for k in range(self.passed, len(self.order)):
            if k in self.audit_correct:
                feats.extend([self.features[self.order[k]]] * self.group_size)
                labels.append(self.audit_correct[k])
                weights.append(torch.full((self.group_size,), 1.0 / self.config.audit))
        return torch.stack(feats), torch.cat(labels), torch.cat(weights)

    def with_dropped_audit(self, rows: tuple[torch.Tensor, ...], rollouts) -> tuple[torch.Tensor, ...]:
        """The quality head's and its calibrator's rows ``(features, scores, labels, weights)`` with those of the
        audited groups the detect stage dropped appended, weighted 1 / audit share (otherwise both would see the
        kept groups only)."""
        groups = self.groups(rollouts)
        ks = [k for k in range(self.passed) if k in self.audit_correct and groups[k][0].screened]
        if not ks:
            return rows
        rs = [r for k in ks for r in groups[k]]
        extra = (torch.stack([r.feature for r in rs]).float(), torch.tensor([r.score for r in rs], dtype=torch.float32),
                 torch.cat([self.audit_correct[k] for k in ks]), torch.full((len(rs),), 1.0 / self.config.audit))
        return tuple(torch.cat([a, b.to(a.dtype)]) for a, b in zip(rows, extra))


def counts_metrics(stage: str, counts: AuditCounts) -> dict[str, float]:
    return {f"screen/{stage}_audit_{k}": float(v) for k, v in vars(counts).items()}


def audit_totals(history: list[dict[str, float]], stage: str) -> AuditCounts:
    """A run's audit for ``stage`` (``prompt`` | ``detect``): the per-step counts summed."""
    total = AuditCounts()
    for h in history:
        if f"screen/{stage}_audit_audited" in h:
            total = total + AuditCounts.from_mapping(h, f"screen/{stage}_audit_")
    return total
