"""``arrol train [overrides]`` (= ``python experiments/run.py [overrides]``): train with ARRoL; the Hydra config is
``conf/config.yaml`` (the package's, when installed).

With no arguments: ARRoL-GRPO on the built-in arithmetic task with a tiny local Qwen3 policy on CPU.
``+exp=ablation_kappa`` and the other ``exp`` presets run multirun sweeps and write one table.
The configuration and the data are validated before any model loads; a bad key, type, preset or value, a data
file that is missing, empty, unreadable or without the fields looked for, or a model cache that cannot be written,
fails in one line naming its key (exit 2, no run directory left behind). SIGINT / SIGTERM stop after the step in
flight with a checkpoint, the history and a summary marked interrupted (exit 128 + signal, a write that failed
meanwhile included); once the run is trained, one lets the export finish (the summary completed, exit 128 +
signal); a checkpoint, history or summary that cannot be written stops the run naming the file and the last good
checkpoint (exit 1), and so does a reward that failed on every item for ``reward.max_failed_steps`` steps in a row.
``trainer.devices > 1`` on one node starts the ranks under torchrun; a rank that dies (a signal, an error, a
collective past ``trainer.rank_timeout_minutes``) is named in two lines after the others stopped: how it ended, the
last checkpoint and the resume command (exit: the rank's status, 128 + signal for a signal); the tracebacks and
torchrun's log go to ``ranks.log`` in the run directory (:mod:`arrol_pl.train.run.ranks`).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from arrol_pl.cli import hydra_app
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import RunConfig, load_run_config
from arrol_pl.train.records.rundir import claim_output_dir, resume_command, resumed_run_dir, save_hydra_record
from arrol_pl.train.run.prelaunch import check_run_config

# vLLM logs every weight sync at INFO/WARNING; the run's own summary is what matters here.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def launch_ranks(run: Any, hydra_dir: Path, overrides: list[str]) -> int:
    """``trainer.devices > 1`` on one node, not started by a launcher: run this command as that many ranks
    under torchrun (one run directory for all); returns its exit status, after a failed rank that rank's
    (:func:`~arrol_pl.train.run.ranks.launch`). The policy (and the tiny policy's warm start) is prepared here
    first, with every core, so the ranks find it in the cache."""
    from arrol_pl.train.run.build import policy_directory
    from arrol_pl.train.run.experiment import continued_run
    from arrol_pl.train.run.prelaunch import preflight
    from arrol_pl.train.run.ranks import launch

    if run.trainer.num_nodes > 1:
        raise ConfigError(
            f"trainer.num_nodes={run.trainer.num_nodes}: start torchrun on each node "
            "(docs/distributed.md); arrol train launches the ranks of one node only"
        )
    run, out_dir = continued_run(run, Path(run.trainer.output_dir or hydra_dir))  # the checkpoint to check
    with claim_output_dir(out_dir):  # the run's claim, held here for its ranks (rundir)
        preflight(run, out_dir)
        policy_directory(run)
        return launch(run, out_dir, hydra_dir, list(hydra_app.INVOCATION.argv), overrides)


def train(cfg: DictConfig) -> None:
    """Hydra's task: one run (a sweep's job) from the composed config."""
    from arrol_pl.analysis.report import print_summary
    from arrol_pl.train.records.rundir import RecordWriteError
    from arrol_pl.train.run.experiment import run_experiment
    from arrol_pl.train.run.finish import RunInterrupted
    from arrol_pl.train.run.ranks import rank_ended
    from arrol_pl.train.step.reward_failures import RewardsFailed

    hydra_cfg = HydraConfig.get()
    hydra_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        run = load_run_config(cfg)
        out_dir = Path(run.trainer.output_dir or hydra_dir)
        overrides = list(hydra_cfg.overrides.task)
        if run.trainer.ranks > 1 and "LOCAL_RANK" not in os.environ:
            sys.exit(launch_ranks(run, hydra_dir, overrides))
        record = (
            (lambda: save_hydra_record(hydra_dir, cfg, hydra_cfg, overrides))
            if os.environ.get("RANK", "0") == "0"
            else None
        )  # Hydra's record, once the directory is accepted (rundir)
        summary = run_experiment(run, out_dir, overrides=overrides, accepted=record)
    except ConfigError as exc:
        rank_ended(exc, "reported")
        hydra_app.refuse(exc, hydra_dir)
    except RunInterrupted as exc:
        if rank_ended(exc, "interrupted"):  # torchrun closed the ranks after another failed: the launcher says so
            sys.exit(1)
        if os.environ.get("RANK", "0") == "0":  # every rank stopped on the signal; the checkpoint is rank 0's
            print(f"interrupted: {exc} (outputs: {out_dir})", file=sys.stderr)
        sys.exit(128 + exc.signum)
    except (RecordWriteError, RewardsFailed) as exc:
        rank_ended(exc, "reported")
        resume = f"; resume with {resume_command(exc.last_good)}" if exc.last_good else ""
        print(f"stopped: {exc}{resume}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        if rank_ended(exc):  # one rank of several under arrol train's launcher: recorded, and the launcher says it
            sys.exit(1)
        raise
    if os.environ.get("RANK", "0") == "0":
        print_summary(summary, out_dir)
    if summary.signal is not None:  # received once the run was trained: its export finished
        if os.environ.get("RANK", "0") == "0":
            print(
                f"{summary.signal} received once the run was trained: its export finished, the run completed "
                f"(outputs: {out_dir})",
                file=sys.stderr,
            )
        sys.exit(128 + signal.Signals[summary.signal])


JOB = hydra_app.HydraJob(
    config_name="config",
    task=train,
    schema=RunConfig,
    check=check_run_config,
    about=__doc__.split("\n", 2)[2],
    run_dir=resumed_run_dir,
    engine=True,
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Train on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
