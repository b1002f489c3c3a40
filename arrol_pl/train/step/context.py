"""What every phase of one training step reads besides its data (:class:`StepContext`), and the timer each phase
times itself on (:class:`PhaseTimer`)."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from arrol_pl.train.config.sections import AlgoConfig
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync


class PhaseTimer:
    """Accumulates wall seconds per named phase (Table 5's decomposition): ``with timer("update"): ...`` inside
    the phase; a phase run several times in a step (refill's rounds, PPO mini-batches) adds up. Each phase is one
    of :attr:`PHASES`, the history's ``time/<phase>`` keys."""

    PHASES = (
        "screen",
        "generation",
        "reward",
        "advantage",
        "old_logprob",
        "ref_logprob",
        "update",
        "head",
        "optimizer",
        "sync",
    )
    """Every phase a step times, in the order a step runs them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if name not in self.PHASES:
            raise ValueError(f"no step phase is named {name!r}; the phases are {self.PHASES}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


@dataclass(frozen=True)
class StepContext:
    """One training step as its phases see it: ``step`` (the step's index, ``global_step``), ``algo`` (the run's
    algorithm settings), ``timer`` (the step's :class:`PhaseTimer`), ``ranks`` (the ranks the step spans; one alone
    by default) and ``pad_id`` (the tokenizer's padding token)."""

    step: int
    algo: AlgoConfig
    timer: PhaseTimer = field(default_factory=PhaseTimer)
    ranks: RankSync = ONE_RANK
    pad_id: int = 0
    started: float = field(default_factory=time.perf_counter)
    """``time.perf_counter()`` when the step began (``time/step``)."""
