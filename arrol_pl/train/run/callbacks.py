"""Lightning callbacks of a training run: every checkpoint (periodic, last step, a stop on SIGINT / SIGTERM)
with ``last.ckpt`` and retention, the history file written as the run goes, and a progress bar in steps.

Decisions:
- **One writer of checkpoints.** :class:`RunCheckpoints` writes ``step<k>.ckpt`` every
  ``trainer.checkpoint_every`` steps, at the last step and on a stop, then ``last.ckpt``, then deletes step
  files beyond ``trainer.keep_checkpoints`` (the newest are kept; ``last.ckpt`` always). Lightning's
  ``ModelCheckpoint`` is not used (the trainer runs with ``enable_checkpointing=False``): beside a second
  writer it saved ``last-v1.ckpt`` whenever a ``last.ckpt`` it had not written itself existed (a resumed run
  whose only save was an off-interval last step, a stop before its first interval), and its state grew by
  one path per checkpoint. Step files are overwritten, never versioned.
- **Signals.** The first SIGINT or SIGTERM during a training step lets the step finish (its update is
  consistent), then saves a checkpoint (``step<k>.ckpt`` and ``last.ckpt``) and stops training; the caller writes
  the history and a summary marked ``interrupted`` and exits ``128 + signal``. In a phase that keeps nothing half
  made (:meth:`RunCheckpoints.stoppable`: the run's preparation with the tiny policy's warm start, every held-out
  evaluation) the first signal stops it at once (:class:`StopRequested`): a half-built cache entry is removed
  (:func:`~arrol_pl.models.cache.cache_entry`), an evaluation is dropped (the step it follows still ends with its
  checkpoint). A second SIGINT during a training step abandons it (``KeyboardInterrupt``): its half-applied update
  is not saved, the newest checkpoint stays the one to resume from. A step can take minutes on a large model, and
  a person at the keyboard may not wait, hence the second Ctrl-C. The SIGTERM torchrun sends the other ranks when
  one failed is handled the same way without a word (``arrol train`` names the failed rank:
  :mod:`~arrol_pl.train.run.ranks`), and after a collective that found a peer gone the handlers stay until the
  summary is written, so that SIGTERM does not end the rank before it.
- **A trained run's export finishes.** Once the last step's checkpoint is written and the final evaluation is done,
  what is left, the export (:meth:`RunCheckpoints.unstoppable`), is short beside the run and is its product: a signal
  during it is logged and absorbed, the export finishes, and the caller records the run as completed, with the
  signal, and exits ``128 + signal``. The export is written whole or not at all
  (:func:`~arrol_pl.train.run.finish.export_run`), so a ``kill -9`` leaves no half of one.
- **Later signals are absorbed.** Once the first is being handled, every further signal (a scheduler's kill loop
  sends ten SIGTERMs in a fifth of a second) is logged once and ignored, but for that one hurrying SIGINT: the
  checkpoint, the history, the summary and the release of the run directory's claim are never cut short. The
  handlers stay installed after the fit until the experiment has written them (:meth:`RunCheckpoints.restore`).
- **History as it goes.** :class:`HistoryFile` appends each finished step's row to ``history.jsonl`` and
  flushes it when the step ends, before that step's checkpoint is written: a crash loses at most the step
  in flight, and every checkpoint's steps are on disk. At train start it rewrites the file to the rows the
  module starts from (a resume: the steps before the checkpoint's), so rows stay unique and in order.
  Whole-file writes go to a temporary file renamed over the target
  (:func:`~arrol_pl.train.records.rundir.write_rows`). Rank 0 writes.
- **The final evaluation inside the fit.** :class:`FinalEvaluation` evaluates on the held-out problems in
  ``on_train_end``, while the TensorBoard writer is open: Lightning closes it after that hook, and a value
  logged later would start a second event file.
- **Progress.** One Lightning epoch covers the whole run (see :mod:`.data`), so the bar counts steps
  done of ``trainer.max_steps``, from the resumed step on, with tqdm's estimate of the time left. Off a terminal
  (a file, a pipe, a CI log) it writes plain lines instead of redrawing one (:mod:`arrol_pl.engine.console`), none
  for Lightning's ``Training:`` or ``Epoch 0:``, and its last line once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from arrol_pl.engine.console import PlainProgress, plain_lines
from arrol_pl.train.run.rank_errors import group_closing, peer_lost
from arrol_pl.train.records.rundir import step_checkpoints, write_rows, writing

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(KeyboardInterrupt):
    """A first SIGINT / SIGTERM in a phase that stops at once (:meth:`RunCheckpoints.stoppable`); ``phase`` names
    it."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"stopped in {phase}")
        self.phase = phase


class HistoryFile(L.Callback):
    """Appends each finished step's history row to ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.written = 0
        """Rows of the module's history already in the file."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        history = pl_module.history
        if trainer.is_global_zero and (history or self.path.exists()):
            with writing("history", self.path):
                write_rows(self.path, history)
        self.written = len(history)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        rows = pl_module.history[self.written :]
        if rows and trainer.is_global_zero:
            with writing("history", self.path), open(self.path, "a") as f:
                f.write("".join(json.dumps(row) + "\n" for row in rows))
                f.flush()
        self.written = len(pl_module.history)


class RunCheckpoints(L.Callback):
    """Writes every checkpoint of the run (see the module docstring): every ``checkpoint_every`` steps, at
    ``max_steps``, after a signal, when the training time budget ``max_train_seconds`` is spent and when the
    module stops the run (``trainer.should_stop``: a reward that failed on every item); keeps the
    newest ``keep`` step files (None: all). Use as a context manager around the run (installs the signal
    handlers); pass to the Trainer as a callback, after :class:`HistoryFile`."""

    def __init__(
        self, dirpath: Path, checkpoint_every: int, max_train_seconds: float | None = None, keep: int | None = None
    ) -> None:
        self.dirpath = Path(dirpath)
        self.checkpoint_every = checkpoint_every
        self.max_train_seconds = max_train_seconds
        """Training wall-time budget (``trainer.max_minutes``): the step whose ``time/wall`` (the oracle's
        ``time/wall_credited``) reaches it is the last."""
        self.keep = keep
        """Step checkpoints kept beside ``last.ckpt`` (``trainer.keep_checkpoints``)."""
        self.out_of_time = False
        self.signum: int | None = None
        """The first signal received (None: none)."""
        self.phase: str | None = None
        """The phase a first signal stops at once (:meth:`stoppable`); None: a training step, which finishes."""
        self.stopped_in: str | None = None
        """The phase the first signal stopped (None: none, or a training step)."""
        self.finishing: str | None = None
        """Work a first signal lets finish (:meth:`unstoppable`: the export of a trained run)."""
        self.in_step = False
        """A training step is in flight (a second SIGINT may abandon it)."""
        self.hurried = False
        self.absorbed = 0
        """Signals received after the first and ignored."""
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "RunCheckpoints":
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # After a signal they absorb the rest until restore(), once everything is written; so they do after a peer
        # rank vanished mid-collective: torchrun's closing SIGTERM follows, and the summary is still to be written.
        if not self.requested and not (exc is not None and peer_lost(exc)):
            self.restore()

    def restore(self) -> None:
        """The process's own handlers again (idempotent)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        # torchrun's SIGTERM to the ranks left after one failed: handled as any, in silence (its launcher reports);
        # a signal every rank receives from torchrun (the user's Ctrl-C) is said by rank 0
        quiet = (signum == signal.SIGTERM and group_closing()) or os.environ.get("RANK", "0") != "0"
        say = logger.debug if quiet else logger.warning
        if self.signum is not None:
            if signum == signal.SIGINT and self.in_step and not self.hurried:
                self.hurried = True
                raise KeyboardInterrupt(f"second {name}: abandoning the step in flight")
            self.absorbed += 1
            if self.absorbed == 1:
                say("%s received again: ignored until the checkpoint and the summary are written", name)
            return
        self.signum = signum
        if self.finishing is not None:
            say("%s received: finishing %s, then exiting", name, self.finishing)
            return
        if self.phase is not None:
            self.stopped_in = self.phase
            say("%s received: stopping %s", name, self.phase)
            raise StopRequested(self.phase)
        say(
            "%s received: finishing the step in flight, then saving a checkpoint and stopping "
            "(Ctrl-C again abandons the step)",
            name,
        )

    @contextmanager
    def stoppable(self, phase: str) -> Iterator[None]:
        """Inside, a first signal stops ``phase`` at once with :class:`StopRequested` (one received before starts
        none of it); any error the phase raises once stopped (the engine aborting its requests) is reported as the
        stop."""
        outer = self.phase
        self.phase = phase
        try:
            if self.requested:
                raise StopRequested(phase)
            yield
        except StopRequested:
            raise
        except Exception as exc:
            if not self.requested:
                raise
            raise StopRequested(phase) from exc
        finally:
            self.phase = outer

    @contextmanager
    def unstoppable(self, work: str) -> Iterator[None]:
        """Inside, a first signal lets ``work`` finish: it is logged, recorded (:attr:`signum`) and absorbed, as every
        later one is (module docstring)."""
        outer = self.finishing
        self.finishing = work
        try:
            yield
        finally:
            self.finishing = outer

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.requested:
            trainer.should_stop = True

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.in_step = True

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.in_step = False  # what follows writes the step's checkpoint: no signal cuts it short
        step = trainer.global_step
        if self.max_train_seconds is not None and not self.out_of_time:
            history = getattr(pl_module, "history", None) or [{}]
            row = history[-1]  # the oracle's clock is credited with the decode time its pruning would have saved
            over = int(row.get("time/wall_credited", row.get("time/wall", 0.0)) >= self.max_train_seconds)
            ranks = getattr(pl_module, "ranks", None)
            self.out_of_time = bool(ranks.max(over) if ranks is not None else over)  # every rank stops at one step
            if self.out_of_time:
                logger.info(
                    "training time budget of %.1f min reached at step %d: stopping", self.max_train_seconds / 60, step
                )
        if self.requested or self.out_of_time:
            trainer.should_stop = True
        elif not trainer.should_stop and step % self.checkpoint_every and step < trainer.max_steps:
            return
        self.save(trainer, step)

    def save(self, trainer: L.Trainer, step: int) -> None:
        """``step<k>.ckpt`` (unless ``keep`` is 0), then ``last.ckpt``, then the step files beyond ``keep`` go."""
        names = ["last.ckpt"] if self.keep == 0 else [f"step{step:05d}.ckpt", "last.ckpt"]
        for name in names:
            trainer.save_checkpoint(self.dirpath / name, weights_only=False)  # the full state, to resume
        if self.keep is not None and trainer.is_global_zero:
            old = sorted(step_checkpoints(self.dirpath).items())[: -self.keep or None]
            for _, path in old:
                path.unlink(missing_ok=True)


class FinalEvaluation(L.Callback):
    """The held-out evaluation after the last step (see the module docstring), attached to the last history row;
    none after a stop on a signal (``stopped()``)."""

    def __init__(self, evaluate: Callable[[], Any], stopped: Callable[[], bool]) -> None:
        self.evaluate, self.stopped = evaluate, stopped
        self.done = False
        self.result: Any = None
        """What ``evaluate()`` returned (None: not run, or no held-out set); with several ranks every rank
        evaluates its share and holds the whole result (:func:`~arrol_pl.train.run.heldout.evaluate_heldout`)."""
        self.seconds = 0.0
        """How long it took (not training time)."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.run(pl_module)

    def run(self, pl_module: L.LightningModule) -> None:
        """Evaluate once, unless stopped; the experiment calls it itself when the fit had no step left to run."""
        if self.done or self.stopped():
            return
        start = time.perf_counter()
        self.done = True
        try:
            self.result = self.evaluate()
        except StopRequested:  # dropped: the last checkpoint is written, and a stopped run exports nothing
            return
        finally:
            self.seconds = time.perf_counter() - start
        if self.result is not None and pl_module.history:
            pl_module.record_heldout(self.result)


class PlainSteps(PlainProgress):
    """The steps bar's plain lines, its numbers padded as Lightning's bar pads them (``keep=1.000``)."""

    format_num = staticmethod(Tqdm.format_num)


class StepProgressBar(TQDMProgressBar):
    """``steps: 135/300 [00:45<00:55, 3.0it/s, acc=…, keep=…]``: steps done of ``max_steps`` and time left; a fit
    that stops on an error (or a second signal) ends the bar's line, so what is printed next starts a line. Where
    stdout is no terminal, a plain line every tenth of the run or every minute, and one at its end
    (:class:`~arrol_pl.engine.console.PlainProgress`); first in the callbacks, so the bar ends before the final
    evaluation starts its own."""

    @property
    def train_description(self) -> str:
        return "steps"

    def init_train_tqdm(self) -> Any:
        if not plain_lines(sys.stdout):
            return super().init_train_tqdm()
        return PlainSteps(
            desc=self.train_description, disable=self.is_disabled, leave=True, file=sys.stdout, smoothing=0, lines=10
        )

    def on_train_start(self, trainer: L.Trainer, *_: Any) -> None:
        super().on_train_start(trainer)
        self._steps_bar(trainer)  # a resumed run restarts mid-epoch: Lightning skips on_train_epoch_start

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        super().on_train_epoch_start(trainer)
        self._steps_bar(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if self._train_progress_bar is not None:
            self._train_progress_bar.close()

    def _steps_bar(self, trainer: L.Trainer) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps)
        bar.initial = bar.n = trainer.global_step  # a resumed run: the rate counts only this run's steps
        bar.set_description("steps")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes


class HeldoutEvaluation(L.Callback):
    """Held-out accuracy every ``every`` steps, for accuracy-vs-wall-clock curves (paper Fig. 4).

    ``evaluate()`` runs on the engine's weights, which the step has just synced. Its seconds are added to
    the module's ``paused_seconds`` so ``time/wall`` stays training time. The last step is left to the
    caller's final evaluation. A signal during it drops it (:class:`StopRequested`, see the module docstring).
    """

    def __init__(self, every: int, evaluate) -> None:
        self.every = every
        self.evaluate = evaluate

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every or step >= trainer.max_steps or not pl_module.history:
            return
        start = time.perf_counter()
        try:
            result = self.evaluate()
        except StopRequested:  # dropped: the step it follows ends with its checkpoint
            return
        finally:
            pl_module.paused_seconds += time.perf_counter() - start
        pl_module.record_heldout(result)
