"""``arrol advise [training overrides] [advise.*=...]`` (= ``python experiments/advise.py ...``): will pruning pay
on this policy and data? Answered before a training run is spent, for the run the same overrides would start, with
Hydra (``conf/advise.yaml``: the trainer's presets and ``advise.*``).

    arrol advise                                          # the default experiment's tiny policy and task
    arrol advise +exp=smollm2_setting advise.minutes=12   # SmolLM2-135M-Instruct in its CPU setting
    arrol advise model=hf model.path=<dir> data=jsonl data.path=<file> algo.max_response_tokens=1024 \\
        engine.detect_length=128 advise.gpu.prompts=128 advise.gpu.slots=256

One engine samples G rollouts of ``advise.head_prompts`` training problems (the cold start: they fit the quality head
and its calibrator) and G + R rollouts of ``advise.batches × advise.prompts_per_batch`` others. It reports the head's
AUC within groups on all of a group's rollouts at several detection lengths; the mean generated length, so what a
pruned rollout costs and G', the number of rollouts without pruning that cost what pruning G to κ does; the gradient
probe at the run's κ and at 0.25 and 0.5, the run's rule reading the head (and a perfect oracle, or the oracles of
``advise.oracle_aucs``) against the cost-matched G', the count-matched κG and random κG, with Bonferroni-corrected
95 % t intervals and the difference each could detect at 80 % power; the generation saving modelled for this machine and
for a GPU setting (``advise.gpu``); and one verdict: prune (κ, L_detect, rule, expected speedup), don't (train G'
rollouts without pruning), or undecided (the batches that would decide).

Writes ``advice.md``, ``advice.json`` and ``grad_probe.json`` into the run directory (``hydra.run.dir``, default
``outputs/advise/<time>``). Every key is the trainer's (``arrol train --help``) or a field of AdviseSettings
(arrol_pl/analysis/advise/config.py); a bad value, or a data file that cannot serve, fails in one line naming its
key (exit 2) before any model loads.
"""

from __future__ import annotations

import os
from pathlib import Path

import arrol_pl.engine  # noqa: E402,F401  (sets the environment the engine needs before vLLM loads)

os.environ.setdefault("OMP_NUM_THREADS", "1")  # vLLM's CPU default; more threads make step times erratic
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from arrol_pl.analysis.advise.config import AdviseConfig, load_advise_config  # noqa: E402
from arrol_pl.cli import hydra_app  # noqa: E402
from arrol_pl.train.config.loader import ConfigError  # noqa: E402


def check(cfg: DictConfig) -> AdviseConfig:
    """The configuration and the data sources, as a training command line is checked before Hydra starts."""
    from arrol_pl.train.run.prelaunch import check_run_config

    return check_run_config(cfg, load_advise_config)


def task(raw: DictConfig) -> None:
    """Hydra's task: check the config and the problems, then advise into the run directory."""
    from arrol_pl.analysis.grad_probe.config import training_problems

    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        config = check(raw)
        training_problems(config.probe())  # enough problems for the budget, before any model loads
    except ConfigError as exc:
        hydra_app.refuse(exc, out_dir)

    from arrol_pl.analysis.advise.run import AdviseJob, run_advise

    run_advise(
        AdviseJob(
            config=config,
            out=out_dir,
            command=" ".join([hydra_app.INVOCATION.prog, *hydra_cfg.overrides.task]),
            data=hydra_cfg.runtime.choices.get("data", config.data.name),
        )
    )


JOB = hydra_app.HydraJob(
    config_name="advise", task=task, schema=AdviseConfig, check=check, about=__doc__.split("\n\n", 1)[1], engine=True
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Advise on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
