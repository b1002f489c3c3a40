"""One experiment from a validated :class:`RunConfig`, in four parts: the checks before launch
(:mod:`.prelaunch`), building the parts (:mod:`.build`), the fit (:func:`fit`), and finishing (:mod:`.finish`: the
summary and the export).

``run_experiment`` is what ``experiments/run.py`` calls (and what the tests call): it writes TensorBoard events,
checkpoints, an exported policy + head, ``history.jsonl`` and ``summary.json`` into the output directory. SIGINT /
SIGTERM stop after the step in flight with a checkpoint, the history and a summary marked ``interrupted``
(:class:`~arrol_pl.train.run.finish.RunInterrupted`), later signals absorbed until those and the claim's release are
done; they stop the warm start or a held-out evaluation at once, keeping nothing of it
(:class:`~arrol_pl.train.run.callbacks.RunCheckpoints`). Once the run is trained, a signal lets its export finish:
the summary says ``completed`` and records the signal, and the run returns (``arrol train`` then exits 128 +
signal). A checkpoint or history row that cannot be written (a full disk) stops the run the same way, with a summary
marked ``failed`` naming the file, the file system's reason and the last good checkpoint
(:class:`~arrol_pl.train.records.rundir.RecordWriteError`; after a signal the run still ends ``interrupted``, naming
the write that failed), and so does a reward that failed on every item for ``reward.max_failed_steps`` steps in a
row, after that step's checkpoint, with no final evaluation or export
(:class:`~arrol_pl.train.step.reward_failures.RewardsFailed`); any other crash writes the history and a summary
marked ``failed``, then propagates. The history and the summary are written even when the other cannot be.

Decisions:
- **The history lives in the run directory.** Each step's row is appended to ``history.jsonl`` as the step
  ends (:class:`~arrol_pl.train.run.callbacks.HistoryFile`), not stored in checkpoints. A resumed run starts from
  the rows before its checkpoint's step, read from the ``history.jsonl`` of the run that wrote the checkpoint
  (:func:`~arrol_pl.train.records.rundir.history_before`): rows of steps finished after that checkpoint are
  dropped, so a resume into its own directory repeats them once. TensorBoard continues in ``tb/``: the resumed
  session's event file starts with a purge at the checkpoint's step, so TensorBoard hides the earlier session's
  events from that step on (no step twice).
- **A resume by run writes where that run did.** ``trainer.resume=auto`` or a run directory is resolved into the
  checkpoint and the directory it continues (:func:`~arrol_pl.train.records.rundir.resolve_resume`,
  :func:`continued_run`) before anything else; finding no checkpoint, the run starts fresh and says so in one line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import RunConfig, prompts_drawn_per_step
from arrol_pl.train.records.rundir import RecordWriteError, claim_output_dir, history_before, resolve_resume
from arrol_pl.train.records.summary import RunSummary
from arrol_pl.train.run.build import RunParts, build_parts, join_world, lightning_strategy
from arrol_pl.train.run.finish import RunInterrupted, export_run, push_export, summarise, write_outcome
from arrol_pl.train.run.prelaunch import effective_keep_ratio, preflight
from arrol_pl.train.step.reward_failures import RewardsFailed, reward_failures

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How the fit ended, as the summary reports it."""

    status: str = "completed"
    failure: BaseException | None = None
    after: object = None
    export_dir: Path | None = None
    fit_seconds: float = 0.0


def run_experiment(
    run: RunConfig,
    out_dir: Path,
    engine=None,
    overrides: list[str] | None = None,
    accepted: Callable[[], None] | None = None,
) -> RunSummary:
    """Train per ``run``; returns (and writes) the summary. ``engine`` may be passed to share one (tests);
    ``overrides`` (the command line's) are recorded so sweep tables can name their rows; ``accepted`` is called
    once every check has passed, before anything is written (``run.py`` writes Hydra's record then).

    Raises :class:`~arrol_pl.train.config.loader.ConfigError` before anything is written (an ``out_dir`` holding
    another run's files, a model cache that refuses the policy's build included), :class:`RunInterrupted` after a
    signal, and :class:`~arrol_pl.train.records.rundir.RecordWriteError` after a failed write of a checkpoint, the
    history or the summary, or any other exception the run raised, each once the history and a summary (``status``
    interrupted or failed, ``error``) are written, as far as they can be.
    """
    from arrol_pl.train.run.callbacks import RunCheckpoints

    run, out_dir = continued_run(run, Path(out_dir))
    t = run.trainer
    stop = RunCheckpoints(
        out_dir / "checkpoints",
        t.checkpoint_every,
        None if t.max_minutes is None else 60.0 * t.max_minutes,
        t.keep_checkpoints,
    )
    try:
        with claim_output_dir(out_dir):  # before its check: two runs given one directory cannot both pass it
            return _experiment(run, out_dir, engine, overrides, accepted, stop)
    finally:
        stop.restore()  # after a signal its handlers absorbed the others until the summary and the claim were done


def continued_run(run: RunConfig, out_dir: Path) -> tuple[RunConfig, Path]:
    """``run`` with ``trainer.resume`` the checkpoint it continues (None: a fresh start, said in one line), and the
    directory it writes (:func:`~arrol_pl.train.records.rundir.resolve_resume`; ``out_dir`` is pinned by
    ``trainer.output_dir``)."""
    t = run.trainer
    checkpoint, out_dir, note = resolve_resume(t.resume, run.name, out_dir, pinned=t.output_dir is not None)
    if note is not None:
        logger.warning(note)
    resume = None if checkpoint is None else str(checkpoint)
    if resume != t.resume:
        run = dataclasses.replace(run, trainer=dataclasses.replace(t, resume=resume))
    return run, out_dir


def _experiment(
    run: RunConfig, out_dir: Path, engine, overrides: list[str] | None, accepted: Callable[[], None] | None, stop
) -> RunSummary:
    import lightning as L

    from arrol_pl.train.records.checkpoint import AtomicCheckpointIO
    from arrol_pl.train.run.console import quiet_console

    quiet_console()  # each message once, before vLLM and Lightning speak
    t0, t = time.perf_counter(), run.trainer
    L.seed_everything(t.seed, workers=True, verbose=False)
    train, heldout, resume = preflight(run, out_dir)
    if accepted is not None:
        accepted()
    history = history_before(t.resume, resume) if resume is not None else []
    resumed_step = int(resume["global_step"]) if resume is not None else None
    rank = join_world(run)
    loaded = {"train": train, "heldout": heldout}  # their skipped rows per reason, the too long ones included
    out_dir.mkdir(parents=True, exist_ok=True)
    io = AtomicCheckpointIO(last_good=Path(t.resume) if t.resume else None)
    parts, outcome = RunParts(engine=engine, owns_engine=engine is None), Outcome()
    try:
        with stop:
            with stop.stoppable("the run's preparation"):  # nothing of it is kept: a signal stops it at once
                train, heldout = build_parts(parts, run, train, heldout, resume, history, stop.stoppable)
            resume = None  # the trainer reads the checkpoint itself; drop the memory map
            fit(parts, run, out_dir, train, bool(heldout), stop, io, resumed_step, outcome)
    except ConfigError:
        raise
    except Exception as exc:  # a failed checkpoint write or a crash: the history and a summary marked failed first
        outcome.status, outcome.failure = "failed", exc
    except (KeyboardInterrupt, SystemExit):
        # Lightning turns the second Ctrl-C into SystemExit, and SIGTERM into one after the step.
        if not stop.requested:
            raise
    finally:
        parts.close()
    module = parts.module
    interrupted = stop.requested and outcome.export_dir is None  # a signal once the export is written stops nothing
    if isinstance(outcome.failure, (RecordWriteError, RewardsFailed)):
        outcome.failure.last_good = io.last_good
    summary = summarise(
        run,
        module.history if module is not None else [],
        parts.before,
        outcome.after,
        time.perf_counter() - t0,
        status="interrupted" if interrupted else outcome.status,
        signal=signal.Signals(stop.signum).name if stop.requested else None,
        error=str(outcome.failure) if outcome.failure else None,
        checkpoint=str(io.last_good) if io.last_good else None,
        skipped_steps=dict(module.skipped) if module is not None else {},
        reward_failures=reward_failures(module.history) if module is not None else {},
        keep_ratio_effective=effective_keep_ratio(run),
        fit_seconds=outcome.fit_seconds,
        policy_dir=module.run_info.get("policy_dir") if module is not None else None,
        export_dir=str(outcome.export_dir) if outcome.export_dir else None,
        checkpoint_dir=str(out_dir / "checkpoints"),
        tensorboard_dir=str(out_dir / "tb"),
        overrides=overrides or [],
        data_rows={split: rows.report() for split, rows in loaded.items()},
    )
    unwritten = write_outcome(run, out_dir, summary, module.history if module is not None else [], rank, io.last_good)
    if unwritten is not None and outcome.failure is not None:
        logger.error("%s", unwritten.failed)  # the run had failed already: that failure is the one reported
    failure = outcome.failure or unwritten
    if interrupted and (failure is None or isinstance(failure, RecordWriteError)):
        raise RunInterrupted(stop.signum, summary, stop.stopped_in, failure)  # a record not written: the last good
    if failure is not None:
        raise failure
    return summary


def fit(
    parts: RunParts,
    run: RunConfig,
    out_dir: Path,
    train,
    has_heldout: bool,
    stop,
    io,
    resumed_step: int | None,
    outcome: Outcome,
) -> None:
    """Lightning's fit over the run's steps, the held-out evaluations (every ``trainer.eval_every`` steps and after
    the last), then the exported policy, which a signal lets finish, and its push; ``outcome`` records the fit's
    seconds, the final result and the export."""
    import lightning as L

    from arrol_pl.train.records.loggers import log_hyperparams, make_loggers
    from arrol_pl.train.run.callbacks import FinalEvaluation, HeldoutEvaluation, HistoryFile, StepProgressBar
    from arrol_pl.train.run.console import logs_above_bars
    from arrol_pl.train.run.data import PromptDataModule

    t, module = run.trainer, parts.module
    # Batches are lists of Problems (text for the engine): the module's transfer hook keeps them as they are.
    warnings.filterwarnings("ignore", message="You have overridden `transfer_batch_to_device`")
    heldout_every = (
        [HeldoutEvaluation(t.eval_every, lambda: parts.evaluate("held-out during training"))]
        if t.eval_every and has_heldout
        else []
    )
    final = FinalEvaluation(
        lambda: parts.evaluate("held-out after training"),
        lambda: stop.requested or module.reward_failures.failure is not None,
    )
    loggers = make_loggers(t.logger, out_dir, run.name, resumed_step, t.wandb)
    log_hyperparams(loggers, json.loads(json.dumps(dataclasses.asdict(run))))  # built-in types: tuples as lists
    trainer = L.Trainer(
        max_steps=t.max_steps,
        accelerator=t.accelerator,
        devices=t.devices,
        strategy=lightning_strategy(t),
        num_nodes=t.num_nodes,
        use_distributed_sampler=False,  # every rank takes its share of the step's B
        precision=t.precision,
        logger=loggers or False,
        # the bar first (it ends before the final evaluation); HistoryFile after the held-out evaluation (it
        # completes the step's row), before the checkpoint
        callbacks=[StepProgressBar(), *heldout_every, HistoryFile(out_dir / "history.jsonl"), stop, final],
        plugins=[io],
        enable_checkpointing=False,  # RunCheckpoints writes them all
        log_every_n_steps=t.log_every,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        enable_model_summary=False,
        default_root_dir=str(out_dir),
    )
    fit_start = time.perf_counter()
    if not stop.requested:
        with logs_above_bars():
            trainer.fit(
                module,
                datamodule=PromptDataModule(train, prompts_drawn_per_step(run), t.seed, t.max_steps),
                ckpt_path=t.resume,
                weights_only=True,
            )
    outcome.fit_seconds = time.perf_counter() - fit_start - final.seconds
    if module.reward_failures.failure is not None:  # stopped by the module, its checkpoint written: no export
        raise RewardsFailed(module.reward_failures.failure)
    if not stop.requested:
        final.run(module)  # done in on_train_end unless the fit had no step left to run
    if stop.requested:  # stopped in training or in the final evaluation: a stopped run exports nothing
        return
    outcome.after = final.result  # the last point of the held-out curve
    with stop.unstoppable("the export"):  # trained and checkpointed: a signal lets the export finish
        outcome.export_dir = export_run(module, parts.tokenizer, out_dir / "export", run, parts.before, outcome.after)
    if module.ranks.rank == 0 and t.push_to_hub is not None:  # the export whole: policy, tokenizer, card, head
        if stop.requested:
            logger.warning(
                "%s received during the export: not pushed to %s; push it with `hf upload %s %s .`",
                signal.Signals(stop.signum).name,
                t.push_to_hub,
                t.push_to_hub,
                outcome.export_dir,
            )
            return
        with stop.unstoppable("the push to the hub"):
            logger.info("pushed %s to %s", outcome.export_dir, push_export(outcome.export_dir, t.push_to_hub))
