"""``arrol simulate [overrides]`` (= ``python experiments/simulate_pruning.py ...``): the pruning loop without a
model, with Hydra (``conf/simulate.yaml``).

The ARRoL pruning loop of Algorithm 1 on simulated rollouts whose latent success probabilities are known (see
arrol_pl/core/simulation.py): ARRoL with each balance target beside random pruning at the same κ and no pruning,
from the same seed. Prints a table and writes summary.json. Seconds, no model. Every key and its default is a field
of :class:`SimulateConfig`; a bad key or value fails in one line naming it (exit 2, no run directory left behind),
as ``arrol train`` does.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from arrol_pl.cli import hydra_app
from arrol_pl.core.pruning import BALANCE_TARGETS, PruningConfig
from arrol_pl.core.simulation import run_pruning_simulation
from arrol_pl.train.config.loader import ConfigError, load_typed, register_schema
from arrol_pl.train.config.sections import AlgoConfig


@dataclasses.dataclass
class SelfCheck:
    """The simulated run."""

    steps: int = 60
    """Simulated training steps (cold start included)."""
    num_groups: int = 64
    """Prompts per step (B)."""
    group_size: int = AlgoConfig.group_size
    """Rollouts per prompt (G); the trainer's ``algo.group_size``."""
    seed: int = 0
    """Seed of the simulated rollouts' success probabilities, scores and rewards."""
    pass_rate: float | None = None
    """The task's mean pass rate π: each prompt's pass probability is drawn from Beta(π c, (1 - π) c) and the scores
    come from an oracle of AUC ``auc`` (null with ``auc``: the latent-score model of arrol_pl/core/simulation.py)."""
    auc: float | None = None
    """The scorer's AUC (0.5 to 1): the outcome through Gaussian noise, as ``pruning.scorer=oracle`` scores."""
    concentration: float = 2.0
    """c of the prompts' Beta prior (with ``pass_rate``): the smaller, the more all-right and all-wrong groups."""

    def __post_init__(self) -> None:
        for key, low in (("steps", 1), ("num_groups", 1), ("group_size", 2)):
            if getattr(self, key) < low:
                raise ConfigError(f"selfcheck.{key} must be >= {low}, got {getattr(self, key)}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"selfcheck.seed must be in [0, 2**32), got {self.seed}")
        if (self.pass_rate is None) != (self.auc is None):
            given, missing = ("pass_rate", "auc") if self.auc is None else ("auc", "pass_rate")
            raise ConfigError(f"selfcheck.{given} needs selfcheck.{missing} too: the oracle task takes both")
        if self.pass_rate is not None and not 0.0 < self.pass_rate < 1.0:
            raise ConfigError(f"selfcheck.pass_rate must be in (0, 1), got {self.pass_rate}")
        if self.auc is not None and not 0.5 <= self.auc <= 1.0:
            raise ConfigError(f"selfcheck.auc must be in [0.5, 1], got {self.auc}")
        if self.concentration <= 0:
            raise ConfigError(f"selfcheck.concentration must be > 0, got {self.concentration}")


@dataclasses.dataclass
class SimulateConfig:
    """``conf/simulate.yaml`` composes onto this (registered as :data:`SCHEMA`): the defaults live here and in
    :class:`PruningConfig`, and every key overrides without a ``+``."""

    pruning: PruningConfig = dataclasses.field(default_factory=PruningConfig)
    """The pruning rule simulated (``pruning=<preset>`` as in training)."""
    selfcheck: SelfCheck = dataclasses.field(default_factory=SelfCheck)
    """The simulated run's shape."""


SCHEMA = "simulate_schema"
"""The name ``conf/simulate.yaml`` selects first in its defaults list."""
register_schema(SCHEMA, SimulateConfig)


def mean_after(history: list[dict[str, float]], key: str, start: int) -> float:
    rows = history[start:] or history
    return sum(h[key] for h in rows) / len(rows)


def load_simulate_config(raw: DictConfig | dict) -> SimulateConfig:
    """The simulation's configuration: :func:`load_typed` onto :class:`SimulateConfig`."""
    return load_typed(raw, SimulateConfig, ("pruning",))


def task(raw: DictConfig) -> None:
    """Hydra's task: simulate each policy and write summary.json into the run directory."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = load_simulate_config(raw)
    except ConfigError as exc:
        hydra_app.refuse(exc, out_dir)
    config, sc = cfg.pruning, cfg.selfcheck
    variants = {config.policy: config}
    if config.policy == "arrol":  # every balance target: the default anchored rule, per group, spread, Eq. 2
        variants = {f"arrol/{t}": dataclasses.replace(config, balance_target=t) for t in BALANCE_TARGETS}
    variants.setdefault("random", dataclasses.replace(config, policy="random"))
    variants.setdefault("none", dataclasses.replace(config, policy="none"))
    start = min(config.cold_start_steps, sc.steps - 1)
    summary: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for name, variant in variants.items():
        hist = run_pruning_simulation(
            variant,
            sc.steps,
            sc.num_groups,
            sc.group_size,
            seed=sc.seed,
            oracle=None if sc.auc is None else (sc.pass_rate, sc.auc, sc.concentration),
        )
        summary[name] = {
            key: mean_after(hist, key, start)
            for key in (
                "keep_ratio",
                "kept_balance",
                "kept_zero_advantage_fraction",
                "kept_positive_ratio",
                "posterior_mae",
            )
        }
    wall = time.perf_counter() - t0

    task_text = "latent-score task" if sc.auc is None else f"pass rate {sc.pass_rate}, scorer AUC {sc.auc}"
    print(
        f"\nARRoL pruning simulation ({task_text}): κ={config.keep_ratio}, ρ={config.target_positive_ratio}, "
        f"{sc.steps} steps × {sc.num_groups} groups × G={sc.group_size}, "
        f"means after the {config.cold_start_steps}-step cold start"
    )
    header = f"{'policy':<15} {'keep':>6} {'E[ρ̂(1-ρ̂)]':>11} {'zero-adv':>9} {'E[ρ̂]':>7} {'|q-q*|':>7}"
    print(header + "\n" + "-" * len(header))
    for name, row in summary.items():
        print(
            f"{name:<15} {row['keep_ratio']:>6.3f} {row['kept_balance']:>11.4f} "
            f"{row['kept_zero_advantage_fraction']:>9.3f} {row['kept_positive_ratio']:>7.3f} "
            f"{row['posterior_mae']:>7.3f}"
        )
    result = {"mode": "selfcheck", "wall_seconds": wall, "policies": summary, "config": dataclasses.asdict(cfg)}
    (out_dir / "summary.json").write_text(json.dumps(result, indent=2))
    print(f"\nsummary: {out_dir / 'summary.json'}  ({wall:.1f} s)")


JOB = hydra_app.HydraJob(
    config_name="simulate",
    task=task,
    schema=SimulateConfig,
    check=load_simulate_config,
    about=__doc__.split("\n\n", 1)[1],
    groups=("pruning",),
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Simulate on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
