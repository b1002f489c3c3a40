"""The typed configuration of ``arrol advise`` (:class:`AdviseConfig`): a training run's whole configuration (the
policy, data, reward, algorithm, pruning and engine the advice is about, with the trainer's presets and checks) plus
``advise.*``, the budget of the measurement (:class:`AdviseSettings`). Registered with Hydra as ``advise_schema``.

Decisions:
- **The run's own settings.** G, κ, the survival rule, L_detect, the response budget, the sampling, the loss
  aggregation, the trainable layers, the head's width and recipe and the reward are the run's (``algo.*``,
  ``pruning.*``, ``engine.*``, ``model.*``, ``head.*``, ``reward.*``): what the advice says is about the run the user
  would start with the same overrides.
- **κ = 0.25 and 0.5 beside the run's own** (``advise.keep_ratios``), so the advice can recommend another κ.
- **The quality head only**: ``pruning.scorer`` other than ``head`` is refused, naming the key; the oracle of AUC 1
  is probed beside it to tell "the head cannot rank" from "choosing cannot pay here".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.run import SECTIONS_FROM_BELOW, RunConfig

SCHEMA = "advise_schema"


@dataclass
class GpuSetting:
    """A GPU run the saving is modelled for (the decode-cost model's schedule, with this policy's lengths)."""

    prompts: int = 128
    """B: prompts per step."""
    slots: int = 256
    """``engine.max_num_seqs`` there: rollouts decoded at once."""


@dataclass
class AdviseSettings:
    """``advise.*``: how much is measured, and the GPU setting the saving is modelled for."""

    head_prompts: int = 128
    """Training prompts whose G rollouts fit the quality head and its calibrator (the cold start a run would have)."""
    batches: int = 16
    """Batches of prompts for the gradient probe (fewer when ``minutes`` runs out, never fewer than 2)."""
    prompts_per_batch: int = 8
    """Prompts per batch: a subset's gradient is summed over them, as a training step's."""
    reference_rollouts: int = 16
    """R: rollouts per prompt, shared with no subset, whose gradient is the reference."""
    minutes: float | None = None
    """Stop measuring batches once this many minutes have passed since the command started (None: every batch)."""
    keep_ratios: list[float] = field(default_factory=lambda: [0.25, 0.5])
    """κ probed beside ``pruning.keep_ratio`` (each κG a whole number of rollouts)."""
    detect_lengths: list[int] | None = None
    """L at which the head's AUC within groups is measured (None: ½, 1 and 2 × ``engine.detect_length`` below
    ``algo.max_response_tokens``)."""
    trainable_layers: int | None = None
    """Take the gradient over the top this-many decoder blocks only (None: ``model.trainable_layers``)."""
    oracle_aucs: list[float] = field(default_factory=lambda: [1.0])
    """AUCs of the oracle scorers (the outcome plus noise) probed beside the head; AUC 1 always (it tells "the
    head cannot rank" from "choosing cannot pay here"), others to read the probe against a training ladder."""
    gpu: GpuSetting = field(default_factory=GpuSetting)
    """The GPU setting the saving is modelled for."""

    def __post_init__(self) -> None:
        for key, low in (("head_prompts", 8), ("batches", 2), ("prompts_per_batch", 1), ("reference_rollouts", 2)):
            if getattr(self, key) < low:
                raise ConfigError(f"advise.{key} must be >= {low}, got {getattr(self, key)}")
        if self.minutes is not None and not self.minutes > 0:
            raise ConfigError(f"advise.minutes must be > 0 or null, got {self.minutes}")
        if self.detect_lengths is not None and (not self.detect_lengths or min(self.detect_lengths) < 1):
            raise ConfigError(f"advise.detect_lengths={self.detect_lengths}: lengths >= 1, or null")
        if not self.oracle_aucs or not all(0.5 <= auc <= 1.0 for auc in self.oracle_aucs):
            raise ConfigError(f"advise.oracle_aucs={list(self.oracle_aucs)}: AUCs in [0.5, 1]")
        if self.gpu.prompts < 1 or self.gpu.slots < 1:
            raise ConfigError(
                f"advise.gpu.prompts and advise.gpu.slots must be >= 1, got {self.gpu.prompts}, {self.gpu.slots}"
            )


@dataclass
class AdviseConfig(RunConfig):
    """A training run's configuration (the run the advice is about) and ``advise.*``."""

    advise: AdviseSettings = field(default_factory=AdviseSettings)
    """What ``arrol advise`` measures."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pruning.scorer != "head":
            raise ConfigError(
                f"pruning.scorer={self.pruning.scorer!r}: arrol advise measures the quality head (pruning.scorer=head)"
            )
        if max(self.detect_lengths) >= self.algo.max_response_tokens:
            raise ConfigError(
                f"advise.detect_lengths={self.advise.detect_lengths}: each below "
                f"algo.max_response_tokens={self.algo.max_response_tokens}"
            )
        self.probe()  # κG of every κ a whole number, the rest as the probe checks it

    @property
    def detect_lengths(self) -> list[int]:
        """The L of the AUC table, the run's ``engine.detect_length`` among them."""
        if self.advise.detect_lengths is not None:
            return sorted({*self.advise.detect_lengths, self.engine.detect_length})
        length = self.engine.detect_length
        return sorted(
            {max(1, length // 2), length, *([2 * length] if 2 * length < self.algo.max_response_tokens else [])}
        )

    @property
    def oracle_aucs(self) -> list[float]:
        """The oracles probed: ``advise.oracle_aucs`` in order, AUC 1 among them."""
        return list(dict.fromkeys([*self.advise.oracle_aucs, 1.0]))

    def probe(self, policy: str = "run") -> GradProbeConfig:
        """The gradient probe of this run: its G, κ (and ``advise.keep_ratios``), rule, L_detect, sampling, loss,
        head and reward; the perfect oracle beside the head; no held-out margin (the cosine decides)."""
        a, algo = self.advise, self.algo
        extra = [k for k in dict.fromkeys(a.keep_ratios) if k != self.pruning.keep_ratio]
        try:
            return GradProbeConfig(
                policy=policy,
                cache_dir=self.model.cache_dir,
                group_size=algo.group_size,
                keep_ratio=self.pruning.keep_ratio,
                extra_keep_ratios=extra,
                reference_rollouts=a.reference_rollouts,
                batches=a.batches,
                prompts_per_batch=a.prompts_per_batch,
                head_prompts=a.head_prompts,
                oracle_aucs=self.oracle_aucs,
                default_rule=self.pruning.balance_target,
                paper_rule=False,
                detect_length=self.engine.detect_length,
                max_tokens=algo.max_response_tokens,
                temperature=algo.temperature,
                loss_agg_mode=algo.loss_agg_mode,
                margin=False,
                adamw_lr=algo.lr,
                engine_dtype=self.engine.dtype or "float32",
                trainable_layers=a.trainable_layers or self.model.trainable_layers,
                seed=self.trainer.seed,
                head=self.head,
                data=self.data,
                reward=AsTrainedRewardConfig(
                    function=self.reward.function, workers=self.reward.workers, timeout=self.reward.timeout
                ),
            )
        except ConfigError as exc:
            raise ConfigError(f"advise: {exc}") from None


def load_advise_config(cfg: DictConfig | dict) -> AdviseConfig:
    """``arrol advise``'s configuration from a composed Hydra config, checked; :class:`ConfigError` naming the key."""
    return load_typed(cfg, AdviseConfig, SECTIONS_FROM_BELOW)


register_schema(SCHEMA, AdviseConfig)
