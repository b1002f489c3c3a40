"""Lightning callbacks of a training run: stop cleanly on SIGINT / SIGTERM (and save the last step), and a
progress bar in steps.

Decisions:
- **Signals.** The first SIGINT or SIGTERM lets the step in flight finish (its update is consistent),
  then saves a checkpoint (``step<k>.ckpt`` and ``last.ckpt``) and stops training; the caller writes the
  history and a summary marked ``interrupted`` and exits ``128 + signal``. A second signal abandons
  the step in flight (``KeyboardInterrupt``): its half-applied update is not saved, the newest checkpoint
  stays the one to resume from. A step can take minutes on a large model; a scheduler's grace period
  may be shorter, hence the second signal.
- **Progress.** One Lightning epoch covers the whole run (see :mod:`.data`), so the bar counts steps
  done of ``trainer.max_steps``, from the resumed step on, with tqdm's estimate of the time left.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CheckpointOnStop(L.Callback):
    """Saves a checkpoint when training stops: after a signal (see the module docstring), or at the last
    step when ``max_steps`` is not a multiple of ``checkpoint_every`` (ModelCheckpoint would not save it).
    Use as a context manager around the run (installs the signal handlers); pass to the Trainer as a callback."""

    def __init__(self, dirpath: Path, checkpoint_every: int, max_train_seconds: float | None = None) -> None:
        self.dirpath = Path(dirpath)
        self.checkpoint_every = checkpoint_every
        self.max_train_seconds = max_train_seconds
        """Training wall-time budget (``trainer.max_minutes``): the step whose ``time/wall`` reaches it is the last."""
        self.out_of_time = False
        self.signum: int | None = None
        """The first signal received (None: none)."""
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "CheckpointOnStop":
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {name}: abandoning the step in flight")
        self.signum = signum
        logger.warning("%s received: finishing the step in flight, then saving a checkpoint and stopping "
                       "(send it again to abandon the step)", name)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.requested:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if self.max_train_seconds is not None and not self.out_of_time:
            history = getattr(pl_module, "history", None) or [{}]
            over = int(history[-1].get("time/wall", 0.0) >= self.max_train_seconds)
            ranks = getattr(pl_module, "ranks", None)
            self.out_of_time = bool(ranks.max(over) if ranks is not None else over)  # every rank stops at one step
            if self.out_of_time:
                logger.info("training time budget of %.1f min reached at step %d: stopping",
                            self.max_train_seconds / 60, step)
        if self.requested or self.out_of_time:
            trainer.should_stop = True
        elif step < trainer.max_steps:
            return
        if step % self.checkpoint_every:  # ModelCheckpoint saves these multiples itself, after this hook
            for name in (f"step{step:05d}.ckpt", "last.ckpt"):
                trainer.save_checkpoint(self.dirpath / name, weights_only=False)  # the full state, to resume


class StepProgressBar(TQDMProgressBar):
    """``steps: 135/300 [00:45<00:55, 3.0it/s, acc=…, keep=…]``: steps done of ``max_steps`` and time left."""

    def on_train_start(self, trainer: L.Trainer, *_: Any) -> None:
        super().on_train_start(trainer)
        self._steps_bar(trainer)  # a resumed run restarts mid-epoch: Lightning skips on_train_epoch_start

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        super().on_train_epoch_start(trainer)
        self._steps_bar(trainer)

    def _steps_bar(self, trainer: L.Trainer) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps)
        bar.initial = bar.n = trainer.global_step  # a resumed run: the rate counts only this run's steps
        bar.set_description("steps")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes
