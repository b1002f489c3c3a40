"""`python experiments/simulate_pruning.py [overrides]`: the pruning loop on simulated rollouts, no model (Hydra;
config in conf/simulate.yaml); the same as `arrol simulate`.

`--help` lists the presets and every key; the job is arrol_pl.cli.simulate's (its docstring says what it writes).
"""

import sys

from arrol_pl.cli.simulate import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/simulate_pruning.py"))
