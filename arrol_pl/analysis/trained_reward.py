"""The reward section of a job that reads a trained policy (the evaluation, the head probe, the gradient probe):
:class:`AsTrainedRewardConfig`, a run's ``reward.*`` whose ``function`` is checked against the one that trained the
policy, read from what the run recorded (:func:`trained_reward`). Beside the jobs' configs (:mod:`.eval_config`),
not in the run's: a run's configuration reads nothing from disk.

Decisions:
- **A file never names code to run.** A recorded ``module:function`` is imported only when the user names it on
  the command line: a checkpoint or an export comes from whoever wrote it, and importing its module runs that
  module (from ``sys.path`` or the working directory, in every reward worker). A policy trained with math_verify,
  or whose record names none, is scored with math_verify; one trained with a function of its own is refused until
  the user picks (:func:`~arrol_pl.train.config.reward.refuse_recorded`), so no result is silently scored by
  another reward either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from arrol_pl.tasks.user_function import MATH_VERIFY
from arrol_pl.train.config.reward import RewardScoring, refuse_recorded


@dataclass
class AsTrainedRewardConfig(RewardScoring):
    """``reward.*`` of a job that reads a trained policy (the evaluation, the probes): as a run's, with
    ``function`` unset until :meth:`fill_in` checks it against what trained the policy."""

    function: str | None = None
    """What scores a completion (math_verify, or module:function as in a run's ``reward.function``); None:
    math_verify when the policy was trained with it (an export's run ``summary.json``, one directory up, or a
    checkpoint's own record; or neither says), else refused naming the recorded function: a function named only by
    a file is never imported, name it here to use it."""

    def fill_in(self, trained: Path, key: str) -> None:
        """Set ``function`` when it is None: math_verify if that (or nothing) trained ``trained`` (the job's
        ``key``), else ConfigError naming the recorded function and both ways on, before any model loads and
        without importing it. A function the user named was imported and checked by the config itself."""
        if self.function is not None:
            return
        recorded = trained_reward(trained)
        if recorded not in (None, MATH_VERIFY):
            raise refuse_recorded(
                recorded, f"{key}={str(trained)!r}", f", or reward.function={MATH_VERIFY} to score with math-verify"
            )
        self.function = MATH_VERIFY


def trained_config(path: Path) -> dict:
    """The configuration of the run that trained ``path`` as it recorded it (an export directory: its run's
    ``summary.json``, one directory up; a training checkpoint: its own record); empty when neither says."""
    from arrol_pl.train.records.checkpoint import read_checkpoint  # torch and Lightning, for a checkpoint only

    if path.is_dir():
        summary = path.parent / "summary.json"
        return json.loads(summary.read_text()).get("config", {}) if summary.is_file() else {}
    if path.is_file():
        return read_checkpoint(path, "checkpoint", {"arrol": "the run's records"})["arrol"].get("config", {})
    return {}


def trained_reward(path: Path) -> str | None:
    """The ``reward.function`` that trained ``path`` (:func:`trained_config`); None when nothing says."""
    return (trained_config(path).get("reward") or {}).get("function")
