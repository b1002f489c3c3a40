"""One experiment's typed configuration, :class:`RunConfig`: its sections put together, the checks across them,
and its registration with Hydra.

Litgpt-style: every field documented, combinations validated before any model loads, messages naming the config key.
The defaults of its sections are the default experiment's (``make run``: the tiny policy on the arithmetic task on
CPU) and live nowhere else: registered with Hydra as :data:`SCHEMA`, they are what the YAML presets in ``conf/``
compose onto, and each preset states only what it changes. :func:`load_run_config` builds the objects through the
generic loader (:func:`~arrol_pl.train.config.loader.load_typed`), their ``__post_init__`` checking values. The
``data``, ``algo`` and ``trainer`` sections are :mod:`arrol_pl.train.config.sections`'s, ``model``
:mod:`arrol_pl.train.config.model`'s, ``reward`` :mod:`arrol_pl.train.config.reward`'s; ``pruning``, ``head`` and
``engine`` are the core's and the engine's own dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.pruning import PruningConfig
from arrol_pl.engine.config import EngineConfig
from arrol_pl.tasks import registry
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.model import ModelConfig
from arrol_pl.train.config.reward import RunRewardConfig
from arrol_pl.train.config.sections import AlgoConfig, DataConfig, TrainerConfig


SECTIONS_FROM_BELOW = ("pruning", "head", "engine")
"""Sections whose schema is a core or engine dataclass: their messages name the bare field, and
:func:`load_run_config` puts the section in front."""


@dataclass
class RunConfig:
    """One experiment."""

    name: str = "arrol-grpo"
    """Run label (TensorBoard, tables and the run directory's name)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RunRewardConfig = field(default_factory=RunRewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    pruning: PruningConfig = field(default_factory=PruningConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    study: str | None = None
    """The study this run is an arm of (``+exp=pruning_pays`` sets it): ``pruning.scorer=oracle`` reads each
    rollout's outcome, which no real run knows at L_detect, so it is refused outside a study."""

    def __post_init__(self) -> None:
        if not 1 <= self.engine.detect_length < self.algo.max_response_tokens:
            raise ConfigError(
                f"engine.detect_length (L_detect) must be >= 1 and < algo.max_response_tokens="
                f"{self.algo.max_response_tokens}, got {self.engine.detect_length}"
            )
        if "16" in self.trainer.precision and "bf16" not in self.trainer.precision and (self.algo.optimizer_steps > 1):
            # The inner PPO steps bypass Lightning's optimizer wrapper, and with it fp16's gradient unscaling.
            raise ConfigError(
                f"trainer.precision={self.trainer.precision!r} (fp16 loss scaling) supports one optimizer "
                "step per training step: use bf16-mixed or 32-true with algo.ppo_mini_batch_size/ppo_epochs"
            )
        screen = self.pruning.screen
        if screen.stages != "none" and self.algo.dynamic_sampling_refill:
            raise ConfigError(
                f"pruning.screen.stages={screen.stages!r} and algo.dynamic_sampling_refill=true are two "
                "ways of choosing the step's groups: use one (pruning.screen.stages=none, or "
                "algo.dynamic_sampling_refill=false)"
            )
        if (screen.stages != "none" or self.algo.dynamic_sampling_refill) and self.trainer.ranks > 1:
            raise ConfigError(
                f"pruning.screen.stages={screen.stages!r} / algo.dynamic_sampling_refill="
                f"{self.algo.dynamic_sampling_refill} choose groups on one rank only so far; with "
                f"{self.trainer.ranks} ranks set pruning.screen.stages=none and "
                "algo.dynamic_sampling_refill=false"
            )
        if self.algo.prompts_per_step % self.trainer.ranks:
            raise ConfigError(
                f"algo.prompts_per_step={self.algo.prompts_per_step} must be a multiple of the "
                f"{self.trainer.ranks} ranks (trainer.devices × trainer.num_nodes): each rank "
                "generates whole groups"
            )
        self._check_scorer()
        d = self.data
        if (
            self.model.path is None
            and self.model.pretrained is None
            and self.model.warm_start.steps > 0
            and not registry.provides_solutions(d.name, d.solution_field, d.answer_pattern)
        ):
            raise ConfigError(
                f"model.path is unset, so the tiny local policy is used, and its warm start trains on worked "
                f"solutions, which data.name={d.name} does not have; use a real model (model=hf model.path=...), "
                f"or name a solution field (data.solution_field=..., or data.answer_pattern=... when the answer "
                f"ends a worked solution), or set model.warm_start.steps=0 to train the untrained tiny policy "
                f"(expect reward 0)"
            )

    def _check_scorer(self) -> None:
        """The scorer at L_detect must suit the task and the way groups are chosen."""
        p = self.pruning
        if p.scorer == "checker" and registry.prefix_checker(self.data.name) is None:
            raise ConfigError(
                f"pruning.scorer=checker needs a task that checks a response prefix; data.name="
                f"{self.data.name} has none (its adapter defines no check_prefix): use pruning.scorer="
                "head or confidence"
            )
        if p.scorer == "oracle":
            if self.study is None:
                raise ConfigError(
                    "pruning.scorer=oracle reads each rollout's outcome, which no real run knows at "
                    "L_detect: it is a study arm only (+exp=pruning_pays, or set study=<name>)"
                )
            if p.screen.stages != "none":
                raise ConfigError(
                    f"pruning.scorer=oracle prunes after the rollouts end; pruning.screen.stages="
                    f"{p.screen.stages!r} decides inside the engine: set pruning.screen.stages=none"
                )


SCHEMA = "run_schema"
"""The name under which :class:`RunConfig` is registered with Hydra: ``conf/config.yaml`` composes onto it, so the
dataclasses of its sections are the one home of every default (a preset states only what it changes) and every key
can be overridden without a ``+``. A wrong type is refused while Hydra composes; a key no dataclass has, even added
with ``+``, by :func:`load_run_config`."""


def prompts_drawn_per_step(run: RunConfig) -> int:
    """Prompts the stream gives each step: B, or more when the group screen oversamples."""
    return run.pruning.screen.counts(run.algo.prompts_per_step)[0]


def load_run_config(cfg: DictConfig | dict) -> RunConfig:
    """A training run's configuration (``experiments/run.py``): :func:`load_typed` onto :class:`RunConfig`."""
    return load_typed(cfg, RunConfig, SECTIONS_FROM_BELOW)


register_schema(SCHEMA, RunConfig)
