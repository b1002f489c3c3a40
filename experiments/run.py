"""`python experiments/run.py [overrides]`: train with ARRoL (Hydra; config in conf/); the same as `arrol train`.

With no arguments: ARRoL-GRPO on the built-in arithmetic task with a tiny local Qwen3 policy on CPU.
`+exp=ablation_kappa` and the other conf/exp presets run multirun sweeps and write one table. `--help` lists the
presets and every key. The job is arrol_pl.cli.train's (its docstring says how runs stop and what the exit codes are).
"""

import sys

from arrol_pl.cli.train import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/run.py"))
