"""`python experiments/plan.py [overrides] [--gpu-gib 80] [--config-json FILE]`: the run's GPU memory per rank before
launch, from the policy's config.json alone; the same as `arrol plan` (arrol_pl/cli/plan.py says how it reads its
arguments and what its exit codes mean).
"""

import sys

from arrol_pl.cli.plan import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/plan.py"))
