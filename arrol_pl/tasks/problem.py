"""``Problem(id, prompt, answer)``, the :class:`ProblemSet` a source loads into (with the rows it skipped and why)
and the two errors of loading: a dataset that cannot be loaded, a row that cannot become a Problem.

The rest of loading lives beside it: :mod:`arrol_pl.tasks.prompts` (the paper's prompt template, how a prompt
becomes the model's input), :mod:`arrol_pl.tasks.sources` (reading rows from files and the hub) and
:mod:`arrol_pl.tasks.rows` (rows → Problems, the dataset adapters' shared machinery).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: the prompt shown to the policy and the gold answer it is scored against."""

    id: str
    prompt: str
    answer: str
    solution: str | None = None
    """A worked solution ending in ``\\boxed{answer}``, when the dataset has one (the tiny policy's warm start)."""


@dataclass(frozen=True)
class SkippedRow:
    """A row that became no Problem: its id (or ``file:line`` without one), why, and the counted kind."""

    id: str
    reason: str
    kind: str = "bad_row"


@dataclass
class ProblemSet:
    """Problems loaded from one source, plus the rows that were skipped and why."""

    name: str
    source: str
    problems: list[Problem]
    skipped: list[SkippedRow] = field(default_factory=list)
    rows: int | None = None
    """Rows read from the source (None for generated tasks)."""

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self):
        return iter(self.problems)

    def __getitem__(self, i):
        return self.problems[i]

    def skip_counts(self) -> dict[str, int]:
        """Skipped rows per kind (``{"invalid_json": 1, "missing_answer": 3}``)."""
        return dict(sorted(Counter(s.kind for s in self.skipped).items()))

    def report(self) -> dict[str, Any]:
        """What ``summary.json`` records of this load: source, rows read, problems, skipped per kind."""
        return {"source": self.source, "rows": self.rows, "problems": len(self.problems), "skipped": self.skip_counts()}


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded: offline without a local copy, a missing path, a hub failure, or no usable row."""


class BadRowError(ValueError):
    """One row cannot become a Problem; the loader skips it and records the reason and its ``kind``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
