"""`python experiments/grad_probe.py policy=tiny|smollm2|<model dir> [overrides]`: what choosing which rollouts to
train on does to the policy update, measured on identical rollouts without training noise, with Hydra (config in
conf/grad_probe.yaml); the same as `arrol grad-probe`.

    python experiments/grad_probe.py policy=tiny hydra.run.dir=outputs/grad_probe/tiny
    python experiments/grad_probe.py policy=smollm2 data=arithmetic_fewshot max_tokens=32 temperature=0.8 \\
        detect_length=4 trainable_layers=2 adamw_lr=1e-4 engine_dtype=bfloat16 \\
        hydra.run.dir=outputs/grad_probe/smollm2

`--help` lists the presets and every key; the job is arrol_pl.cli.grad_probe's (its docstring says what it
measures and writes).
"""

import sys

from arrol_pl.cli.grad_probe import main

if __name__ == "__main__":
    sys.exit(main(prog="python experiments/grad_probe.py"))
