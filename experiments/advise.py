"""`python experiments/advise.py [training overrides] [advise.*=...]`: will pruning pay on this policy and data? The
same as `arrol advise` (its docstring, arrol_pl/cli/advise.py, says what it measures and writes).

    python experiments/advise.py                                          # the default experiment's setting
    python experiments/advise.py +exp=smollm2_setting advise.minutes=12   # SmolLM2-135M-Instruct on CPU
"""

import sys

from arrol_pl.cli.advise import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/advise.py"))
