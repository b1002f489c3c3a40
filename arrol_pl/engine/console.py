"""What a run writes to its console beside its log: progress bars, redrawn on a terminal and plain lines anywhere
else, and vLLM's NUMA notice dropped from the engine's start.

Decisions:
- **Plain lines off a terminal.** A bar redraws its line with carriage returns (and nested bars move the cursor):
  in a file, a pipe or a CI log every redraw stays, a 300-step run's bar in thousands of copies. Where its stream is
  not a terminal of known size (:func:`plain_lines`), a bar (:func:`progress`, the run's steps bar) is a
  :class:`PlainProgress`: a line each ``lines``-th of its total (the steps bar: every tenth) and at its end, and a
  line whenever a minute (``$ARROL_PROGRESS_SECONDS``) has passed with progress but none written; a bar given no
  ``lines`` (an evaluation, the warm start) writes only those minute lines, and its end once it wrote one. No line
  for a bar that has not moved (Lightning's ``Training:`` and ``Epoch 0:`` before the first step), and its end once
  however often it is redrawn. A notebook keeps tqdm's widget.
- **vLLM's NUMA notice dropped.** At each start vLLM's CPU worker binds its memory to a NUMA node and says so from
  C++ on file descriptor 2 (``NUMA binding: Using MEMBIND policy ...``): no Python warning or logger to filter, so
  the start's descriptor 2 is held in a file and written back after without that line
  (:func:`native_lines_dropped`; the CPU engine's start only, before any bar of its own).
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

from tqdm.auto import tqdm as auto_tqdm
from tqdm.std import tqdm as std_tqdm

PROGRESS_SECONDS = "ARROL_PROGRESS_SECONDS"
"""The environment variable that sets :func:`line_seconds` (0: a line at every update of a bar)."""


def line_seconds() -> float:
    """Seconds after which a bar off a terminal writes its progress however little it moved: a minute, unless
    ``$ARROL_PROGRESS_SECONDS`` says otherwise (read as each bar starts)."""
    try:
        return max(0.0, float(os.environ.get(PROGRESS_SECONDS, "60")))
    except ValueError:
        return 60.0


NOTEBOOK = any(cls.__name__ == "tqdm_notebook" for cls in auto_tqdm.__mro__)
"""Whether tqdm draws its bars as notebook widgets here."""

NUMA_NOTICE = "NUMA binding: Using "
"""The opening of vLLM's C++ notice of the NUMA policy its CPU worker binds memory with (module docstring)."""


def on_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal whose size is known (where a redrawn bar overwrites its line)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        return False


def plain_lines(stream: Any) -> bool:
    """Whether a bar on ``stream`` writes plain lines (:class:`PlainProgress`): neither a terminal nor a notebook."""
    return not NOTEBOOK and not on_terminal(stream)


class Nowhere:
    """A stream that drops what is written to it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


NOWHERE = Nowhere()


class PlainProgress(std_tqdm):
    """A tqdm bar that writes ``desc: n/total [elapsed<left, rate, postfix]`` lines instead of redrawing one (module
    docstring): every ``lines``-th of the total and at the end, or, without ``lines``, once a minute only."""

    LINE = "{n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
    OPEN_LINE = "{n_fmt} [{elapsed}, {rate_fmt}{postfix}]"

    def __init__(self, *args: Any, lines: int = 0, **kwargs: Any) -> None:
        self.lines = lines
        self._shown: float | None = None  # n at the last line written (None: none yet; the bar's initial counts)
        self._shown_at: float | None = None
        self.line_seconds = line_seconds()
        super().__init__(*args, **kwargs)

    def _due(self) -> bool:
        shown = self.initial if self._shown is None else self._shown
        if self.n <= shown:
            return False
        if self.total and self.lines:
            every = max(1, -(-int(self.total) // self.lines))
            if self.n >= self.total or self.n // every > shown // every:
                return True
        return self._time() - (self._shown_at or self.start_t) >= self.line_seconds

    def _write(self) -> None:
        desc = (self.desc or "").removesuffix(": ")  # set_description adds the colon
        meter = dict(
            self.format_dict,
            rate=None,
            ncols=None,
            prefix=desc,  # rate: the mean since the bar started
            bar_format=(desc and "{desc}: ") + (self.LINE if self.total else self.OPEN_LINE),
        )
        self.fp.write(self.format_meter(**meter) + "\n")
        self.fp.flush()
        self._shown, self._shown_at = self.n, self._time()

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is None and self._due():  # msg "": a clear, which a line never needs
            self._write()
        return True

    def clear(self, nolock: bool = False) -> None:
        pass  # nothing drawn to clear

    def moveto(self, n: int) -> None:
        pass  # no cursor to move: lines follow each other

    def reset(self, total: float | None = None) -> None:
        self._shown = self._shown_at = None
        super().reset(total)

    def close(self) -> None:
        if not getattr(self, "disable", True):
            if (self.lines or self._shown is not None) and self.n > (
                self.initial if self._shown is None else self._shown
            ):
                self._write()  # the end, or where a stopped run stopped
            self.fp = NOWHERE  # tqdm's own close ends a redrawn line: nothing of it here
        super().close()


def progress(*args: Any, lines: int = 0, **kwargs: Any) -> std_tqdm:
    """A tqdm bar (tqdm's arguments) that writes plain lines where its ``file`` (stderr by default) is no terminal:
    a :class:`PlainProgress` with ``lines`` (module docstring); on a terminal or in a notebook, tqdm's own bar."""
    if kwargs.get("disable") or not plain_lines(kwargs.get("file") or sys.stderr):
        return auto_tqdm(*args, **kwargs)
    return PlainProgress(*args, lines=lines, **kwargs)


@contextmanager
def native_lines_dropped(*texts: str) -> Iterator[None]:
    """Inside, file descriptor 2 (C++ code's warnings included) goes to a temporary file; after, its lines are
    written back to it but those holding one of ``texts``. Without a descriptor 2 nothing is held."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = memoryview(
                b"".join(
                    line
                    for line in held.read().splitlines(keepends=True)
                    if not any(text.encode() in line for text in texts)
                )
            )
            while kept:
                kept = kept[os.write(2, kept) :]
