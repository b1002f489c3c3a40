"""The verifiable reward R = 1[answer ≡ gold] (paper §3) as the trainer sees it: :class:`MathReward`.

Decisions:
- The answer is the last closed ``\\boxed{}`` (:mod:`.extraction`); a completion without one gets reward 0,
  status ``no_answer``. Each (answer, gold) pair is checked by math-verify (:mod:`.verify`) inside a
  pool of worker processes with hard time limits (:mod:`.pool`); identical pairs in a batch are scored
  once. Timeouts, deadline hits, crashes and unparseable golds are counted and logged as a warning.
- Options: a format reward (the completion has a boxed answer) and DAPO's soft overlong penalty
  (Yu et al. 2025, eq. 13; :func:`~arrol_pl.core.reward_shaping.overlong_penalty`).
  :meth:`MathReward.answer_classes` groups sampled answers into math-verify equivalence classes for
  voting (maj@k).
- The worker pool, its start and its close are :class:`PooledReward`'s, which a reward function of the user's
  own shares (:class:`~arrol_pl.tasks.reward_function.FunctionReward`): both score with
  ``score(completions, golds, lengths, deadline_s, prompts)`` into a :class:`RewardResult`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from arrol_pl.core.reward_shaping import overlong_penalty
from arrol_pl.tasks.extraction import extract_boxed
from arrol_pl.tasks.pool import RewardPool
from arrol_pl.tasks.verify import FAILURE_STATUSES, STATUSES, score_answer

logger = logging.getLogger(__name__)


def default_workers() -> int:
    """Scoring processes of one training rank: the CPUs this process may use (its affinity; all cores where the
    platform has none) divided by the training ranks on this node (``LOCAL_WORLD_SIZE``, set by torchrun; 1
    without it), at least 1. Each rank owns a pool: all cores in every rank of an 8-GPU node of 128 cores would
    start about 1,024 workers."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


@dataclass
class RewardConfig:
    """How completions are scored. Timeouts are integers: math-verify ignores float timeouts silently."""

    num_workers: int | None = None
    """Scoring processes; None → :func:`default_workers` (this process's CPUs, shared by the ranks on its node);
    0 → in this process (math-verify: main thread only; no hard limits)."""
    parse_timeout_s: int = 3
    """math-verify's per-parse SIGALRM timeout inside a worker."""
    verify_timeout_s: int = 3
    """math-verify's per-comparison SIGALRM timeout inside a worker."""
    item_timeout_s: float | None = None
    """Hard limit per item, enforced by killing the worker; None → 2·parse + 4·verify + 2 s."""
    batch_deadline_s: float = 120.0
    """Outer deadline per batch; unscored items get status ``deadline`` and reward 0."""
    format_weight: float = 0.0
    """Added to the reward when the completion has a boxed answer (0 disables the format reward; math-verify's
    reward only)."""
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
    """``(N,)`` bool: R = 1[answer ≡ gold], the label the quality head learns (a reward function's: reward > 0.5)."""
    has_answer: np.ndarray
    """``(N,)`` bool: a closed, non-empty ``\\boxed{}`` was found (a reward function's: it returned a reward)."""
    answers: list[str | None]
    """The extracted boxed answers (None where there was none; all None for a reward function)."""
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

    def subset(self, index: Sequence[int]) -> "RewardResult":
        """The items at ``index``, in that order (the seconds stay the batch's)."""
        index = list(index)
        status = [self.status[i] for i in index]
        counts = {s: status.count(s) for s in STATUSES}
        return RewardResult(
            self.rewards[index],
            self.correct[index],
            self.has_answer[index],
            [self.answers[i] for i in index],
            status,
            counts,
            self.seconds,
        )

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Scalars for the logger: accuracy, mean reward, and the fraction of each status."""
        n = max(1, len(self.status))
        out = {f"{prefix}accuracy": self.accuracy, f"{prefix}mean": float(self.rewards.sum()) / n}
        out.update({f"{prefix}frac_{s}": self.counts[s] / n for s in STATUSES if s != "ok"})
        out[f"{prefix}seconds"] = self.seconds
        return out


def counted(status: Sequence[str]) -> dict[str, int]:
    """Items per status, every status present (zeros included)."""
    counts = {s: 0 for s in STATUSES}
    for s in status:
        counts[s] += 1
    return counts


class PooledReward:
    """A reward that scores in a pool of worker processes (created on first use) or, with no workers, in this
    process; a subclass says what a worker runs (:attr:`function`: None for math-verify), what one item is, and
    how a batch becomes a :class:`RewardResult`."""

    function: str | None = None
    """The import path of the function the workers run (None: math-verify)."""
    search_dir: str | None = None
    """A directory the workers import :attr:`function` from besides ``sys.path``."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config or RewardConfig()
        self._pool: RewardPool | None = None

    @property
    def num_workers(self) -> int:
        n = self.config.num_workers
        return default_workers() if n is None else n

    def start(self) -> None:
        """Start the workers now (otherwise the first :meth:`score` does)."""
        if self._pool is None and self.num_workers > 0:
            c = self.config
            self._pool = RewardPool(
                self.num_workers,
                c.parse_timeout_s,
                c.verify_timeout_s,
                c.item_timeout_s,
                c.start_method,
                function=self.function,
                search_dir=self.search_dir,
            )

    def _score_items(self, items: list[tuple[str, ...]], deadline_s: float | None) -> list[tuple]:
        """Each item's ``(value, status, note)`` (:data:`~arrol_pl.tasks.pool.Outcome`) from the workers, or from
        :meth:`_score_here` without workers."""
        if not items:
            return []
        if self.num_workers == 0:
            return self._score_here(items)
        self.start()
        assert self._pool is not None
        return self._pool.score(items, self.config.batch_deadline_s if deadline_s is None else deadline_s)

    def _score_here(self, items: list[tuple[str, ...]]) -> list[tuple]:
        """The items' outcomes computed in this process."""
        raise NotImplementedError

    def _shaped(self, rewards: np.ndarray, lengths: Sequence[int] | np.ndarray | None) -> np.ndarray:
        """``rewards`` plus DAPO's overlong penalty when it is configured."""
        c = self.config
        if c.overlong_max_length is None:
            return rewards
        if lengths is None:
            raise ValueError("overlong_max_length is set: pass the completions' token lengths")
        penalty = overlong_penalty(lengths, c.overlong_max_length, c.overlong_cache_length)
        return rewards + (c.overlong_penalty_factor * penalty).astype(np.float32)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the scoring workers (empty before :meth:`start` or in-process)."""
        return self._pool.worker_pids if self._pool is not None else []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def warn_failures(log: logging.Logger, label: str, result: RewardResult, tail: str) -> None:
    """Warn on ``log`` that ``result``'s failed items scored 0, counted by failure status, then ``tail``."""
    if result.n_failed:
        counts = result.counts
        log.warning(
            "%s: %d of %d items scored 0 because scoring failed (%s); %s",
            label,
            result.n_failed,
            len(result.status),
            ", ".join(f"{s}={counts[s]}" for s in FAILURE_STATUSES if counts[s]),
            tail,
        )


class MathReward(PooledReward):
    """Scores completions against gold answers with math-verify."""

    def score(
        self,
        completions: Sequence[str],
        golds: Sequence[str],
        lengths: Sequence[int] | np.ndarray | None = None,
        deadline_s: float | None = None,
        prompts: Sequence[str] | None = None,
    ) -> RewardResult:
        """Score ``completions[i]`` against ``golds[i]``; ``lengths`` (tokens) feed the overlong penalty; ``prompts``
        are not read (a reward function's are)."""
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
        scored = self._score_items(list(unique), deadline_s)
        for i in range(n):
            if where[i] >= 0:
                correct[i], status[i] = bool(scored[where[i]][0]), scored[where[i]][1]
        has_answer = np.array([bool(a) for a in answers], dtype=bool)
        rewards = correct.astype(np.float32)
        if c.format_weight:
            rewards += np.float32(c.format_weight) * has_answer
        rewards = self._shaped(rewards, lengths)
        counts = counted(status)
        result = RewardResult(rewards, correct, has_answer, answers, status, counts, time.perf_counter() - t0)
        warn_failures(logger, "reward", result, "see RewardResult.status")
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
        scored = self._score_items(list(pairs), deadline_s)
        failed = sum(status in FAILURE_STATUSES for _, status, _ in scored)
        if failed:
            logger.warning(
                "answer_classes: %d of %d comparisons failed (counted as different answers)", failed, len(scored)
            )
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

    def _score_here(self, pairs: list[tuple[str, ...]]) -> list[tuple]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("num_workers=0 scores in-process with SIGALRM: call it from the main thread")
        c = self.config
        return [(*score_answer(a, g, c.parse_timeout_s, c.verify_timeout_s), "") for a, g in pairs]
