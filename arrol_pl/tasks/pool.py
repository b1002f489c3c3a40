"""A persistent pool of scoring processes with per-item and per-batch time limits.

math-verify's timeouts use SIGALRM, which only works in a process's main thread, and a timeout is
otherwise just ``False`` plus a log line. So scoring runs in worker processes (forkserver, never fork:
the trainer holds vLLM and torch threads) with integer timeouts inside each worker, a hard per-item limit
enforced by the parent (the worker is killed and replaced), and an outer deadline per batch. Nothing can
stall training, and nothing fails silently: every item carries a status. Items sharing a gold go to the
same worker, whose gold-parse cache then serves them.

A worker starts from the modules it needs and nothing of the calling program's: multiprocessing would run a
script's ``__main__`` again in each spawned or forkserver child (as ``__mp_main__``), which for an entry point that
imports torch at its top costs each worker seconds of CPU and hundreds of MB, on every start and every replacement;
the pool starts its workers without it (:func:`_without_main`), and the forkserver imports math-verify once for all
of them.

The same workers run a reward function of the user's own (``reward.function``,
:mod:`arrol_pl.tasks.user_function`): each worker imports it by its path when it starts, so a function that
cannot be imported there fails the pool's start with the worker's message, and the same time limits hold.
Every item's outcome is ``(value, status, note)``: math-verify's ``correct`` or the function's reward, the status,
and what went wrong when the function raised (empty otherwise).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from arrol_pl.tasks.verify import score_answer

logger = logging.getLogger(__name__)

Outcome = tuple[Any, str, str]
"""One item's ``(value, status, note)``: math-verify's ``correct`` (bool) or a function's reward (float), one of
:data:`~arrol_pl.tasks.verify.STATUSES`, and the function's error when it raised (empty otherwise)."""


def item_scorer(
    function: str | None, search_dir: str | None, parse_timeout_s: int, verify_timeout_s: int
) -> Callable[..., Outcome]:
    """What a worker calls per item: ``score(answer, gold)`` with math-verify (``function`` None, warmed here), or
    ``score(prompt, completion, answer)`` with the function at import path ``function``."""
    if function is None:
        score_answer("1", "1", parse_timeout_s, verify_timeout_s)  # import and warm math-verify/sympy
        return lambda answer, gold: (*score_answer(answer, gold, parse_timeout_s, verify_timeout_s), "")
    from arrol_pl.tasks.user_function import call_reward, resolve_reward_function

    fn = resolve_reward_function(function, search_dir)
    return lambda prompt, completion, answer: call_reward(fn, prompt, completion, answer)


def _worker_main(
    conn: Connection,
    parse_timeout_s: int,
    verify_timeout_s: int,
    function: str | None = None,
    search_dir: str | None = None,
) -> None:
    # Ctrl-C goes to the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        score = item_scorer(function, search_dir, parse_timeout_s, verify_timeout_s)
    except Exception as exc:  # noqa: BLE001 — sent to the parent, which raises it with the pool's context
        conn.send(("failed", str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for key, *args in chunk:
            conn.send((key, *score(*args)))


WORKER_PRELOAD = ("arrol_pl.tasks.pool",)
"""What the forkserver imports once, before it forks the workers (a forkserver started by someone else keeps its own
list): this module, and :data:`MATH_VERIFY_PRELOAD` for math-verify's reward."""
MATH_VERIFY_PRELOAD = ("math_verify",)
"""math-verify's imports: half a second each worker skips."""


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """While a worker starts, the calling program's ``__main__`` shows neither its script path nor its module name, so
    that multiprocessing gives the child nothing of it to run again: the worker's target lives in this module, a
    reward function is imported by its path inside the worker. Put back as it was when the block ends."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


@dataclass
class _Worker:
    process: mp.process.BaseProcess
    conn: Connection
    ready: bool = False
    pending: deque = field(default_factory=deque)
    last_progress: float = 0.0


class RewardPool:
    """A persistent pool of scoring processes with per-item and per-batch time limits.

    Not thread-safe: call :meth:`score` from one thread (any thread — the signals live in the
    workers). Workers are daemons, so they die with the parent; :meth:`close` stops them early.
    """

    def __init__(
        self,
        num_workers: int,
        parse_timeout_s: int = 3,
        verify_timeout_s: int = 3,
        item_timeout_s: float | None = None,
        start_method: str = "forkserver",
        startup_timeout_s: float = 120.0,
        function: str | None = None,
        search_dir: str | None = None,
    ) -> None:
        """``function``: a reward function's import path (None: math-verify); ``search_dir``: a directory the
        workers import it from besides ``sys.path`` (:func:`~arrol_pl.tasks.user_function.resolve_reward_function`)."""
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if start_method == "fork":
            raise ValueError(
                "start_method='fork' would copy the trainer's threads into workers; use forkserver or spawn"
            )
        self.num_workers = num_workers
        self.parse_timeout_s = parse_timeout_s
        self.verify_timeout_s = verify_timeout_s
        self.function, self.search_dir = function, search_dir
        # Worst case of one item: two parses and a few verify pairs, each bounded by SIGALRM.
        self.item_timeout_s = item_timeout_s or float(2 * parse_timeout_s + 4 * verify_timeout_s + 2)
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload([*WORKER_PRELOAD, *(MATH_VERIFY_PRELOAD if function is None else ())])
        self.replaced = 0
        self._workers = [self._start_worker() for _ in range(num_workers)]
        try:
            self._await_ready(startup_timeout_s)
        except BaseException:
            self.close()
            raise

    def _start_worker(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child, self.parse_timeout_s, self.verify_timeout_s, self.function, self.search_dir),
            daemon=True,
            name="arrol-reward",
        )
        with _without_main():
            process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def _await_ready(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not all(w.ready for w in self._workers):
            starting = {w.conn: w for w in self._workers if not w.ready}
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"reward workers did not start within {timeout_s:.0f} s")
            for conn in wait(list(starting), timeout=left):
                w = starting[conn]
                if not self._receive(w, {}):
                    w.process.join(timeout=5)
                    raise RuntimeError(
                        f"reward worker pid {w.process.pid} exited while starting (exit code {w.process.exitcode})"
                    )

    def _replace(self, w: _Worker) -> None:
        w.process.kill()
        w.process.join(timeout=5)
        w.conn.close()
        fresh = self._start_worker()
        self._workers[self._workers.index(w)] = fresh
        self.replaced += 1

    def _receive(self, w: _Worker, results: dict) -> bool:
        """Drain ``w``'s messages into ``results``; False if the worker died."""
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "ready":
                    w.ready = True
                    continue
                if msg[0] == "failed":
                    what = f"reward function {self.function}" if self.function else "math-verify"
                    raise RuntimeError(f"a reward worker could not set up {what}: {msg[1]}")
                key, value, status, note = msg
                expected = w.pending.popleft()
                if key != expected:
                    raise RuntimeError(
                        f"reward worker pid {w.process.pid} answered item {key}, expected {expected}: "
                        "the pool's send/receive order is broken"
                    )
                results[key] = (value, status, note)
                w.last_progress = time.monotonic()
        except (EOFError, OSError):
            return False
        return True

    def score(self, items: Sequence[tuple[str, ...]], deadline_s: float) -> list[Outcome]:
        """An :data:`Outcome` for each item: ``(answer, gold)`` for math-verify, ``(prompt, completion, answer)`` for a
        function (the gold last in both); returns within ~``deadline_s`` seconds. An item the pool gave up on is
        ``(False, status, "")``."""
        n = len(items)
        if n == 0:
            return []
        end = time.monotonic() + deadline_s
        results: dict[int, Outcome] = {}
        # Items sharing a gold go out together, so a worker's gold-parse cache serves them.
        todo: deque[int] = deque(sorted(range(n), key=lambda k: items[k][-1]))
        # Small chunks balance load (slow items exist) without paying a round trip per item.
        chunk_size = max(1, min(32, math.ceil(n / (4 * self.num_workers))))
        crashes: dict[int, int] = {}
        while len(results) < n:
            for w in list(self._workers):
                if w.ready and not w.pending and todo:
                    if not w.process.is_alive():
                        self._handle_crash(w, results, todo, crashes)
                        continue
                    keys = [todo.popleft() for _ in range(min(chunk_size, len(todo)))]
                    w.pending.extend(keys)
                    w.last_progress = time.monotonic()
                    try:
                        w.conn.send([(k, *items[k]) for k in keys])
                    except (BrokenPipeError, OSError):
                        self._handle_crash(w, results, todo, crashes)
            now = time.monotonic()
            if now >= end:
                break
            busy = [w for w in self._workers if w.pending]
            listening = busy + [w for w in self._workers if not w.ready]
            wake = min([end] + [w.last_progress + self.item_timeout_s for w in busy])
            by_conn = {w.conn: w for w in listening}
            for conn in wait(list(by_conn), timeout=max(0.0, wake - now)):
                w = by_conn[conn]
                if not self._receive(w, results):
                    self._handle_crash(w, results, todo, crashes)
            now = time.monotonic()
            for w in list(self._workers):
                if w.pending and now - w.last_progress > self.item_timeout_s:
                    results[w.pending.popleft()] = (False, "timeout", "")
                    todo.extendleft(reversed(w.pending))
                    w.pending.clear()
                    self._replace(w)
        for w in list(self._workers):
            if w.pending:
                # Drain anything that arrived at the last moment, then stop the worker mid-item.
                self._receive(w, results)
                for k in w.pending:
                    results.setdefault(k, (False, "deadline", ""))
                w.pending.clear()
                self._replace(w)
        for k in todo:
            results.setdefault(k, (False, "deadline", ""))
        return [results[k] for k in range(n)]

    def _handle_crash(self, w: _Worker, results: dict, todo: deque, crashes: dict[int, int]) -> None:
        """Replace a dead worker. Its current item is retried once (the death may have had another
        cause); an item that was in flight at two deaths is scored ``error``."""
        pid = w.process.pid
        self._replace(w)
        logger.warning("reward worker pid %s died (exit code %s); replaced", pid, w.process.exitcode)
        if w.pending:
            key = w.pending.popleft()
            crashes[key] = crashes.get(key, 0) + 1
            if crashes[key] >= 2:
                results[key] = (False, "error", "")
            else:
                w.pending.appendleft(key)
            todo.extendleft(reversed(w.pending))
            w.pending.clear()

    @property
    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass  # already gone; the join/kill below handles it
        for w in self._workers:
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=2)
            w.conn.close()
        self._workers = []
