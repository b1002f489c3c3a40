"""The typed configuration of ``arrol grad-probe`` (:class:`GradProbeConfig`), registered with Hydra as
``grad_probe_schema``: the one home of the probe's defaults; ``conf/grad_probe.yaml`` states only what it changes.

Decisions:
- **Defaults taken, not copied.** G, the sampling, the loss aggregation and the learning rate are the trainer's
  (``algo.*``), κ is :class:`~arrol_pl.core.pruning.PruningConfig`'s, L_detect the engine's, the head's recipe and
  the calibration share the head probe's (:mod:`arrol_pl.analysis.head_probe.fit`): each default has one home.
- **Sections reused.** ``data`` is the trainer's :class:`~arrol_pl.train.config.sections.DataConfig` (its training
  problems give the head's and the gradients' prompts, its first ``data.num_heldout`` held-out problems the
  margin's), ``head`` the trainer's :class:`~arrol_pl.core.head_training.HeadConfig`, ``reward`` the evaluation's.
- **Checked before any model loads** (:func:`load_grad_probe_config`): a bad value is one line naming its key,
  exit 2; so are a policy that is neither ``tiny``, ``smollm2`` nor a model directory, and a κG that is not a
  whole number of rollouts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import MISSING, DictConfig

from arrol_pl.analysis.head_probe.config import check_policy
from arrol_pl.analysis.head_probe.fit import PROBE_TRAINING, ProbeSettings
from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig
from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.losses import LOSS_AGG_MODES
from arrol_pl.core.pruning import BALANCE_TARGETS, SurvivalSettings
from arrol_pl.engine.config import EngineConfig
from arrol_pl.tasks.user_function import MATH_VERIFY
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.model import ModelConfig
from arrol_pl.train.config.sections import AlgoConfig, DataConfig

SCHEMA = "grad_probe_schema"
"""The name ``conf/grad_probe.yaml`` selects first in its defaults list."""
NAMED_POLICIES = ("tiny", "smollm2")
ENGINE_DTYPES = ("float32", "bfloat16", "float16")
CONTROL_SOURCES = ("shared", "fresh")
"""Where the controls without pruning take their rollouts (``controls``): the group's own first ones, or G of their
own."""


@dataclass
class GradProbeConfig:
    """``arrol grad-probe``: on identical rollouts, the GRPO gradient of each subset of a prompt's group (all G, a
    random κG, the survival rules reading the learned head or an oracle, a fresh κG) against a reference gradient
    over many more rollouts, and the held-out margin one step of it moves."""

    policy: str = MISSING
    """``tiny`` (the default experiment's warm-started tiny Qwen3, built into ``cache_dir`` for ``data``),
    ``smollm2`` (the packaged SmolLM2-135M-Instruct, converted into ``cache_dir``) or a transformers model
    directory (a run's ``export/``)."""
    cache_dir: str | None = ModelConfig.cache_dir
    """Where ``tiny`` and ``smollm2`` are built and cached (the trainer's ``model.cache_dir``; None: the user's model
    cache)."""
    group_size: int = AlgoConfig.group_size
    """G: the group the survival rules choose from (the trainer's ``algo.group_size``)."""
    keep_ratio: float = SurvivalSettings.keep_ratio
    """κ: the survival rules' target share, random pruning's survival and the count-matched fresh group's size κG."""
    extra_keep_ratios: list[float] = field(default_factory=list)
    """Further κ probed on the same rollouts: every subset that depends on κ again, its key ending in ``@<κ>``."""
    reference_rollouts: int = 32
    """R: further rollouts per prompt, disjoint from the group and the fresh ones, whose gradient is the
    reference."""
    batches: int = 8
    """Batches of prompts: each a gradient per subset; means and standard errors are over batches."""
    max_minutes: float | None = None
    """Stop measuring batches once this many minutes have passed since the first (at least 2 batches are measured;
    None: every batch)."""
    prompts_per_batch: int = 8
    """Prompts per batch: a subset's gradient is summed over them, as a training step's over its prompts."""
    head_prompts: int = 128
    """Training prompts (G rollouts each, disjoint from the batches') that fit the quality head and the calibrators."""
    calibration_fraction: float = ProbeSettings.calibration_fraction
    """Share of the head prompts held apart to fit the head's calibrator (scores the head never trained on; an
    oracle's calibrator reads every head-prompt rollout)."""
    calibration_bins: int | None = ProbeSettings.calibration_bins
    """B of the calibrators; None: one bin per 32 rollouts a calibrator is fitted on, at most 128."""
    heldout_samples: int = AlgoConfig.group_size
    """Rollouts per held-out problem; the margin reads the problems that got both outcomes."""
    controls: str = "shared"
    """Where the controls without pruning (κG, G') take their rollouts: ``shared``, the first of each group's own
    (sampled alike, so distributed as rollouts sampled for the control alone; paired with the rules on the same
    draws, the differences are sharper); ``fresh``, G more per prompt of their own."""
    oracle_aucs: list[float] = field(default_factory=lambda: [0.7, 0.9, 1.0])
    """AUCs of the oracle scorers (the outcome plus noise) the survival rules read beside the head."""
    default_rule: str | None = None
    """The rule the tables and the headline call the default (None: :class:`PruningConfig`'s ``balance_target``)."""
    paper_rule: bool = True
    """Probe the paper's Eq. 2 (``balance_target=global``) too."""
    rules: list[str] = field(default_factory=list)
    r"""Further survival rules (``balance_target``\ s of :data:`~arrol_pl.core.pruning.BALANCE_TARGETS`) probed beside
    the project's default and the paper's Eq. 2, which are always probed."""
    detect_length: int = EngineConfig.detect_length
    """L_detect: where the head reads the hidden state and the rules decide (< ``max_tokens``)."""
    max_tokens: int = AlgoConfig.max_response_tokens
    """Longest response (the trainer's ``algo.max_response_tokens``)."""
    temperature: float = AlgoConfig.temperature
    """Sampling temperature; the log-probs divide the logits by it, as training does."""
    loss_agg_mode: str = AlgoConfig.loss_agg_mode
    """How the GRPO loss is aggregated over a batch's tokens and rollouts (the trainer's ``algo.loss_agg_mode``)."""
    margin: bool = True
    """Measure the held-out margin after one step of each subset's gradient (two forward passes over the held-out
    rollouts per subset and batch); false: the cosine and the kept share only."""
    sgd_step: float = 0.5
    """Length of the plain SGD step along each subset's unit gradient whose margin change is measured: every subset
    moves the policy equally far, so the margin compares directions, not gradient norms."""
    adamw_lr: float = AlgoConfig.lr
    """Learning rate of AdamW's first update (≈ lr·sign(g) per parameter; the trainer's ``algo.lr``)."""
    engine_dtype: str = "float32"
    """The engine's dtype while it samples: float32 (the CPU default, the policy's own numerics) or bfloat16 (faster
    on CPUs with AVX512-BF16, as the SmolLM2 setting samples); log-probs and gradients are float32 either way."""
    trainable_layers: int | None = None
    """Take the gradient over the top this-many decoder blocks and the final norm only, as
    ``model.trainable_layers`` trains (None: every parameter)."""
    seed: int = 0
    """Seeds the engine, the split of the prompts, the head, the oracles' noise and the prune decisions."""
    head: HeadConfig = field(default_factory=lambda: replace(PROBE_TRAINING))
    """The quality head's width and training recipe (``head.hidden_dim``, ``head.steps``, ``head.lr``; it reads the
    engine's hidden state at L_detect, ``head.input=last``)."""
    reward: AsTrainedRewardConfig = field(default_factory=AsTrainedRewardConfig)
    """What labels a rollout correct (None: math_verify; a function of its own that trained the policy is refused,
    never imported from its record: name it)."""
    data: DataConfig = field(default_factory=lambda: DataConfig(num_heldout=32))
    """The problems (``data=<preset>`` as in training): training problems for the head and the batches, the first
    ``data.num_heldout`` held-out ones for the margin."""

    def __post_init__(self) -> None:
        for key, low in (
            ("group_size", 2),
            ("reference_rollouts", 2),
            ("batches", 2),
            ("prompts_per_batch", 1),
            ("head_prompts", 2),
            ("heldout_samples", 2),
            ("max_tokens", 2),
        ):
            if getattr(self, key) < low:
                raise ConfigError(f"{key} must be >= {low}, got {getattr(self, key)}")
        for key, kappa in (
            ("keep_ratio", self.keep_ratio),
            *(("extra_keep_ratios", k) for k in self.extra_keep_ratios),
        ):
            if not 0.0 < kappa < 1.0:
                raise ConfigError(f"{key} (κ) must be in (0, 1), got {kappa}")
            fresh = kappa * self.group_size
            if abs(fresh - round(fresh)) > 1e-9 or round(fresh) < 2:
                raise ConfigError(
                    f"{key}={kappa} of group_size={self.group_size} gives κG={fresh:g}: the "
                    "count-matched fresh group needs a whole number of rollouts, at least 2"
                )
        if len(set(self.keep_ratios)) < len(self.keep_ratios):
            raise ConfigError(f"extra_keep_ratios={list(self.extra_keep_ratios)}: each κ once, keep_ratio's included")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"max_minutes must be > 0 or null, got {self.max_minutes}")
        if not 1 <= self.detect_length < self.max_tokens:
            raise ConfigError(
                f"detect_length must be >= 1 and < max_tokens={self.max_tokens}, got {self.detect_length}"
            )
        if not 0.0 < self.calibration_fraction < 1.0:
            raise ConfigError(f"calibration_fraction must be in (0, 1), got {self.calibration_fraction}")
        if self.calibration_bins is not None and self.calibration_bins < 1:
            raise ConfigError(f"calibration_bins must be >= 1 or null, got {self.calibration_bins}")
        bad = [auc for auc in self.oracle_aucs if not 0.5 <= auc <= 1.0]
        if bad or len(set(self.oracle_aucs)) < len(self.oracle_aucs):
            raise ConfigError(f"oracle_aucs={list(self.oracle_aucs)}: distinct AUCs in [0.5, 1]")
        unknown = [rule for rule in self.rules if rule not in BALANCE_TARGETS]
        if unknown:
            raise ConfigError(f"rules={list(self.rules)}: choose among {list(BALANCE_TARGETS)}")
        if self.default_rule is not None and self.default_rule not in BALANCE_TARGETS:
            raise ConfigError(f"default_rule={self.default_rule!r}: choose among {list(BALANCE_TARGETS)}")
        for key in ("temperature", "sgd_step", "adamw_lr"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key} must be > 0, got {getattr(self, key)}")
        if self.controls not in CONTROL_SOURCES:
            raise ConfigError(f"controls={self.controls!r}; choose one of {list(CONTROL_SOURCES)}")
        if self.engine_dtype not in ENGINE_DTYPES:
            raise ConfigError(f"engine_dtype={self.engine_dtype!r}; choose one of {list(ENGINE_DTYPES)}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ConfigError(f"loss_agg_mode={self.loss_agg_mode!r}; choose one of {list(LOSS_AGG_MODES)}")
        if self.trainable_layers is not None and self.trainable_layers < 1:
            raise ConfigError(f"trainable_layers must be >= 1 or null (every parameter), got {self.trainable_layers}")
        if self.head.input != "last":
            raise ConfigError(
                f"head.input={self.head.input!r}: the probe's head reads the engine's hidden state (last)"
            )
        if self.data.num_heldout < 1:
            raise ConfigError(f"data.num_heldout={self.data.num_heldout}: the margin needs held-out problems (>= 1)")

    @property
    def compared_rules(self) -> list[str]:
        """The rules probed, the default first (:func:`~arrol_pl.analysis.grad_probe.subsets.compared_rules`)."""
        from arrol_pl.analysis.grad_probe.subsets import compared_rules

        return compared_rules(self.rules, self.default_rule, self.paper_rule)

    @property
    def parts(self):
        """Where each batch prompt's sampled rollouts go (:class:`~arrol_pl.analysis.grad_probe.subsets.Parts`: the
        group, the controls' own with ``controls=fresh``, the reference)."""
        from arrol_pl.analysis.grad_probe.subsets import Parts

        return Parts.of(self.group_size, self.reference_rollouts, self.controls)

    @property
    def keep_ratios(self) -> list[float]:
        """Every κ probed: ``keep_ratio`` first."""
        return [self.keep_ratio, *self.extra_keep_ratios]

    def count_matched_size(self, keep_ratio: float) -> int:
        """κG: the rollouts of the count-matched fresh group at ``keep_ratio``."""
        return round(keep_ratio * self.group_size)

    @property
    def settings(self) -> ProbeSettings:
        """How the quality head is fit and its calibrator binned (the head probe's recipe)."""
        return ProbeSettings(
            hidden_dim=self.head.hidden_dim,
            training=self.head,
            seed=self.seed,
            calibration_bins=self.calibration_bins,
            calibration_fraction=self.calibration_fraction,
        )


def training_problems(cfg: GradProbeConfig) -> tuple[list, list]:
    """The head's and the batches' problems: a seeded draw of the training problems, the first ``head_prompts``,
    then ``batches × prompts_per_batch``; ConfigError naming the keys when there are too few."""
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.registry import load_train

    try:
        problems = list(load_train(cfg.data).problems)
    except (TypeError, ValueError, OSError, DatasetUnavailableError) as exc:
        raise ConfigError(f"data: {exc}") from None
    need = cfg.head_prompts + cfg.batches * cfg.prompts_per_batch
    if len(problems) < need:
        raise ConfigError(
            f"data: {len(problems)} training problems; head_prompts + batches × prompts_per_batch needs {need}"
        )
    random.Random(cfg.seed).shuffle(problems)
    return problems[: cfg.head_prompts], problems[cfg.head_prompts : need]


def load_grad_probe_config(cfg: DictConfig | dict) -> GradProbeConfig:
    """The probe's configuration from a composed Hydra config, checked (the file system included);
    :class:`ConfigError` naming the key."""
    config: GradProbeConfig = load_typed(cfg, GradProbeConfig, ("head",))
    check_policy(config.policy, NAMED_POLICIES, f"nor one of {list(NAMED_POLICIES)}")
    if config.policy in NAMED_POLICIES:  # built here, trained by no run: math-verify unless told otherwise
        config.reward.function = config.reward.function or MATH_VERIFY
    config.reward.fill_in(Path(config.policy), "policy")
    return config


register_schema(SCHEMA, GradProbeConfig)
