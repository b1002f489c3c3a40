"""The typed configuration of ``experiments/head_quality.py`` (:class:`ProbeConfig`), registered with Hydra as
``probe_schema``: the one home of the probe's defaults; ``conf/probe.yaml`` states only what it changes.

Decisions:
- **Sections reused, not copied.** ``data`` is the trainer's own :class:`~arrol_pl.train.config.sections.DataConfig`
  (the same ``data=`` presets: task options, prompt format, stop strings; the probe reads its held-out problems,
  ``data.num_heldout`` of them) and ``head`` the trainer's :class:`~arrol_pl.core.head_training.HeadConfig` (the
  probe head's width and training recipe; its ``input`` is unused: ``features`` names what is probed).
- **Defaults taken, not copied.** The rollouts' defaults are the training run's fields (``samples``: its G,
  ``algo.group_size``; ``temperature``, ``max_tokens``: ``algo.temperature``, ``algo.max_response_tokens``;
  ``cache_dir``: ``model.cache_dir``), the fit's and the calibration's are
  :class:`~arrol_pl.analysis.head_probe.fit.ProbeSettings`' and ``deepconf_mode`` is
  :class:`~arrol_pl.analysis.evaluation.DeepConfSettings`' ``mode``: each default has one home.
- **Checked before any model loads** (:func:`load_probe_config`, through
  :func:`~arrol_pl.train.config.loader.load_typed` as every script's config): a bad value is one line naming its key,
  exit 2; so are a policy that is not a model directory and a detection length that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig

from arrol_pl.analysis.evaluation import DeepConfSettings
from arrol_pl.analysis.head_probe.features import FEATURE_KINDS, detect_lengths
from arrol_pl.analysis.head_probe.fit import PROBE_TRAINING, ProbeSettings
from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig
from arrol_pl.core.head_training import HeadConfig
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.model import ModelConfig
from arrol_pl.train.config.sections import AlgoConfig, DataConfig

SCHEMA = "probe_schema"
"""The name ``conf/probe.yaml`` selects first in its defaults list."""
PROBE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ProbeConfig:
    """``experiments/head_quality.py``: one fixed set of rollouts on held-out problems, no pruning; a fresh head per
    detection length and head input against DeepConf, the pruning rule and the votes replayed."""

    policy: str = MISSING
    """A transformers model directory with its tokenizer (a run's ``export/``: the head it trained is scored too),
    or ``smollm2`` (the packaged SmolLM2-135M-Instruct, converted into ``cache_dir`` on first use)."""
    cache_dir: str | None = ModelConfig.cache_dir
    """Where ``policy=smollm2`` is converted and cached (the trainer's ``model.cache_dir``; None: the user's model
    cache)."""
    samples: int = AlgoConfig.group_size
    """Rollouts per problem. A group of the pruning replay: the trainer's G, ``algo.group_size``."""
    max_tokens: int = AlgoConfig.max_response_tokens
    """Longest response (the trainer's ``algo.max_response_tokens``)."""
    temperature: float = AlgoConfig.temperature
    """Sampling temperature of the rollouts (the trainer's ``algo.temperature``)."""
    fractions: list[Any] = field(default_factory=lambda: ["1/16", "1/8", "1/4", "1/2"])
    """Detection lengths as fractions of ``max_tokens`` (``[1/8,1/4]`` or ``[0.125,0.25]``): L = ⌊f · max_tokens⌋."""
    features: list[str] = field(default_factory=lambda: list(FEATURE_KINDS))
    """Head inputs compared side by side (:data:`~arrol_pl.analysis.head_probe.features.FEATURE_KINDS`; the
    paper's is ``last``)."""
    seed: int = 0
    """Seeds the engine's sampling, the split of the problems and the heads' initialisation."""
    calibration_bins: int | None = ProbeSettings.calibration_bins
    """B of the probe's calibrator; None: one bin per 32 calibration rollouts, at most 128."""
    test_fraction: float = ProbeSettings.test_fraction
    """Share of the problems whose rollouts test the heads (the rest fit and calibrate them)."""
    calibration_fraction: float = ProbeSettings.calibration_fraction
    """Share of the head-fitting problems held apart to fit the calibrator (0: fit it on the head-fit part)."""
    dtype: str = "float32"
    """Engine and feature-extraction dtype (float32: parity with the engine on CPU)."""
    votes: bool = True
    """Replay Table 3's votes (majority, DeepConf, ARRoL) on the test problems (math-verify's reward only: a reward
    function extracts no answers to vote over)."""
    reward: AsTrainedRewardConfig = field(default_factory=AsTrainedRewardConfig)
    """What labels a rollout correct (``reward.function``; None: math_verify, a function of its own that trained the
    policy refused until named), in how many workers, with what time limit."""
    deepconf_mode: str = DeepConfSettings.mode
    """DeepConf's trace score (:data:`~arrol_pl.core.confidence.TRACE_MODES`)."""
    forward_batch_tokens: int = 16384
    """Micro-batch budget (rows × longest) of the feature forward pass."""
    head: HeadConfig = field(default_factory=lambda: replace(PROBE_TRAINING))
    """The probe heads' width (``head.hidden_dim``) and training recipe (``head.steps``, ``head.lr``,
    ``head.batch_size``; every labelled feature of the fit part, ``replay`` null)."""
    data: DataConfig = field(default_factory=lambda: DataConfig(num_heldout=256))
    """The problems (``data=<preset>`` as in training): the first ``data.num_heldout`` held-out ones."""

    def __post_init__(self) -> None:
        from arrol_pl.core.confidence import TRACE_MODES

        for key, low in (("samples", 1), ("max_tokens", 2), ("forward_batch_tokens", 1)):
            if getattr(self, key) < low:
                raise ConfigError(f"{key} must be >= {low}, got {getattr(self, key)}")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.dtype not in PROBE_DTYPES:
            raise ConfigError(f"dtype={self.dtype!r}; choose one of {list(PROBE_DTYPES)}")
        if self.deepconf_mode not in TRACE_MODES:
            raise ConfigError(f"deepconf_mode={self.deepconf_mode!r}; choose one of {list(TRACE_MODES)}")
        unknown = [kind for kind in self.features if kind not in FEATURE_KINDS]
        if unknown or not self.features:
            raise ConfigError(f"features={list(self.features)}: choose one or more of {list(FEATURE_KINDS)}")
        if self.data.num_heldout < 2:
            raise ConfigError(f"data.num_heldout={self.data.num_heldout}: the probe splits by problem (>= 2)")
        _ = self.lengths, self.settings  # both checked here, before any model loads

    @property
    def fraction_values(self) -> list[float]:
        values = []
        for f in self.fractions:
            try:
                values.append(float(Fraction(str(f))))
            except (ValueError, ZeroDivisionError):
                raise ConfigError(f"fractions: {f!r} is not a fraction (write 1/16 or 0.0625)") from None
        return values

    @property
    def lengths(self) -> list[int]:
        """The detection lengths L, in the order of ``fractions``."""
        values = self.fraction_values
        try:
            return detect_lengths(values, self.max_tokens)
        except ValueError as exc:
            raise ConfigError(f"fractions: {exc}") from None

    @property
    def settings(self) -> ProbeSettings:
        """How each probe head is fit and calibrated."""
        try:
            return ProbeSettings(
                hidden_dim=self.head.hidden_dim,
                training=self.head,
                seed=self.seed,
                calibration_bins=self.calibration_bins,
                test_fraction=self.test_fraction,
                calibration_fraction=self.calibration_fraction,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def check_policy(policy: str, built_here: tuple[str, ...] = (), others: str = "nor smollm2") -> None:
    """A probe's ``policy``: ``smollm2`` with its package installed, a name in ``built_here`` (a policy the probe builds
    itself), or a transformers model directory; else :class:`ConfigError` naming the key and, after the directory
    check, ``others``."""
    if policy == "smollm2":
        from arrol_pl.models.smollm2 import PretrainedUnavailableError, check_installed

        try:
            check_installed("policy=smollm2")
        except PretrainedUnavailableError as exc:
            raise ConfigError(str(exc)) from None
    elif policy not in built_here and not (Path(policy) / "config.json").is_file():
        raise ConfigError(f"policy={policy!r}: not a transformers model directory (no config.json), {others}")


def load_probe_config(cfg: DictConfig | dict) -> ProbeConfig:
    """The probe's configuration from a composed Hydra config, checked (the file system included: the policy must
    be a model directory, or ``smollm2`` installed); :class:`ConfigError` naming the key."""
    config: ProbeConfig = load_typed(cfg, ProbeConfig, ("head",))
    check_policy(config.policy)
    config.reward.fill_in(Path(config.policy), "policy")
    return config


register_schema(SCHEMA, ProbeConfig)
