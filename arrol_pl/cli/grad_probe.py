"""``arrol grad-probe policy=tiny|smollm2|<model dir> [overrides]`` (= ``python experiments/grad_probe.py ...``): what
choosing which rollouts to train on does to the policy update, on identical rollouts, without training noise (beyond
the paper), with Hydra (``conf/grad_probe.yaml``).

    arrol grad-probe policy=tiny hydra.run.dir=outputs/grad_probe/tiny
    arrol grad-probe policy=smollm2 data=arithmetic_fewshot max_tokens=32 temperature=0.8 detect_length=4 \\
        trainable_layers=2 adamw_lr=1e-4 engine_dtype=bfloat16 hydra.run.dir=outputs/grad_probe/smollm2

Per prompt of ``batches × prompts_per_batch`` training problems, the vLLM engine samples G + R rollouts: the group
and the reference (G + G + R with ``controls=fresh``: the controls' own part too). On the group, subsets are chosen
by the project's own decision code: all G, random pruning (survival κ), and the default survival rule, the paper's
Eq. 2 (``balance_target=global``) and any other of ``rules``, each reading the learned quality head (fitted on the
hidden state at L_detect of ``head_prompts`` other problems' rollouts, calibrated on a held-apart share) and oracles
of AUC 0.7, 0.9 and 1.0. Each subset's GRPO gradient at the sampling policy (ratio 1, no KL, advantages over its own
rewards, summed over the batch) is compared with the reference gradient over the R rollouts (cosine), and one step of
it (plain SGD of length ``sgd_step`` along its unit gradient; AdamW's first update at ``adamw_lr``) is scored by the
change in the held-out margin: the mean per-token log-prob of right answers minus that of wrong answers to the same
held-out problem (``margin=false``: not measured). Two controls train without pruning, on the first rollouts of the
group (or their own with ``controls=fresh``): the count-matched κG (as many rollouts as κ keeps) and the cost-matched
G' (as many decoded tokens as pruning spends: survivors whole, pruned rollouts up to L_detect). Means and standard
errors are over batches; every subset is compared with random κG and both controls at its κ (``extra_keep_ratios``:
further κ on the same rollouts), paired by batch, with the smallest difference the batches detect at 80 % power.

Writes ``grad_probe.json`` (settings, the scorers' AUCs, per subset its per-batch values and their mean ± SE, the
paired differences) into the run directory (``hydra.run.dir``, default ``outputs/grad_probe/<time>``) and prints the
tables. Every key and its default is a field of GradProbeConfig (arrol_pl/analysis/grad_probe/config.py); a bad value
fails in one line naming its key (exit 2) before any model loads.
"""

from __future__ import annotations

import os
from pathlib import Path

import arrol_pl.engine  # noqa: E402,F401  (sets the environment the engine needs before vLLM loads)

os.environ.setdefault("OMP_NUM_THREADS", "1")  # vLLM's CPU default; more threads make step times erratic
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from arrol_pl.analysis.grad_probe.config import (
    GradProbeConfig,
    load_grad_probe_config,  # noqa: E402
    training_problems,
)
from arrol_pl.cli import hydra_app  # noqa: E402
from arrol_pl.cli.head_quality import heldout_problems  # noqa: E402
from arrol_pl.train.config.loader import ConfigError  # noqa: E402


def task(raw: DictConfig) -> None:
    """Hydra's task: check the config and draw the problems, then probe into the run directory."""
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        cfg = load_grad_probe_config(raw)
        head, batches = training_problems(cfg)
        heldout = heldout_problems(cfg)
        prompt_format = cfg.data.prompt_format()
    except ConfigError as exc:
        hydra_app.refuse(exc, out_dir)

    from arrol_pl.analysis.grad_probe.run import GradProbeJob, run_grad_probe

    run_grad_probe(
        GradProbeJob(
            config=cfg,
            out=out_dir,
            command=" ".join([hydra_app.INVOCATION.prog, *hydra_cfg.overrides.task]),
            head_problems=head,
            batch_problems=batches,
            heldout_problems=heldout,
            prompt_format=prompt_format,
            data=hydra_cfg.runtime.choices.get("data", cfg.data.name),
        )
    )


JOB = hydra_app.HydraJob(
    config_name="grad_probe",
    task=task,
    schema=GradProbeConfig,
    check=load_grad_probe_config,
    about=__doc__.split("\n\n", 1)[1],
    groups=("data",),
    engine=True,
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Probe on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
