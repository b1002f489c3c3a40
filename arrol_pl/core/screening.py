"""Group screening (beyond the paper): spend the update on groups that can teach.

A group whose rollouts all share one reward has zero advantage under GRPO and DAPO: it costs its
generation, log-probs and update and changes nothing. ARRoL's within-group pruning cannot mend a group
with no correct rollout. Screening draws more prompts than a step trains on and drops, early, the groups
most likely to come out all-correct or all-wrong, so that B groups with a learning signal reach the update
(the mechanism of DAPO's dynamic sampling, GRESO and SPEED-RL, decided here from the quality head).

Decisions:
- **What is ranked.** A group's chance of zero advantage from its members' calibrated chances of being
  correct q_i, taken as independent: ``P0 = Π q_i + Π (1 - q_i)`` (:func:`zero_advantage_probability`).
  The groups with the lowest P0 are kept; ties break at random.
- **Two stages.** ``prompt`` scores each prompt once, from the final-layer hidden state of its last token
  (the state that samples the first response token), with a head of its own: every rollout of the prompt
  then has the same q and ``P0 = q^G + (1 - q)^G``. A screened prompt costs one prefill, which the kept
  prompts' rollouts reuse through the prefix cache. ``detect`` scores every rollout at L_detect with the
  quality head, as the paper's pruning does, and aborts the screened groups inside the engine; ARRoL's
  within-group pruning then runs on the kept groups. ``prompt+detect`` runs both, in that order.
- **Oversampling up front, not refill.** Each stage starts ``ceil(n (1 + oversample))`` groups for the ``n``
  it passes on, all at once. The detect stage ranks across groups, so it waits until every group has
  reached L_detect (with all rollouts admitted at once, the same engine step); a refill would need the
  prompt stream inside the engine and would rank each group against a moving set.
- **Cold start.** Until the heads have learned (``pruning.cold_start_steps``), each stage keeps a uniformly
  random subset of the same size: the step's shape and cost stay those of the screened run, and the heads
  learn on unselected groups.
- **Audit.** A random share of the groups at each stage, drawn independently of the screen, is
  run to completion whatever is decided (pruned members keep running; their extra tokens are counted).
  Those groups are never trained on beyond what the decision kept; their complete rewards say, over a
  run, how often a screened-out group really had zero advantage (the screen's precision), how often a
  random group had (random's), and what a perfect screen dropping the same share would reach (the
  oracle's): :class:`~arrol_pl.core.screen_audit.AuditCounts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .screen_audit import AuditCounts, audit_mask, counts_metrics, zero_variance

SCREEN_STAGES = ("none", "prompt", "detect", "prompt+detect")


@dataclass
class ScreenConfig:
    """``pruning.screen``: which groups reach the update (see the module docstring)."""

    stages: str = "none"
    """``none`` | ``prompt`` (the last prompt token's hidden state) | ``detect`` (the rollouts at L_detect) |
    ``prompt+detect``."""
    oversample: float = 1.0
    """Detect stage: ``ceil(B (1 + oversample))`` groups reach L_detect, B are kept."""
    prompt_oversample: float = 1.0
    """Prompt stage: ``ceil(n (1 + prompt_oversample))`` prompts are scored for the ``n`` it passes on."""
    audit: float = 0.1
    """Share of each stage's groups run to completion to measure the screen (0: no audit)."""

    def __post_init__(self) -> None:
        if self.stages not in SCREEN_STAGES:
            raise ValueError(f"screen.stages={self.stages!r}; choose one of {list(SCREEN_STAGES)}")
        for key in ("oversample", "prompt_oversample"):
            if not 0 <= getattr(self, key) <= 16:
                raise ValueError(f"screen.{key} must be in [0, 16], got {getattr(self, key)}")
        if not 0 <= self.audit <= 1:
            raise ValueError(f"screen.audit must be in [0, 1], got {self.audit}")

    @property
    def prompt_stage(self) -> bool:
        return self.stages.startswith("prompt")

    @property
    def detect_stage(self) -> bool:
        return self.stages.endswith("detect")

    def counts(self, prompts_per_step: int) -> tuple[int, int]:
        """``(drawn, to_detect)``: prompts drawn per step and groups that start generating; the detect stage
        keeps ``prompts_per_step`` of ``to_detect``."""
        to_detect = oversampled(prompts_per_step, self.oversample) if self.detect_stage else prompts_per_step
        drawn = oversampled(to_detect, self.prompt_oversample) if self.prompt_stage else to_detect
        return drawn, to_detect


@dataclass(frozen=True)
class GroupScreen:
    """What a generation needs to know about the screen (picklable; the engine's argument beside h_t).

    ``keep``: groups the detect stage passes among the non-shadow ones (None: no detect stage). ``active``:
    rank by P0 (False: a random ``keep``, the cold start). ``audited``: prompt indices that run to completion
    whatever is decided. ``shadow``: prompt indices dropped before generation (the prompt stage) and run
    only for the audit: never pruned, never trained, reported screened.
    """

    keep: int | None = None
    active: bool = True
    seed: int = 0
    audited: frozenset[int] = frozenset()
    shadow: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 1:
            raise ValueError(f"screen keep must be >= 1 group, got {self.keep}")

    def is_audited(self, prompt_index: int) -> bool:
        return prompt_index in self.audited or prompt_index in self.shadow

    def is_shadow(self, prompt_index: int) -> bool:
        return prompt_index in self.shadow

    def generator(self) -> torch.Generator:
        """The detect stage's tie-breaking and cold-start draws."""
        return torch.Generator().manual_seed(self.seed % (2**63 - 1))


def oversampled(n: int, oversample: float) -> int:
    """``ceil(n (1 + oversample))`` (rounding guarded against float noise: 8 × 1.25 is 10, not 11)."""
    return int(math.ceil(round(n * (1.0 + oversample), 9)))


def zero_advantage_probability(
    q: torch.Tensor, group_ids: torch.Tensor | None = None, group_size: int | None = None
) -> torch.Tensor:
    """P0 per group: the chance that all its rollouts succeed or all fail, ``Π q_i + Π (1 - q_i)``.

    Args:
        q: ``(N,)`` calibrated chances of being correct. With ``group_size`` each entry is a whole group's
            shared q (the prompt stage): ``q^G + (1 - q)^G``.
        group_ids: ``(N,)`` group of each entry (ignored with ``group_size``); None: one group.
    Returns:
        ``(num_groups,)`` in the order of ``torch.unique(group_ids)`` (or of ``q`` with ``group_size``).
    """
    q = torch.as_tensor(q, dtype=torch.float64).clamp(1e-12, 1 - 1e-12).flatten()
    if group_size is not None:
        return (group_size * q.log()).exp() + (group_size * (-q).log1p()).exp()
    if group_ids is None:
        group_ids = torch.zeros(q.numel(), dtype=torch.long)
    _, inverse = torch.unique(torch.as_tensor(group_ids).flatten(), return_inverse=True)
    n = int(inverse.max()) + 1 if q.numel() else 0
    log_pos = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, q.log())
    log_neg = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, (-q).log1p())
    return log_pos.exp() + log_neg.exp()


def select_groups(
    p0: torch.Tensor | None, keep: int, generator: torch.Generator, num_groups: int | None = None
) -> torch.Tensor:
    """Which groups pass: the ``keep`` with the lowest ``p0`` (ties at random), or with ``p0=None`` a uniformly
    random ``keep`` of ``num_groups``. Returns a ``(num_groups,)`` bool mask. The generator is drawn from the
    same way in both cases, so a run's random stream does not depend on whether the screen was active."""
    n = int(p0.numel()) if p0 is not None else int(num_groups or 0)
    if not 0 <= keep:
        raise ValueError(f"keep must be >= 0, got {keep}")
    order = torch.randperm(n, generator=generator)
    if p0 is not None:
        shuffled = torch.as_tensor(p0, dtype=torch.float64).flatten()[order]
        order = order[torch.argsort(shuffled, stable=True)]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[order[:keep]] = True
    return mask


class PromptHead(Protocol):
    """The prompt stage's learned scorer (:class:`arrol_pl.train.step.screening.PromptScorer`)."""

    def scores(self, features: torch.Tensor) -> torch.Tensor: ...

    def posteriors(self, scores: torch.Tensor) -> torch.Tensor:
        """Calibrated chance that one rollout of each prompt is correct."""
        ...


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
        return [rollouts[k * g : (k + 1) * g] for k in range(len(rollouts) // g)]

    def generator(self, salt: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 31 + salt) % (2**63 - 1))

    def plan_prompts(self, drawn: int, scorer: PromptHead | None = None, features: torch.Tensor | None = None) -> None:
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
        self.metrics.update(
            {
                "screen/prompt_p0_kept": float(p0[keep].mean()),
                "screen/prompt_p0_dropped": float(p0[~keep].mean()) if bool((~keep).any()) else 0.0,
            }
        )

    def engine_screen(self) -> GroupScreen:
        """The engine's part: the detect stage (keep B of the passed groups), the audited and shadow groups."""
        audited = set()
        if self.prompt_audited is not None:
            audited |= {k for k, i in enumerate(self.order[: self.passed]) if self.prompt_audited[i]}
        if self.config.detect_stage:
            self.detect_audited = audit_mask(self.passed, self.config.audit, self.generator(3))
            audited |= {k for k in range(self.passed) if self.detect_audited[k]}
        return GroupScreen(
            keep=self.prompts_per_step if self.config.detect_stage else None,
            active=self.active,
            seed=self.seed,
            audited=frozenset(audited),
            shadow=frozenset(range(self.passed, len(self.order))),
        )

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
        self.audit_correct = {k: correct[j * g : (j + 1) * g] for j, k in enumerate(audited)}
        if not self.active:  # a cold-start screen is random: its audit would only dilute the screen's figures
            return self._empty_audit()
        zero = {k: zero_variance(v) for k, v in self.audit_correct.items()}
        metrics: dict[str, float] = {}
        if self.prompt_audited is not None:
            ks = [k for k in audited if self.prompt_audited[self.order[k]]]
            counts = AuditCounts.of_step(
                torch.tensor([zero[k] for k in ks], dtype=torch.bool),
                torch.tensor([k >= self.passed for k in ks], dtype=torch.bool),
                1 - self.passed / self.drawn,
            )
            metrics.update(counts_metrics("prompt", counts))
        if self.config.detect_stage:
            ks = [k for k in audited if k < self.passed and self.detect_audited[k]]
            counts = AuditCounts.of_step(
                torch.tensor([zero[k] for k in ks], dtype=torch.bool),
                torch.tensor([groups[k][0].screened for k in ks], dtype=torch.bool),
                1 - self.prompts_per_step / self.passed,
            )
            metrics.update(counts_metrics("detect", counts))
        return metrics

    def _empty_audit(self) -> dict[str, float]:
        """A step that audited nothing still records zero counts, so every step has the same keys."""
        stages = [s for s, on in (("prompt", self.config.prompt_stage), ("detect", self.config.detect_stage)) if on]
        return {k: v for s in stages for k, v in counts_metrics(s, AuditCounts()).items()}

    def detect_metrics(self, rollouts) -> dict[str, float]:
        """The detect stage's P0 of the groups it kept and dropped, and the tokens the dropped ones cost."""
        groups = self.groups(rollouts)[: self.passed]
        kept = [g[0].group_p0 for g in groups if not g[0].screened and g[0].group_p0 is not None]
        dropped = [g[0].group_p0 for g in groups if g[0].screened and g[0].group_p0 is not None]
        out = {
            "screen/groups_generated": float(len(self.order)),
            "screen/tokens_dropped_groups": float(sum(r.generated_tokens for g in groups if g[0].screened for r in g)),
        }
        if kept:
            out["screen/detect_p0_kept"] = sum(kept) / len(kept)
        if dropped:
            out["screen/detect_p0_dropped"] = sum(dropped) / len(dropped)
        return out

    def prompt_rows(
        self, survivor_groups: torch.Tensor, survivor_labels: torch.Tensor, survivor_weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
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
        """The quality head's and its calibrator's rows ``(features, scores, labels, weights, group ids, survival,
        joint)`` with those of the audited groups the detect stage dropped appended, weighted 1 / audit share
        (otherwise both would see the kept groups only); their survival is 1: an audited group runs every rollout to
        its end (no draw: joint NaN)."""
        groups = self.groups(rollouts)
        ks = [k for k in range(self.passed) if k in self.audit_correct and groups[k][0].screened]
        if not ks:
            return rows
        rs = [r for k in ks for r in groups[k]]
        extra = (
            torch.stack([r.feature for r in rs]).float(),
            torch.tensor([r.score for r in rs], dtype=torch.float32),
            torch.cat([self.audit_correct[k] for k in ks]),
            torch.full((len(rs),), 1.0 / self.config.audit),
            torch.tensor([r.prompt_index for r in rs], dtype=torch.long),
            torch.ones(len(rs)),
            torch.full((len(rs), rows[6].shape[1]), float("nan")),
        )
        return tuple(torch.cat([a, b.to(a.dtype)]) for a, b in zip(rows, extra))
