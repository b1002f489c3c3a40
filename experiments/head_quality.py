"""`python experiments/head_quality.py policy=<run>/export [overrides]`: the quality head vs DeepConf trace
confidence at several detection lengths (paper Fig. 2(b–d), Table 4 and Table 3 by replay), with Hydra (config in
conf/probe.yaml); the same as `arrol head-quality`.

    python experiments/head_quality.py policy=outputs/runs/<run>/export
    python experiments/head_quality.py policy=smollm2 data=arithmetic_fewshot max_tokens=32 temperature=0.8 \\
        data.num_heldout=160 hydra.run.dir=outputs/head_quality/smollm2

`--help` lists the presets and every key; the job is arrol_pl.cli.head_quality's (its docstring says what it
measures and writes).
"""

import sys

from arrol_pl.cli.head_quality import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/head_quality.py"))
