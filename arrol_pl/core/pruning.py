"""Pruning policies and the pruner parameters h_t of Algorithm 1 (paper §4.2–4.3, App. A.4–A.5).

The keep/prune decisions drawn from h_t at L_detect are :mod:`~arrol_pl.core.decisions`'s.

Decisions (each exposed in :class:`PruningConfig`):
- Policies by name: ``arrol`` (Eq. 2 survival from the calibrated quality-head posterior), ``random``
  (keep with probability κ: the Table 4 baseline), ``none`` (keep everything: plain GRPO/DAPO).
- Cold start: the first ``cold_start_steps`` steps never prune (paper: 20); the head and calibrator
  still learn from every rollout meanwhile.
- Balance target (``balance_target``; docs/algorithm.md derives each):
  ``anchored`` (the default, beyond the paper) keeps each group's highest- and lowest-scored rollouts and prunes
  the rest in Lemma 4.1's direction: a group whose expected positive share is above ρ loses its above-mean
  rollouts, one below ρ its below-mean ones. That direction is taken at every pass rate; how far the kept share
  moves toward ρ depends on how well the scores rank a group's rollouts (at chance, no further than random pruning).
  Where κ buys less than one survivor beyond those the floor guarantees (κ = 0.25 in groups of 8, not κ = 0.5), it
  softens: survival near κ, tilted by rank toward ρ, moving to the anchored split as the head separates the group's
  ends.
  ``group`` is that direction without the anchors: per group, p_i = clip(κ + δ_g + c_g(q_i - μ_g)) with δ_g
  giving mean κ and c_g chosen so the expected kept positive ratio is as close to ρ as the clip allows.
  ``spread`` reads only the order of the raw scores: each group's two ends survive, the rest share the budget.
  ``global`` is the paper's Eq. 2 as written, one δ solved over the calibrator's buffer before generation so that
  the mean survival is κ. Then δ = λ(q̄ - ρ) and p_i = κ + λ(q̄ - q_i): ρ cancels, and every rollout above the
  window's mean is pruned more, so with a pass rate π < 0.618 a good scorer *lowers* the kept positive share
  (a perfect one keeps π(1 - (λ/κ)(1 - π)), π² at λ = κ = 0.5); ``pruning=arrol_eq2`` selects it.
  The rules that order a group read :func:`~arrol_pl.core.calibration.ordered_posterior` (the monotone calibration
  table, interpolated), so rollouts of one calibrator bin are told apart by their raw scores and a noisy bin cannot
  reverse the head's order; Eq. 2 reads the binned posterior as the paper does. λ is Eq. 2's alone.
- Rollouts that finished before L_detect are complete: never pruned (``eligible=False``) and they
  count toward the floor. The achieved keep ratio is therefore >= κ; report it.
- The draw (``draw``, :mod:`~arrol_pl.core.sampling`): ``fixed_size`` (the default) keeps exactly Σp of a group's
  rollouts (⌊Σp⌋ or ⌈Σp⌉ when Σp is fractional) with each rollout's chance still its p; ``independent`` draws each
  rollout on its own, so the count varies. Each decision carries the pair inclusion probabilities π_ij the AUC
  estimates over survivors weight by.
- A per-group floor ``min_keep_per_group`` (default 2): a group left with fewer than 2 survivors has
  zero advantage, so the highest-survival pruned rollouts are revived until the floor is met. p stays the rule's
  (the draw's chance), so a revived rollout survives more often than its p says. Under the fixed-size draw the floor
  acts only where Σp is below it; under independent draws it tops up every group the draw left short, which at
  κ = 0.25 in groups of 8 keeps 2.47 survivors per group on average instead of 2.
- Decisions use a generator seeded per (step seed, prompt index), so they do not depend on the order
  in which the engine's scheduler brings groups to L_detect.
- Discrimination gate (beyond the paper, off by default): with ``gate_auc`` set, a step prunes only while the head's
  AUC over the calibrator window (its scores at L_detect against the final labels) is at least ``gate_auc``: the AUC
  over every rollout before pruning, estimated from the survivors by weighting each pair 1/(p_i p_j)
  (:meth:`~arrol_pl.core.calibration.BinnedCalibrator.within_auc`). The survivors' own AUC reads the order of what the
  rule kept (0.74 at a true 0.70 for the default rule at κ = 0.5), so a gate reading it would tend to stay open once
  open. An uninformative head prunes like random pruning, which halves groups without balancing them and turns mixed
  groups into zero-advantage ones; the gate keeps such a run at plain GRPO/DAPO until the head has learned something,
  and reopens or closes every step. ``gate_metric`` says which AUC: ``within`` (the default) counts only pairs of one
  group, which is what choosing among a prompt's rollouts can use; ``pooled`` counts every pair, and a head that only
  tells easy prompts from hard ones reaches it while ranking each group's rollouts at chance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Callable

import torch

from .calibration import BinnedCalibrator, interpolated_posterior, monotone_table, posterior_from_table
from .registry import Registry
from .sampling import DRAWS
from .scorers import check_scorer
from .screening import ScreenConfig
from .survival import (
    anchored_survival,
    group_balanced_survival,
    spread_survival,
    survival_from_delta,
    survival_probabilities,
)

BALANCE_TARGETS = ("anchored", "group", "spread", "global")
DEFAULT_BALANCE_TARGET = BALANCE_TARGETS[0]
GATE_METRICS = ("within", "pooled")

PRUNING_POLICIES: Registry[Callable[["PrunerParams", torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = (
    Registry("pruning policy")
)
"""``policy(params, posteriors, scores, floor) -> survival``: the eligible rollouts' calibrated q and raw head scores
of K groups, both ``(K, n)`` (one group: K = 1), to their survival probabilities ``(K, n)``; ``floor: (K,)`` the
survivors the per-group floor guarantees among each row's rollouts (:func:`floor_among_eligible`)."""


@dataclass
class SurvivalSettings:
    """The survival-rule fields shared by :class:`PruningConfig` (per run) and :class:`PrunerParams` (per step)."""

    policy: str = "arrol"
    """``arrol`` | ``random`` | ``none``."""
    keep_ratio: float = 0.5
    """κ: target fraction of rollouts that survive L_detect (paper 0.5)."""
    target_positive_ratio: float = 0.5
    """ρ: positive ratio the survivors are steered toward (paper 0.5)."""
    balance_strength: float = 0.5
    """λ: slope of the balance correction in Eq. 2 (paper 0.5)."""
    p_min: float = 0.05
    """Lowest survival probability: every rollout keeps a chance (exploration)."""
    p_max: float = 1.0
    """Highest survival probability."""
    balance_target: str = DEFAULT_BALANCE_TARGET
    """``anchored`` (default): each group's best- and worst-scored rollouts kept, the rest pruned in Lemma 4.1's
    direction toward ρ; ``group``: Lemma 4.1-directed per group; ``spread``: the two ends kept, the rest at random
    (ranks only); ``global``: the paper's Eq. 2 as written, one δ from the buffer (ρ cancels: see the module)."""
    min_keep_per_group: int = 2
    """Floor of survivors per group (fewer than 2 means zero advantage)."""
    draw: str = DRAWS[0]
    """``fixed_size`` (default): each group keeps exactly Σp survivors (⌊Σp⌋ or ⌈Σp⌉), each rollout with chance p
    (conditional Poisson sampling); ``independent``: one draw per rollout, the count varying
    (:mod:`~arrol_pl.core.sampling`)."""
    seed: int = 0
    """Seed of the prune decisions (per run in the config, per step in h_t)."""

    def __post_init__(self) -> None:
        """Validation; messages name the field (the trainer puts its section, ``pruning.``, in front)."""
        if self.policy not in PRUNING_POLICIES:
            raise ValueError(f"policy={self.policy!r} is unknown; choose one of {PRUNING_POLICIES.names()}")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio (κ) must be in (0, 1], got {self.keep_ratio}")
        if not 0.0 <= self.target_positive_ratio <= 1.0:
            raise ValueError(f"target_positive_ratio (ρ) must be in [0, 1], got {self.target_positive_ratio}")
        if self.balance_strength < 0:
            raise ValueError(f"balance_strength (λ) must be >= 0, got {self.balance_strength}")
        if not 0.0 <= self.p_min <= 1.0 or not 0.0 <= self.p_max <= 1.0:
            raise ValueError(f"p_min and p_max must lie in [0, 1], got {self.p_min}, {self.p_max}")
        if self.p_min > self.p_max:
            raise ValueError(f"p_min ({self.p_min}) must not exceed p_max ({self.p_max})")
        if not self.p_min <= self.keep_ratio <= self.p_max:
            raise ValueError(
                f"keep_ratio (κ={self.keep_ratio}) must lie in [p_min, p_max] = "
                f"[{self.p_min}, {self.p_max}], or the mean survival can never reach it"
            )
        if self.balance_target not in BALANCE_TARGETS:
            raise ValueError(f"balance_target={self.balance_target!r}; choose one of {list(BALANCE_TARGETS)}")
        if self.min_keep_per_group < 0:
            raise ValueError(f"min_keep_per_group must be >= 0, got {self.min_keep_per_group}")
        if self.draw not in DRAWS:
            raise ValueError(f"draw={self.draw!r}; choose one of {list(DRAWS)}")


@dataclass
class PruningConfig(SurvivalSettings):
    """What a run configures about pruning; ``build_pruner_params`` turns it into h_t each step."""

    cold_start_steps: int = 10
    """Steps without pruning while the head and calibrator warm up (the paper: 20 of hundreds of steps; 10 suits
    the short CPU runs)."""
    num_bins: int = 128
    """B, calibrator bins (paper 128)."""
    buffer_capacity: int = 4096
    """Calibrator sliding-window size (labelled rollouts)."""
    laplace_alpha: float = 1.0
    """α, Laplace smoothing of the bin counts."""
    importance_weighting: bool = True
    """Weight buffered survivors by 1/p so δ and the calibrator see the unpruned distribution."""
    gate_auc: float | None = None
    """Prune only while the head's AUC over the calibrator window, estimated over every rollout before pruning, is
    at least this (beyond the paper; None: the paper's cold start alone decides)."""
    gate_metric: str = "within"
    """The AUC ``gate_auc`` reads: ``within`` (over pairs of one group, what the survival rule can use) or
    ``pooled`` (over every pair, lifted by telling easy prompts from hard ones)."""
    scorer: str = "head"
    """What scores a rollout at L_detect (:mod:`~arrol_pl.core.scorers`): ``head`` (the paper's quality head),
    ``confidence`` (DeepConf's, training-free), ``checker`` (a process verifier, for tasks that check a prefix) or
    ``oracle`` (a study arm: the outcome through noise of AUC ``oracle_auc``, the saved decode time credited)."""
    oracle_auc: float | None = None
    """The oracle's AUC (``scorer=oracle`` only): 1.0 knows every outcome, 0.5 is chance."""
    screen: ScreenConfig = field(default_factory=ScreenConfig)
    """Group screening (beyond the paper, :mod:`~arrol_pl.core.screening`): oversample prompts and keep the
    groups most likely to have a learning signal; off by default. It starts with ``cold_start_steps`` too."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cold_start_steps < 0:
            raise ValueError(f"cold_start_steps must be >= 0, got {self.cold_start_steps}")
        if self.num_bins < 1:
            raise ValueError(f"num_bins must be >= 1, got {self.num_bins}")
        if self.buffer_capacity < 1:
            raise ValueError(f"buffer_capacity must be >= 1, got {self.buffer_capacity}")
        if self.laplace_alpha <= 0:
            raise ValueError(f"laplace_alpha must be > 0, got {self.laplace_alpha}")
        if self.gate_auc is not None and not 0.5 <= self.gate_auc <= 1.0:
            raise ValueError(f"gate_auc must be in [0.5, 1] or null, got {self.gate_auc}")
        if self.gate_metric not in GATE_METRICS:
            raise ValueError(f"gate_metric={self.gate_metric!r}; choose one of {list(GATE_METRICS)}")
        check_scorer(self.scorer, self.oracle_auc)

    def make_calibrator(self) -> BinnedCalibrator:
        return BinnedCalibrator(self.num_bins, self.buffer_capacity, self.laplace_alpha)


@dataclass
class PrunerParams(SurvivalSettings):
    """h_t: everything the engine needs to decide prunes at L_detect for one step (picklable)."""

    bin_posteriors: tuple[float, ...] = field(default_factory=tuple)
    """Calibrated q per bin of sigmoid(score); empty means q = 0.5 everywhere."""
    delta: float = 0.0
    """Global δ of Eq. 2 (ignored with ``balance_target='group'``)."""
    active: bool = True
    """False during cold start (or with the gate closed): keep everything."""
    window_auc: float = float("nan")
    """The head's AUC over the calibrator window when h_t was built, over every rollout before pruning, estimated
    (:meth:`~arrol_pl.core.calibration.BinnedCalibrator.auc`; ``gate_metric=pooled`` compares it)."""
    window_within_auc: float = float("nan")
    """The same over pairs of one group (``gate_metric=within`` compares it to ``gate_auc``)."""

    def posterior(self, scores: torch.Tensor) -> torch.Tensor:
        """Raw head logits ``(N,)`` → calibrated posteriors ``(N,)``."""
        scores = torch.as_tensor(scores)
        if not self.bin_posteriors:
            return torch.full(scores.shape, 0.5, dtype=torch.float32)
        return posterior_from_table(torch.tensor(self.bin_posteriors, dtype=torch.float64), scores)

    def ordered_posterior(self, scores: torch.Tensor) -> torch.Tensor:
        """Raw head logits → posteriors in the head's order (:func:`~arrol_pl.core.calibration.ordered_posterior`);
        the shape is kept."""
        scores = torch.as_tensor(scores)
        if not self.bin_posteriors:
            return torch.full(scores.shape, 0.5, dtype=torch.float32)
        return interpolated_posterior(self._monotone_table, scores)

    @cached_property
    def _monotone_table(self) -> torch.Tensor:
        """The calibration table made monotone once per h_t, not once per group."""
        return monotone_table(torch.tensor(self.bin_posteriors, dtype=torch.float64))

    def group_generator(self, prompt_index: int) -> torch.Generator:
        """A generator seeded by (step seed, prompt index): decisions independent of scheduling order."""
        return torch.Generator().manual_seed((self.seed * 1_000_003 + prompt_index) % (2**63 - 1))


@PRUNING_POLICIES.register("arrol")
def arrol_survival(
    params: PrunerParams, posteriors: torch.Tensor, scores: torch.Tensor, floor: torch.Tensor
) -> torch.Tensor:
    """The balance rule ``params.balance_target`` on rows of groups (``(K, n)``): ``anchored`` (which reads the
    floor), ``group`` and ``spread`` per group, Eq. 2 (``global``) with the step's δ."""
    kappa, rho, p_min, p_max = params.keep_ratio, params.target_positive_ratio, params.p_min, params.p_max
    if params.balance_target == "spread":
        return spread_survival(scores, kappa, p_min, p_max)
    if params.balance_target in ("anchored", "group"):
        ordered = params.ordered_posterior(scores)
        if params.balance_target == "group":
            return group_balanced_survival(ordered, kappa, rho, p_min, p_max)
        return anchored_survival(ordered, scores, kappa, rho, p_min, p_max, floor)
    return survival_from_delta(posteriors, params.delta, kappa, rho, params.balance_strength, p_min, p_max).to(
        torch.float32
    )


@PRUNING_POLICIES.register("random")
def random_survival(
    params: PrunerParams, posteriors: torch.Tensor, scores: torch.Tensor, floor: torch.Tensor
) -> torch.Tensor:
    """Keep with probability κ regardless of quality (Table 4 baseline)."""
    return torch.full(posteriors.shape, params.keep_ratio, dtype=torch.float32)


@PRUNING_POLICIES.register("none")
def no_pruning(
    params: PrunerParams, posteriors: torch.Tensor, scores: torch.Tensor, floor: torch.Tensor
) -> torch.Tensor:
    return torch.ones(posteriors.shape, dtype=torch.float32)


def step_seed(seed: int, step: int) -> int:
    """The decisions' seed of step ``step`` of a run seeded ``seed`` (:attr:`PrunerParams.seed`)."""
    return (seed * 7_919 + step) % (2**31 - 1)


def build_pruner_params(config: PruningConfig, calibrator: BinnedCalibrator, step: int) -> PrunerParams:
    """Algorithm 1 line 5: compute h_t from the calibrator before generation.

    The global δ is solved over the buffered scores, weighted by their stored weights (1/p with
    importance weighting), so the expected keep rate under the buffer distribution is κ (A.4).
    """
    table = calibrator.bin_posteriors()
    window_auc, window_within_auc = calibrator.auc(), calibrator.within_auc()
    gated = window_within_auc if config.gate_metric == "within" else window_auc
    gate_open = config.gate_auc is None or gated >= config.gate_auc  # NaN (one class only) stays closed
    delta = 0.0
    if config.policy == "arrol" and config.balance_target == "global":
        scores, _, weights = calibrator.buffer()
        if scores.numel() == 0:
            q, weights = torch.full((1,), 0.5), None
        else:
            q = posterior_from_table(table, scores)
        delta = survival_probabilities(
            q,
            config.keep_ratio,
            config.target_positive_ratio,
            config.balance_strength,
            config.p_min,
            config.p_max,
            weights=weights,
        ).delta
    shared = {f.name: getattr(config, f.name) for f in fields(SurvivalSettings)}
    shared["seed"] = step_seed(config.seed, step)
    return PrunerParams(
        **shared,
        bin_posteriors=tuple(float(x) for x in table),
        delta=delta,
        active=config.policy != "none" and step >= config.cold_start_steps and gate_open,
        window_auc=window_auc,
        window_within_auc=window_within_auc,
    )
