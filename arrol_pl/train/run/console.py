"""A run's console: each message printed once, and nothing the user cannot act on.

Decisions:
- **One handler per message.** Lightning gives its ``lightning`` logger a stderr handler of its own and lets it
  propagate too, so under an application that configured logging (Hydra: timestamped lines on stdout and in
  ``run.log``) every Lightning message printed twice. When the root logger has handlers, Lightning's own is
  removed (:func:`quiet_console`); without them (a script that configured nothing) it stays, the only one.
- **Each load reported once.** One run reads its training file up to three times (the prompts, the tiny policy's
  tokenizer corpus, the held-out set when it is the same file); a repeated report of a load is dropped
  (:class:`Once`).
- **Notices filtered where they arise, by their text.** Lightning's tips to install litlogger, its lines on the
  accelerators it found, the precision it uses (``Using bfloat16 Automatic Mixed Precision``: the config names it),
  the advice on Tensor Cores, the GPU rank's ``LOCAL_RANK`` line, the first of its two lines on a resumed checkpoint
  (``Restored all states from the checkpoint at <path>`` stays: it names the checkpoint a run directory resolved to)
  and its notice that the fit reached ``max_steps`` (all logged at INFO, :data:`NOTICES`); matplotlib's
  ``generated new fontManager`` (at INFO, when a sweep first draws its plot); torch's deprecation of
  ``isinstance(treespec, LeafSpec)`` that Lightning's pytree code triggers, and the ``torch.distributed.reduce_op``
  deprecation vLLM's Triton dispatcher triggers at import: each by its own message (and category or logger), so any
  other message of the same kind still shows. vLLM's notes on which Triton backend it found (logged while it is
  imported, before ``VLLM_LOGGING_LEVEL`` applies) are raised to ERROR on their one logger (``arrol evaluate`` quiets
  its console too, before it imports vLLM). vLLM's C++ notice of its NUMA binding is dropped at the engine's start
  (:mod:`arrol_pl.engine.console`), the hub's print of ``Loading weights from local directory`` where the head loads
  (:class:`~arrol_pl.models.head.CalibratedHead`).
- **A rank stopped by torchrun stops in silence.** When one rank fails, torchrun sends SIGTERM to the others and
  ``arrol train`` names the failed rank itself (:mod:`~arrol_pl.train.run.ranks`): Lightning's "Received SIGTERM" is
  dropped then (:class:`ClosingSigterm`), as the run's own notice of the signal is. vLLM's dump of the engine's input
  (its config and scheduler output, logged at ERROR as an exception leaves the model's execution) is dropped when
  that exception is the world going down, a peer gone or torchrun closing the group (:class:`LostWorldDump`): the
  rank that was inside its engine when another was killed printed it, once, beside the launcher's two lines.
- **A line of its own for every message.** The progress bar redraws its line without ending it, and Hydra's console
  handler writes to the same stdout: a warning logged mid-run (a signal received) was appended to the bar's line.
  During the fit, console log lines go through ``tqdm.write`` (:func:`logs_above_bars`), which clears the bar, prints
  the line and redraws the bar below it; a fit that stops on an error ends the bar's line first
  (:class:`~arrol_pl.train.run.callbacks.StepProgressBar`), so the one-line error that follows starts a line.
- **No progress bar for milliseconds of work.** Loading and saving the policy's weights from and to local
  directories (transformers' "Loading weights" and "Writing model shards"; vLLM's "Loading safetensors checkpoint
  shards", off in the engine) drew bars between the run's own lines: :func:`weight_bars_off` turns transformers'
  off around those calls only, so a download from the hub keeps its bar.
"""

from __future__ import annotations

import logging
import sys
import warnings
from contextlib import contextmanager
from typing import Iterator

NOTICES = {
    "lightning.pytorch.utilities.rank_zero": (
        "💡 Tip: For seamless cloud",
        "GPU available: ",
        "TPU available: ",
        "HPU available: ",
        "Using bfloat16 Automatic Mixed Precision",
        "Using 16bit Automatic Mixed Precision",
        "You are using a CUDA device (",
        "Restoring states from the checkpoint path at ",
        "`Trainer.fit` stopped: `max_steps=",
    ),
    "lightning.pytorch.accelerators.cuda": ("LOCAL_RANK: ",),
    "matplotlib.font_manager": ("generated new fontManager",),
}
"""Per logger, the openings of the INFO messages a user has no use for: Lightning's tip advertising its cloud
products, the accelerators it found and the precision it uses (the run's config names both), its advice on Tensor
Cores (the policy's precision is the config's), the first of its two lines on a resumed checkpoint, the fit's end
at ``max_steps`` (the progress bar says so; printed after the bar's last update, it made the bar print its final
line twice) and each GPU rank's ``CUDA_VISIBLE_DEVICES``; matplotlib's note that it built its font cache."""

LOADERS = "arrol_pl.tasks.rows"
"""The logger of every dataset load (``<name>: <n> problems from <source>``, the rows it skipped)."""


class DropNotices(logging.Filter):
    """Drops the records whose message opens with one of ``openings`` (a logger's :data:`NOTICES`)."""

    def __init__(self, openings: tuple[str, ...]) -> None:
        super().__init__()
        self.openings = openings

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.openings)


class Once(logging.Filter):
    """Drops a record whose message was already logged through it: a run reads its training file for the prompts,
    again for the tiny policy's tokenizer and again as its held-out set when that is the same file, and each read
    reports the same load."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


def quiet_console() -> None:
    """Each Lightning message once, each dataset load reported once per run, and the third-party notices of the
    module docstring filtered; idempotent but for the loads, whose record starts afresh (a sweep's next job)."""
    if logging.getLogger().hasHandlers():
        lightning = logging.getLogger("lightning")
        for handler in list(lightning.handlers):
            lightning.removeHandler(handler)
    for name, openings in NOTICES.items():
        noisy = logging.getLogger(name)
        if not any(isinstance(f, DropNotices) for f in noisy.filters):
            noisy.addFilter(DropNotices(openings))
    loads = logging.getLogger(LOADERS)
    for old in [f for f in loads.filters if isinstance(f, Once)]:
        loads.removeFilter(old)
    loads.addFilter(Once())
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.reduce_op` is deprecated", category=FutureWarning)
    # the prompt stream is a seeded function of the step, so a resume mid-"epoch" is exact (checkpoint.py)
    warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")
    logging.getLogger("vllm.triton_utils.importing").setLevel(logging.ERROR)
    sigterm = logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector")
    if not any(isinstance(f, ClosingSigterm) for f in sigterm.filters):
        sigterm.addFilter(ClosingSigterm())
    dump = logging.getLogger(VLLM_DUMP)
    if not any(isinstance(f, LostWorldDump) for f in dump.filters):
        dump.addFilter(LostWorldDump())


class ClosingSigterm(logging.Filter):
    """Drops Lightning's "Received SIGTERM" while torchrun closes the ranks after one failed (its launcher says
    which): the rank stops in silence (:func:`~arrol_pl.train.run.rank_errors.group_closing`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from arrol_pl.train.run.rank_errors import group_closing

        return "Received SIGTERM" not in str(record.msg) or not group_closing()


VLLM_DUMP = "vllm.logging_utils.dump_input"
"""The logger of vLLM's dump of the engine's input when its model's execution raises."""


class LostWorldDump(logging.Filter):
    """Drops vLLM's dump of the engine's input while the exception vLLM is handling is the run's world going down
    (:func:`~arrol_pl.train.run.rank_errors.failure_kind` says ``lost``: a peer gone, or torchrun closing the group);
    the rank's one line and the launcher's say what happened. Any other failure keeps its dump."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = sys.exc_info()[1]  # vLLM logs the dump inside its except block, before it raises again
        if exc is None:
            return True
        from arrol_pl.train.run.rank_errors import failure_kind

        return failure_kind(exc) != "lost"


@contextmanager
def weight_bars_off() -> Iterator[None]:
    """transformers' progress bars off inside (loading or saving local weights), as they were after."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


@contextmanager
def logs_above_bars() -> Iterator[None]:
    """Inside, the root logger's console handlers write through ``tqdm.write`` (module docstring); a script that
    configured no console handler keeps its logging as it is."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    root = logging.getLogger()
    if not any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr) for h in root.handlers):
        yield
        return
    with logging_redirect_tqdm():
        yield
