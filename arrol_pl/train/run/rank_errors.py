"""What ends a collective among ranks, in one line: a wait past ``trainer.rank_timeout_minutes`` (:class:`RankTimeout`,
:func:`rank_wait`), a peer gone (:func:`peer_lost`), or torchrun closing the group after another rank failed
(:func:`group_closing`); and which of them an exception out of a rank's run is (:func:`failure_kind`,
:func:`failure_line`), for the record torchrun reads back (:mod:`arrol_pl.train.run.ranks`).

Nothing here imports torch at module level: the launcher and the signal handlers read it too.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from pathlib import Path
from typing import Iterator

CLOSING_ENV = "ARROL_RANKS_CLOSING"
"""The marker file torchrun's wrapper writes before it sends SIGTERM to the ranks left after one failed."""
LOST_PEER = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "socket closed",
    "connection refused",
    "nccl communicator was aborted",
    "ncclremoteerror",
)
"""What gloo and NCCL say when a collective's peer is gone (lower case)."""
GLOO_NOISE = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*|\s*This is typically caused by .*$")
"""gloo's source location before its message, and the advice after it."""
TIMEOUT_MINUTES: list[float] = []
"""``trainer.rank_timeout_minutes`` of the process group this process started
(:func:`~arrol_pl.train.run.world.init_launcher_world`)."""


def group_closing() -> bool:
    """Whether torchrun is closing this rank's group because another rank failed (the wrapper's marker)."""
    marker = os.environ.get(CLOSING_ENV)
    return bool(marker) and Path(marker).exists()


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def first_line(exc: BaseException) -> str:
    """``exc``'s message, its first line, without gloo's source location and advice."""
    return GLOO_NOISE.sub("", (str(exc).strip().splitlines() or [type(exc).__name__])[0])


def collective_of(exc: BaseException) -> str | None:
    """The collective ``exc`` (or an exception in its chain) came from, as the run called it (``barrier``,
    ``all_gather_object``), with the run's line that called it; None: raised outside ``torch.distributed``."""
    c10d = os.path.join("distributed", "distributed_c10d.py")
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        calls = [i for i, f in enumerate(frames) if f.filename.endswith(c10d)]
        if calls:
            here = f"{os.sep}arrol_pl{os.sep}"
            caller = next((f for f in reversed(frames[: calls[0]]) if here in f.filename), None)
            where = f" at {caller.filename.split(here)[-1]}:{caller.lineno}" if caller else ""
            return f"{frames[calls[0]].name}{where}"
    return None


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective that found a peer gone (a closed connection, NCCL's remote error)."""
    return collective_of(exc) is not None and any(
        mark in str(link).lower() for link in _chain(exc) for mark in LOST_PEER
    )


def timeout_setting(minutes: float | None = None) -> str:
    """The override that sets the rank timeout, with ``minutes`` (default: this process group's) as its value."""
    minutes = minutes if minutes is not None else (TIMEOUT_MINUTES[-1] if TIMEOUT_MINUTES else None)
    return "trainer.rank_timeout_minutes" + ("" if minutes is None else f"={minutes:g}")


class RankTimeout(RuntimeError):
    """A rank waited longer than the process group's timeout (``trainer.rank_timeout_minutes``) for the others."""


@contextlib.contextmanager
def rank_wait(what: str) -> Iterator[None]:
    """Collectives that wait for ``what`` (in words: "rank 0 to prepare the policy"): a timeout among them is
    raised as :class:`RankTimeout`, one line naming the collective and ``trainer.rank_timeout_minutes=<its value>``.
    gloo raises the timeout in the waiting rank; NCCL's watchdog aborts the process after the same timeout instead,
    and logs it itself."""
    try:
        yield
    except RuntimeError as exc:
        message = str(exc).lower()
        if "timed out" not in message and "timeout" not in message:
            raise
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else os.environ.get("RANK", "?")
        raise RankTimeout(
            f"rank {rank} waited longer than {timeout_setting()} for {what} "
            f"(in {collective_of(exc) or 'a collective'}); raise it if that work takes longer "
            f"({first_line(exc)})"
        ) from exc


def failure_kind(exc: BaseException) -> str:
    """How an exception out of a rank's run ended it: ``lost`` (a peer gone, or torchrun closing the group: the
    consequence of another rank's end), ``timeout`` (a collective past ``trainer.rank_timeout_minutes``) or
    ``error`` (the rank's own)."""
    if group_closing() or peer_lost(exc):
        return "lost"
    timed_out = any("timed out" in str(link).lower() or "timeout" in str(link).lower() for link in _chain(exc))
    if isinstance(exc, RankTimeout) or (timed_out and collective_of(exc) is not None):
        return "timeout"
    return "error"


def failure_line(exc: BaseException, kind: str) -> str:
    """One line for how the rank's run ended (``kind``: :func:`failure_kind`'s, or one the rank printed itself)."""
    rank = os.environ.get("RANK", "?")
    if kind == "timeout" and not isinstance(exc, RankTimeout):
        return (
            f"rank {rank}: {collective_of(exc)} waited longer than {timeout_setting()} for the other ranks; raise "
            f"it if their work takes longer ({first_line(exc)})"
        )
    if kind == "lost" and peer_lost(exc):
        return f"rank {rank} stopped: {collective_of(exc)} lost another rank ({first_line(exc)})"
    if kind == "lost":
        return f"rank {rank} stopped: torchrun ended it after another rank failed ({first_line(exc)})"
    if kind == "error":
        return f"{type(exc).__name__}: {first_line(exc)}"
    return first_line(exc)
