"""The typed configuration of ``experiments/evaluate.py`` (:class:`EvalConfig`), registered with Hydra as
``eval_schema``: the one home of the evaluation's defaults; ``conf/evaluate.yaml`` states only what it changes.

Decisions:
- **Sections reused, not copied.** ``engine`` is the engine's own :class:`~arrol_pl.engine.EngineConfig` (the
  model comes from the checkpoint) and ``deepconf`` the scorer's :class:`DeepConfSettings`; a dataset entry holds
  the loader's arguments and the prompt keys of ``conf/data/`` (:class:`EvalDatasetConfig`).
- **The run's data unless told.** With no ``datasets`` the evaluation scores what the checkpoint's run held out
  (:mod:`arrol_pl.analysis.trained_data`); any entry given replaces it.
- **The run's defaults, not copies.** ``temperature``, ``top_p`` and ``max_tokens`` default to the training
  rollouts' (``algo.temperature``, ``algo.top_p``, ``algo.max_response_tokens``) and ``limit`` to the held-out set's
  size (``data.num_heldout``), the run config's own fields: a checkpoint is sampled as it was trained unless an
  override says otherwise.
- **Checked before any model loads**, by :func:`load_eval_config` as ``experiments/run.py`` checks a run
  (:func:`~arrol_pl.train.config.loader.load_typed`): a bad value is one line naming its key, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig

from arrol_pl.analysis.evaluation import DeepConfSettings
from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig
from arrol_pl.engine.config import EngineConfig
from arrol_pl.models.head import HEAD_FOLDER, has_head
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.sections import AlgoConfig, DataConfig

SCHEMA = "eval_schema"
"""The name ``conf/evaluate.yaml`` selects first in its defaults list."""


@dataclass
class EvalDatasetConfig:
    """``datasets.<name>``: a dataset by its adapter name (``arithmetic``, ``math500``, ``gsm8k``, ...)."""

    split: str | None = None
    """The adapter's split (None: its default; a generated task's, the built-in one's: ``heldout``)."""
    path: str | None = None
    """A local file or directory (None: the adapter's source)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The adapter's own options (the built-in task: ``ArithmeticConfig``'s fields; empty: its defaults)."""
    prompt_template: str | None = None
    """As ``data.prompt_template`` (None: the format the checkpoint's export was trained in)."""
    chat_template: bool | None = None
    """As ``data.chat_template`` (None: as trained)."""
    stop: list[str] | None = None
    """As ``data.stop`` (None: as trained)."""


@dataclass
class EvalConfig:
    """``experiments/evaluate.py``: k samples per problem, no pruning, the head scoring each completion at its end."""

    checkpoint: str = MISSING
    """A run's ``export/`` directory (transformers + ``quality_head/``) or one of its Lightning ``.ckpt`` files."""
    k: int = 8
    """Samples per problem (the paper: 32 for voting, 16 for pass@k)."""
    temperature: float = AlgoConfig.temperature
    """Sampling temperature (> 0: k different samples); the training rollouts' (``algo.temperature``)."""
    top_p: float = AlgoConfig.top_p
    """Nucleus sampling; the training rollouts' (``algo.top_p``)."""
    max_tokens: int = AlgoConfig.max_response_tokens
    """Longest completion; the trainer's ``algo.max_response_tokens`` (the paper: 8192)."""
    limit: int | None = DataConfig.num_heldout
    """Problems per dataset (None: all); as many as a run's held-out evaluation (``data.num_heldout``)."""
    datasets: dict[str, Any] = field(default_factory=dict)
    """Name → :class:`EvalDatasetConfig`, the sets to score; empty: the data the checkpoint's run trained on, its
    held-out set (else its training problems, said so; :mod:`arrol_pl.analysis.trained_data`). Add one with
    ``+datasets.math500.path=...`` (the built-in task: ``+datasets.arithmetic.split=heldout``); an entry set to null
    is dropped (typed ``Any`` so that Hydra can add an entry key by key)."""
    reward: AsTrainedRewardConfig = field(default_factory=AsTrainedRewardConfig)
    """What scores the completions, in how many workers, with what time limit."""
    deepconf: DeepConfSettings = field(default_factory=DeepConfSettings)
    """DeepConf's trace confidence (one of the three votes)."""
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(gpu_memory_utilization=0.8))
    """The vLLM engine (its ``model`` comes from the checkpoint; ``max_model_len`` None: longest prompt +
    ``max_tokens``); no training shares the GPU, hence 0.8 of its memory."""

    def __post_init__(self) -> None:
        from arrol_pl.core.confidence import TRACE_MODES
        from arrol_pl.tasks.registry import canonical_name, is_generated

        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0 (k samples per problem), got {self.temperature}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1 or null (all problems), got {self.limit}")
        if self.deepconf.mode not in TRACE_MODES:
            raise ConfigError(f"deepconf.mode={self.deepconf.mode!r}; choose one of {list(TRACE_MODES)}")
        self.datasets = {name: spec for name, spec in self.datasets.items() if spec is not None}
        for name, spec in list(self.datasets.items()):
            try:
                canonical_name(name)
                self.datasets[name] = spec if isinstance(spec, EvalDatasetConfig) else EvalDatasetConfig(**spec)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"datasets.{name}: {exc}") from None
            if self.datasets[name].split is None and is_generated(name):  # never the problems it trains on
                self.datasets[name].split = "heldout"


def load_eval_config(cfg: DictConfig | dict) -> EvalConfig:
    """The evaluation's configuration from a composed Hydra config, checked; :class:`ConfigError` naming the key.
    Includes the file system: the checkpoint must exist, and an export directory must hold its head."""
    config: EvalConfig = load_typed(cfg, EvalConfig, ("engine",))
    path = Path(config.checkpoint)
    if not path.exists():
        raise ConfigError(f"checkpoint={config.checkpoint!r} does not exist")
    if path.is_dir() and not has_head(path):
        raise ConfigError(
            f"checkpoint={config.checkpoint!r} has no {HEAD_FOLDER}/ (the exported quality head): pass "
            "a run's export/ directory or one of its checkpoints/*.ckpt"
        )
    return config


register_schema(SCHEMA, EvalConfig)
