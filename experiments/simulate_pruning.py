"""`python experiments/simulate_pruning.py [overrides]`: the pruning loop without a model.

The ARRoL pruning loop of Algorithm 1 on simulated rollouts whose latent success probabilities are
known (see arrol_pl/core/simulation.py): ARRoL with both balance targets beside random pruning at the
same κ and no pruning, from the same seed. Prints a table and writes summary.json. Seconds, no model.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from arrol_pl.core.pruning import BALANCE_TARGETS, PruningConfig
from arrol_pl.core.simulation import run_pruning_simulation
from arrol_pl.train.config import unknown_keys


@dataclasses.dataclass
class SelfCheck:
    """The simulated run."""

    steps: int = 60
    """Simulated training steps (cold start included)."""
    num_groups: int = 64
    """Prompts per step (B)."""
    group_size: int = 8
    """Rollouts per prompt (G)."""
    seed: int = 0


@dataclasses.dataclass
class SimulateConfig:
    """``conf/simulate.yaml`` composes onto this (registered as ``simulate_schema``): the defaults live here and in
    :class:`PruningConfig`, and every key overrides without a ``+``."""

    pruning: PruningConfig = dataclasses.field(default_factory=PruningConfig)
    selfcheck: SelfCheck = dataclasses.field(default_factory=SelfCheck)


ConfigStore.instance().store(name="simulate_schema", node=SimulateConfig)


def pruning_config(node: DictConfig) -> PruningConfig:
    """Build the validated config; unknown keys are named like the invalid values are."""
    values = OmegaConf.to_container(node, resolve=True)
    unknown = unknown_keys(values, PruningConfig, "pruning.")  # a +key Hydra added to the typed node
    if unknown:
        known = sorted(f.name for f in dataclasses.fields(PruningConfig))
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; known keys: {known}")
    return PruningConfig(**values)


def mean_after(history: list[dict[str, float]], key: str, start: int) -> float:
    rows = history[start:] or history
    return sum(h[key] for h in rows) / len(rows)


@hydra.main(version_base=None, config_path="../conf", config_name="simulate")
def main(cfg: DictConfig) -> None:
    config = pruning_config(cfg.pruning)
    sc = cfg.selfcheck
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    variants = {config.policy: config}
    if config.policy == "arrol":  # every balance target: the paper's global δ, the per-group one, the rank-only spread
        variants = {f"arrol/{t}": dataclasses.replace(config, balance_target=t) for t in BALANCE_TARGETS}
    variants.setdefault("random", dataclasses.replace(config, policy="random"))
    variants.setdefault("none", dataclasses.replace(config, policy="none"))
    start = min(config.cold_start_steps, sc.steps - 1)
    summary: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for name, variant in variants.items():
        hist = run_pruning_simulation(variant, sc.steps, sc.num_groups, sc.group_size, seed=sc.seed)
        summary[name] = {
            key: mean_after(hist, key, start)
            for key in ("keep_ratio", "kept_balance", "kept_zero_advantage_fraction", "kept_positive_ratio", "posterior_mae")
        }
    wall = time.perf_counter() - t0

    print(f"\nARRoL pruning simulation: κ={config.keep_ratio}, ρ={config.target_positive_ratio}, "
          f"{sc.steps} steps × {sc.num_groups} groups × G={sc.group_size}, "
          f"means after the {config.cold_start_steps}-step cold start")
    header = f"{'policy':<13} {'keep':>6} {'E[ρ̂(1-ρ̂)]':>11} {'zero-adv':>9} {'E[ρ̂]':>7} {'|q-q*|':>7}"
    print(header + "\n" + "-" * len(header))
    for name, row in summary.items():
        print(f"{name:<13} {row['keep_ratio']:>6.3f} {row['kept_balance']:>11.4f} {row['kept_zero_advantage_fraction']:>9.3f} "
              f"{row['kept_positive_ratio']:>7.3f} {row['posterior_mae']:>7.3f}")
    result = {"mode": "selfcheck", "wall_seconds": wall, "policies": summary,
              "config": OmegaConf.to_container(cfg, resolve=True)}
    (out_dir / "summary.json").write_text(json.dumps(result, indent=2))
    print(f"\nsummary: {out_dir / 'summary.json'}  ({wall:.1f} s)")


if __name__ == "__main__":
    main()
