"""A persistent pool of scoring processes with per-item and per-batch time limits.

math-verify's timeouts use SIGALRM, which only works in a process's main thread, and a timeout is
otherwise just ``False`` plus a log line. So scoring runs in worker processes (forkserver, never fork:
the trainer holds vLLM and torch threads) with integer timeouts inside each worker, a hard per-item limit
enforced by the parent (the worker is killed and replaced), and an outer deadline per batch. Nothing can
stall training, and nothing fails silently: every item carries a status. Items sharing a gold go to the
same worker, whose gold-parse cache then serves them.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Sequence

from arrol_pl.tasks.verify import score_answer

logger = logging.getLogger(__name__)


def _worker_main(conn: Connection, parse_timeout_s: int, verify_timeout_s: int) -> None:
    # Ctrl-C goes to the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    score_answer("1", "1", parse_timeout_s, verify_timeout_s)  # import and warm math-verify/sympy
    conn.send(("ready", os.getpid()))
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for key, answer, gold in chunk:
            correct, status = score_answer(answer, gold, parse_timeout_s, verify_timeout_s)
            conn.send((key, correct, status))


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
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if start_method == "fork":
            raise ValueError("start_method='fork' would copy the trainer's threads into workers; use forkserver or spawn")
        self.num_workers = num_workers
        self.parse_timeout_s = parse_timeout_s
        self.verify_timeout_s = verify_timeout_s
        # Worst case of one item: two parses and a few verify pairs, each bounded by SIGALRM.
        self.item_timeout_s = item_timeout_s or float(2 * parse_timeout_s + 4 * verify_timeout_s + 2)
        self._ctx = mp.get_context(start_method)
        self.replaced = 0
        self._workers = [self._start_worker() for _ in range(num_workers)]
        self._await_ready(startup_timeout_s)

    def _start_worker(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child, self.parse_timeout_s, self.verify_timeout_s),
            daemon=True,
            name="arrol-reward",
        )
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
                self._receive(starting[conn], {})

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
                key, correct, status = msg
                expected = w.pending.popleft()
                if key != expected:
                    raise RuntimeError(f"reward worker pid {w.process.pid} answered item {key}, expected {expected}: "
                                       "the pool's send/receive order is broken")
                results[key] = (bool(correct), status)
                w.last_progress = time.monotonic()
        except (EOFError, OSError):
            return False
        return True

    def score(self, items: Sequence[tuple[str, str]], deadline_s: float) -> list[tuple[bool, str]]:
        """``(correct, status)`` for each ``(answer, gold)``; returns within ~``deadline_s`` seconds."""
        n = len(items)
        if n == 0:
            return []
        end = time.monotonic() + deadline_s
        results: dict[int, tuple[bool, str]] = {}
        # Items sharing a gold go out together, so a worker's gold-parse cache serves them.
        todo: deque[int] = deque(sorted(range(n), key=lambda k: items[k][1]))
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
                        w.conn.send([(k, items[k][0], items[k][1]) for k in keys])
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
                    results[w.pending.popleft()] = (False, "timeout")
                    todo.extendleft(reversed(w.pending))
                    w.pending.clear()
                    self._replace(w)
        for w in list(self._workers):
            if w.pending:
                # Drain anything that arrived at the last moment, then stop the worker mid-item.
                self._receive(w, results)
                for k in w.pending:
                    results.setdefault(k, (False, "deadline"))
                w.pending.clear()
                self._replace(w)
        for k in todo:
            results.setdefault(k, (False, "deadline"))
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
                results[key] = (False, "error")
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
