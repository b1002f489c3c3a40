"""The verifiable reward R = 1[answer ≡ gold] (paper §3), scored with math-verify in worker processes.

Decisions:
- The answer is the content of the last *closed* ``\\boxed{...}`` in the completion (nested braces
  matched, escaped ``\\{ \\}`` ignored). A completion without one has no answer: reward 0, status
  ``no_answer``. Extracting it ourselves (rather than letting math-verify scan the whole text) keeps
  "no answer" distinct from "wrong answer" and makes two boxes mean "the last one counts" (math-verify
  alone parses two boxes as a set, which never equals a single gold).
- Gold and answer are wrapped in ``$…$`` before ``math_verify.parse`` (a raw ``\\sqrt{2}`` parses to
  nothing) and compared with ``verify(gold, answer)``; the order matters to math-verify.
- math-verify's timeouts use SIGALRM, which only works in a process's main thread, and a timeout is
  otherwise just ``False`` plus a log line. So scoring runs in a persistent pool of worker processes
  (forkserver, never fork: the trainer holds vLLM and torch threads) with integer timeouts inside
  each worker, a hard per-item limit enforced by the parent (the worker is killed and replaced), and
  an outer deadline per batch. Nothing can stall training, and nothing fails silently: every item
  carries a status and the batch carries counters; timeouts, deadline hits, crashes and unparseable
  golds are logged as a warning.
- Cheap first: identical (answer, gold) pairs in a batch are scored once, texts equal up to spaces
  (which LaTeX ignores in math mode) match without sympy, each worker parses a gold once (LRU), and
  items sharing a gold go to the same worker.
- Options: a format reward (the completion has a boxed answer) and DAPO's soft overlong penalty
  (Yu et al. 2025, eq. 13). :meth:`MathReward.answer_classes` groups sampled answers into
  math-verify equivalence classes for voting (maj@k).

Statuses: ``ok`` (scored; reward may be 0 or 1), ``no_answer``, ``parse_error`` (the boxed answer
parsed to no expression), ``gold_error`` (the gold did not parse), ``timeout`` (math-verify's own
timeout, or the per-item hard limit), ``deadline`` (the batch deadline passed before the item was
scored), ``error`` (a worker crashed twice on the item, or math-verify raised instead of comparing).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product
from multiprocessing.connection import Connection, wait
from typing import Sequence

import numpy as np

from arrol_pl.core.reward_shaping import overlong_penalty

logger = logging.getLogger(__name__)

STATUSES = ("ok", "no_answer", "parse_error", "gold_error", "timeout", "deadline", "error")
# Statuses that mean "the reward is 0 because scoring failed", not because the answer was wrong.
FAILURE_STATUSES = ("gold_error", "timeout", "deadline", "error")


# ---------------------------------------------------------------------------------------------
# Extraction and the per-item scorer (pure; runs inside the workers)
# ---------------------------------------------------------------------------------------------


def _boxed_content_at(text: str, start: int) -> str | None:
    """Content of the ``\\boxed`` command starting at ``text[start]``; None if it never closes."""
    i = start + len("\\boxed")
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        # ``\boxed 5`` — the argument is the next token.
        j = i
        while j < n and not text[j].isspace() and text[j] not in "$":
            j += 1
        return text[i:j] if j > i else None
    depth = 0
    j = i
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2  # an escaped character (``\{``, ``\}``, ``\\``) never opens or closes the argument
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last closed ``\\boxed{...}`` in ``text`` (stripped), or None.

    A truncated final box (``... \\boxed{4`` cut by the length limit) is skipped in favour of the
    last box that closes.
    """
    pos = text.rfind("\\boxed")
    while pos != -1:
        content = _boxed_content_at(text, pos)
        if content is not None:
            return content.strip()
        pos = text.rfind("\\boxed", 0, pos)
    return None


def has_boxed_answer(text: str) -> bool:
    """The format reward's condition: a closed, non-empty ``\\boxed{}``."""
    content = extract_boxed(text)
    return bool(content)


def as_latex_math(s: str) -> str:
    """Wrap a raw answer in ``$…$`` so math-verify's LaTeX extractor sees it (no-op if already math)."""
    s = s.strip()
    if s.startswith("$") or "\\boxed" in s or s.startswith("\\(") or s.startswith("\\["):
        return s
    return f"${s}$"


def _parse(latex: str, parse_timeout_s: int) -> tuple[list, str]:
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        return parse(as_latex_math(latex), parsing_timeout=parse_timeout_s, raise_on_error=True), "ok"
    except TimeoutException:
        return [], "timeout"
    except Exception:  # noqa: BLE001 — an unparseable string is a counted outcome, not a crash
        logger.debug("math-verify parse raised on %.200r", latex, exc_info=True)
        return [], "parse_error"


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, parse_timeout_s: int) -> tuple[list, str]:
    # A group's G rollouts share one gold, and parsing (ANTLR) costs 1-50 ms: parse each gold once.
    return _parse(gold, parse_timeout_s)


def _same_text(answer: str, gold: str) -> bool:
    def norm(s: str) -> str:
        return "".join(s.split()).strip("$")

    return norm(answer) == norm(gold)


def _is_expression(x) -> bool:
    # math-verify returns sympy objects for parsed math and the raw string as a fallback.
    return not isinstance(x, str)


def score_answer(answer: str, gold: str, parse_timeout_s: int = 3, verify_timeout_s: int = 3) -> tuple[bool, str]:
    """``(correct, status)`` for one extracted answer against one gold, in this process.

    Must run in a main thread (SIGALRM); the pool calls it inside its workers. Each (gold, answer)
    extraction pair is verified separately so a timeout on one pair is seen, not folded into False.
    """
    from math_verify import verify
    from math_verify.errors import TimeoutException

    if answer.strip() and _same_text(answer, gold):
        return True, "ok"  # the same text is the same answer; skip sympy
    gold_parsed, gold_status = _parse_gold(gold, parse_timeout_s)
    if gold_status == "timeout":
        return False, "timeout"
    if not any(_is_expression(g) for g in gold_parsed):
        return False, "gold_error"
    if not answer.strip():
        return False, "parse_error"
    pred_parsed, pred_status = _parse(answer, parse_timeout_s)
    if pred_status == "timeout":
        return False, "timeout"
    if not pred_parsed:
        return False, "parse_error"
    timed_out = False
    raised = 0
    for g, p in product(gold_parsed, pred_parsed):
        try:
            if verify(g, p, timeout_seconds=verify_timeout_s, raise_on_error=True):
                return True, "ok"
        except TimeoutException:
            timed_out = True
        except Exception:  # noqa: BLE001 — counted below; math-verify itself would return False here
            logger.debug("math-verify verify raised", exc_info=True)
            raised += 1
    if timed_out:
        return False, "timeout"
    if not any(_is_expression(p) for p in pred_parsed):
        # Only the raw-string fallback survived: the boxed answer is not parseable math.
        return False, "parse_error"
    if raised:
        return False, "error"  # math-verify could not compare (it never raised on the golden table)
    return False, "ok"


# ---------------------------------------------------------------------------------------------
# Worker pool
# ---------------------------------------------------------------------------------------------


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
                assert key == expected, f"worker answered {key}, expected {expected}"
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


# ---------------------------------------------------------------------------------------------
# The reward as the trainer sees it
# ---------------------------------------------------------------------------------------------


@dataclass
class RewardConfig:
    """How completions are scored. Timeouts are integers: math-verify ignores float timeouts silently."""

    num_workers: int | None = None
    """Scoring processes; None → all cores; 0 → in this process (main thread only, no hard limits)."""
    parse_timeout_s: int = 3
    """math-verify's per-parse SIGALRM timeout inside a worker."""
    verify_timeout_s: int = 3
    """math-verify's per-comparison SIGALRM timeout inside a worker."""
    item_timeout_s: float | None = None
    """Hard limit per item, enforced by killing the worker; None → 2·parse + 4·verify + 2 s."""
    batch_deadline_s: float = 120.0
    """Outer deadline per batch; unscored items get status ``deadline`` and reward 0."""
    format_weight: float = 0.0
    """Added to the reward when the completion has a boxed answer (0 disables the format reward)."""
    overlong_max_length: int | None = None
    """DAPO's L_max in tokens; None disables the overlong penalty."""
    overlong_cache_length: int = 0
    """DAPO's L_cache: the penalty ramps from 0 to -1 over the last this-many tokens."""
    overlong_penalty_factor: float = 1.0
    """Scale of the overlong penalty."""
    start_method: str = "forkserver"
    """Worker start method: forkserver or spawn (fork is refused)."""

    def __post_init__(self) -> None:
        for name in ("parse_timeout_s", "verify_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (math-verify drops float timeouts), got {value!r}")
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 or None, got {self.num_workers}")
        if self.batch_deadline_s <= 0:
            raise ValueError(f"batch_deadline_s must be > 0, got {self.batch_deadline_s}")
        if self.item_timeout_s is not None and self.item_timeout_s <= 0:
            raise ValueError(f"item_timeout_s must be > 0, got {self.item_timeout_s}")
        if self.start_method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {self.start_method!r}")
        if self.overlong_max_length is not None and not 0 <= self.overlong_cache_length <= self.overlong_max_length:
            raise ValueError(
                f"overlong_cache_length must be in [0, overlong_max_length={self.overlong_max_length}], "
                f"got {self.overlong_cache_length}"
            )


@dataclass
class RewardResult:
    """A scored batch of N completions."""

    rewards: np.ndarray
    """``(N,)`` float32: correctness + format reward + overlong penalty."""
    correct: np.ndarray
    """``(N,)`` bool: R = 1[answer ≡ gold], the label the quality head learns."""
    has_answer: np.ndarray
    """``(N,)`` bool: a closed, non-empty ``\\boxed{}`` was found."""
    answers: list[str | None]
    """The extracted boxed answers (None where there was none)."""
    status: list[str]
    """Per-item status, one of :data:`STATUSES`."""
    counts: dict[str, int]
    """Items per status (every status present, zeros included)."""
    seconds: float
    """Wall time of the batch."""

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else 0.0

    @property
    def n_failed(self) -> int:
        """Items whose reward is 0 because scoring failed (timeouts, deadline, crashes, bad golds)."""
        return sum(self.counts[s] for s in FAILURE_STATUSES)

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Scalars for the logger: accuracy, mean reward, and the fraction of each status."""
        n = max(1, len(self.status))
        out = {f"{prefix}accuracy": self.accuracy, f"{prefix}mean": float(self.rewards.sum()) / n}
        out.update({f"{prefix}frac_{s}": self.counts[s] / n for s in STATUSES if s != "ok"})
        out[f"{prefix}seconds"] = self.seconds
        return out


class MathReward:
    """Scores completions against gold answers; owns the worker pool (created on first use)."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config or RewardConfig()
        self._pool: RewardPool | None = None

    @property
    def num_workers(self) -> int:
        n = self.config.num_workers
        return (os.cpu_count() or 1) if n is None else n

    def start(self) -> None:
        """Start the workers now (otherwise the first :meth:`score` does)."""
        if self._pool is None and self.num_workers > 0:
            c = self.config
            self._pool = RewardPool(
                self.num_workers, c.parse_timeout_s, c.verify_timeout_s, c.item_timeout_s, c.start_method
            )

    def score(
        self,
        completions: Sequence[str],
        golds: Sequence[str],
        lengths: Sequence[int] | np.ndarray | None = None,
        deadline_s: float | None = None,
    ) -> RewardResult:
        """Score ``completions[i]`` against ``golds[i]``; ``lengths`` (tokens) feed the overlong penalty."""
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} golds")
        c = self.config
        t0 = time.perf_counter()
        n = len(completions)
        answers = [extract_boxed(text) for text in completions]
        status = ["no_answer"] * n
        correct = np.zeros(n, dtype=bool)
        # Identical (answer, gold) pairs are common within a GRPO group: score each once.
        unique: dict[tuple[str, str], int] = {}
        where: list[int] = [-1] * n
        for i, (answer, gold) in enumerate(zip(answers, golds)):
            if answer is not None:
                where[i] = unique.setdefault((answer, str(gold)), len(unique))
        pairs = list(unique)
        scored = self._score_pairs(pairs, c.batch_deadline_s if deadline_s is None else deadline_s)
        for i in range(n):
            if where[i] >= 0:
                correct[i], status[i] = scored[where[i]]
        has_answer = np.array([bool(a) for a in answers], dtype=bool)
        rewards = correct.astype(np.float32)
        if c.format_weight:
            rewards += np.float32(c.format_weight) * has_answer
        if c.overlong_max_length is not None:
            if lengths is None:
                raise ValueError("overlong_max_length is set: pass the completions' token lengths")
            penalty = overlong_penalty(lengths, c.overlong_max_length, c.overlong_cache_length)
            rewards += (c.overlong_penalty_factor * penalty).astype(np.float32)
        counts = {s: 0 for s in STATUSES}
        for s in status:
            counts[s] += 1
        result = RewardResult(rewards, correct, has_answer, answers, status, counts, time.perf_counter() - t0)
        if result.n_failed:
            logger.warning(
                "reward: %d of %d items scored 0 because scoring failed (%s); see RewardResult.status",
                result.n_failed,
                n,
                ", ".join(f"{s}={counts[s]}" for s in FAILURE_STATUSES if counts[s]),
            )
        return result

    def answer_classes(
        self, answer_lists: Sequence[Sequence[str | None]], deadline_s: float | None = None
    ) -> list[list[int | None]]:
        """Equivalence classes of each problem's sampled answers, for voting (maj@k, weighted votes).

        ``answer_lists[i]``: the extracted answers of problem i's k samples (None: no answer). Returns,
        per problem, a class id per sample (the index of the class's first answer; None for no
        answer), so equal ids mean math-verify found the answers equivalent. Distinct answers are
        compared pairwise in the workers, the later one as gold; a pair that times out counts as
        different and is logged with the batch.
        """
        pairs: dict[tuple[str, str], int] = {}
        distinct_per_problem: list[list[str]] = []
        for answers in answer_lists:
            distinct = list(dict.fromkeys(a.strip() for a in answers if a is not None and a.strip()))
            distinct_per_problem.append(distinct)
            for i, a in enumerate(distinct):
                for b in distinct[i + 1 :]:
                    pairs.setdefault((a, b), len(pairs))
        scored = self._score_pairs(list(pairs), self.config.batch_deadline_s if deadline_s is None else deadline_s)
        failed = sum(status in FAILURE_STATUSES for _, status in scored)
        if failed:
            logger.warning("answer_classes: %d of %d comparisons failed (counted as different answers)", failed, len(scored))
        out = []
        for answers, distinct in zip(answer_lists, distinct_per_problem):
            root = list(range(len(distinct)))

            def find(i: int) -> int:
                while root[i] != i:
                    root[i] = root[root[i]]
                    i = root[i]
                return i

            for i, a in enumerate(distinct):
                for j in range(i + 1, len(distinct)):
                    if scored[pairs[(a, distinct[j])]][0]:
                        ri, rj = find(i), find(j)
                        root[max(ri, rj)] = min(ri, rj)
            index = {a: i for i, a in enumerate(distinct)}
            out.append([None if a is None or not a.strip() else find(index[a.strip()]) for a in answers])
        return out

    def _score_pairs(self, pairs: list[tuple[str, str]], deadline_s: float) -> list[tuple[bool, str]]:
        if not pairs:
            return []
        c = self.config
        if self.num_workers == 0:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("num_workers=0 scores in-process with SIGALRM: call it from the main thread")
            return [score_answer(a, g, c.parse_timeout_s, c.verify_timeout_s) for a, g in pairs]
        self.start()
        assert self._pool is not None
        return self._pool.score(pairs, deadline_s)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the scoring workers (empty before :meth:`start` or in-process)."""
        return self._pool.worker_pids if self._pool is not None else []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> "MathReward":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
