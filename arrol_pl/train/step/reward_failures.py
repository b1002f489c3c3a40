"""Steps whose every reward failed: a run that learns nothing says so (:class:`RewardFailures`).

Decisions:
- **A step whose every reward item failed trains nothing.** An item whose scoring failed (``error``: the function
  raised or returned no finite number; ``timeout``; ``deadline``; ``gold_error``) scores 0, which is not a label:
  when every survivor's did, over every rank, the step is skipped (``skipped/reward_failed``), as a step without
  survivors is, so neither the policy nor the head and the calibrator learn from it.
- **Some such steps in a row stop the run.** After ``reward.max_failed_steps`` of them in a row the module asks
  the trainer to stop: the step's checkpoint is written, the summary is marked failed, and the run ends with
  :class:`RewardsFailed`, one line naming the function and the failure kinds (exit 1). A step that scored any item
  ends the streak; one without survivors leaves it as it is. A resume starts a new streak.
- **Counted per kind.** Each step's row holds its failed items per kind over every rank
  (``reward/failed_<kind>``); the summary sums them over the run (``reward_failures``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from arrol_pl.tasks.verify import FAILURE_STATUSES
from arrol_pl.train.step.rank_sync import RankSync

logger = logging.getLogger(__name__)


class RewardsFailed(RuntimeError):
    """The run stopped because every reward item failed for ``reward.max_failed_steps`` steps in a row;
    ``last_good``: the checkpoint written at the stop (set by the experiment once it knows it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.last_good: Path | None = None


class RewardFailures:
    """Failed reward items per step and the streak of steps whose every item failed (module docstring)."""

    def __init__(self, function: str, max_failed_steps: int) -> None:
        self.function, self.max_failed_steps = function, max_failed_steps
        self.metrics: dict[str, float] = {}
        """The latest step's failed items per kind, over every rank (its history row's ``reward/failed_<kind>``)."""
        self.streak: list[int] = []
        """The steps in a row whose every item failed, up to the latest."""
        self.streak_kinds: dict[str, int] = {}
        """Their failed items per kind."""
        self.failure: str | None = None
        """Why the run stops (None: it goes on)."""

    def observe(self, step: int, scored, ranks: RankSync) -> bool:
        """Count ``scored``'s (a RewardResult; None: no survivors) failed items per kind; every rank calls it at
        every step. True when every item of the step, over every rank, failed."""
        mine = (
            [0] * (len(FAILURE_STATUSES) + 1)
            if scored is None
            else [*(scored.counts[kind] for kind in FAILURE_STATUSES), len(scored.status)]
        )
        *failed, total = (int(v) for v in ranks.sum(*mine))
        self.metrics = {f"reward/failed_{kind}": float(n) for kind, n in zip(FAILURE_STATUSES, failed)}
        if total == 0:
            return False
        if sum(failed) < total:
            self.streak, self.streak_kinds = [], {}
            return False
        self.streak.append(step)
        for kind, n in zip(FAILURE_STATUSES, failed):
            self.streak_kinds[kind] = self.streak_kinds.get(kind, 0) + n
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.streak_kinds.items() if n)
        limit = self.max_failed_steps
        if limit and len(self.streak) >= limit:
            self.failure = (
                f"reward {self.function} failed on every item of {len(self.streak)} steps in a row "
                f"(steps {self.streak[0]}-{self.streak[-1]}: {kinds}), so the run learned nothing from "
                f"them (reward.max_failed_steps={limit})"
            )
        else:
            logger.warning(
                "step %d skipped (reward_failed): reward %s failed on all %d items (%s); %d of "
                "reward.max_failed_steps=%s in a row",
                step,
                self.function,
                total,
                kinds,
                len(self.streak),
                limit or "0 (never stop)",
            )
        return True


def reward_failures(history: list[dict[str, float]]) -> dict[str, int]:
    """Failed reward items per kind over a run's ``history`` rows (kinds that never failed left out)."""
    totals = {kind: int(sum(row.get(f"reward/failed_{kind}", 0.0) for row in history)) for kind in FAILURE_STATUSES}
    return {kind: n for kind, n in totals.items() if n}
