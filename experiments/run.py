"""`python experiments/run.py [overrides]`: train with ARRoL (Hydra; config in conf/).

With no arguments: ARRoL-GRPO on the built-in arithmetic task with a tiny local Qwen3 policy on CPU.
`+exp=ablation_kappa` and the other conf/exp presets run multirun sweeps and write one table.
The configuration is validated before any model loads; a bad value fails naming its key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arrol_pl.train.config import load_run_config  # noqa: E402
from arrol_pl.train.report import print_summary  # noqa: E402

# vLLM logs every weight sync at INFO/WARNING; the run's own summary is what matters here.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run = load_run_config(cfg)
    from arrol_pl.train.experiment import run_experiment

    hydra_cfg = HydraConfig.get()
    out_dir = Path(run.trainer.output_dir or hydra_cfg.runtime.output_dir)
    summary = run_experiment(run, out_dir, overrides=list(hydra_cfg.overrides.task))
    print_summary(summary, out_dir)


if __name__ == "__main__":
    main()
