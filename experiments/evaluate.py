"""`python experiments/evaluate.py checkpoint=<run>/export [overrides]`: test-time evaluation (Hydra; config in
conf/evaluate.yaml); the same as `arrol evaluate`.

`--help` lists every key; the job is arrol_pl.cli.evaluate's (its docstring says what it writes).
"""

import sys

from arrol_pl.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/evaluate.py"))
