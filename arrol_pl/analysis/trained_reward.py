"""The reward section of a job that reads a trained policy (the evaluation, the head probe, the gradient probe):
:class:`AsTrainedRewardConfig`, a run's ``reward.*`` whose ``function`` defaults to the one that trained the policy,
read from what the run recorded (:func:`trained_reward`). Beside the jobs' configs (:mod:`.eval_config`), not in
the run's: a run's configuration reads nothing from disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from arrol_pl.tasks.user_function import MATH_VERIFY, resolve_reward_function
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.reward import RunRewardConfig


@dataclass
class AsTrainedRewardConfig(RunRewardConfig):
    """``reward.*`` of a job that reads a trained policy (the evaluation, the probes): as a run's, with
    ``function`` by default the one that trained it."""

    function: str | None = None
    """What scores a completion (math_verify, or module:function as in a run's ``reward.function``); None: the
    function the policy was trained with (an export's run ``summary.json``, one directory up, or a checkpoint's
    own record; math_verify when neither says)."""

    def fill_in(self, trained: Path, key: str) -> None:
        """Set ``function`` from what trained ``trained`` (the job's ``key``) when it is None, and check that it
        imports; ConfigError naming ``reward.function`` otherwise (before any model loads)."""
        if self.function is not None:
            return
        self.function = trained_reward(trained) or MATH_VERIFY
        if self.function == MATH_VERIFY:
            return
        try:
            resolve_reward_function(self.function)
        except ValueError as exc:
            raise ConfigError(f"reward.function={self.function} (what {key}={str(trained)!r} was trained with): "
                              f"{exc}; set reward.function") from None


def trained_reward(path: Path) -> str | None:
    """The ``reward.function`` that trained ``path`` (an export directory: its run's ``summary.json``, one directory
    up; a training checkpoint: its own record); None when neither says."""
    from arrol_pl.train.records.checkpoint import read_checkpoint  # torch and Lightning, for a checkpoint only

    if path.is_dir():
        summary = path.parent / "summary.json"
        config = json.loads(summary.read_text()).get("config", {}) if summary.is_file() else {}
    elif path.is_file():
        config = read_checkpoint(path, "checkpoint", {"arrol": "the run's records"})["arrol"].get("config", {})
    else:
        return None
    return (config.get("reward") or {}).get("function")
