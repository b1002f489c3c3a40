"""The reward section of a run's configuration (``reward.*``): what scores a completion (math-verify, or a function
of the user's own by import path), in how many worker processes, with what time limit.
:class:`~arrol_pl.train.config.RunConfig` holds it as ``reward``, as it holds the model section from
:mod:`.model_config`; each check names its ``reward.`` key, and a function that cannot be imported is refused here,
before any model loads. The reward itself: :mod:`arrol_pl.tasks.reward_function`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from arrol_pl.tasks.reward import RewardConfig
from arrol_pl.tasks.reward_function import MATH_VERIFY, resolve_reward_function
from arrol_pl.train.config_loader import ConfigError


@dataclass
class RunRewardConfig:
    """How the rollouts are scored (docs/data.md, "Rewards")."""

    function: str = MATH_VERIFY
    """What scores a completion: math_verify (the last \\boxed{} against the gold, R = 1[answer ≡ gold]), or a
    function of your own by import path, module:function, called as function(prompt, completion, answer) -> float
    in the reward workers (a reward above 0.5 counts as correct: the head's label and the accuracies); the module is
    looked up on sys.path, then in the working directory."""
    workers: int | None = None
    """Processes per rank that score completions (null: the CPUs this process may use, shared by the ranks on its
    node, ``LOCAL_WORLD_SIZE``; 0: in the training process, no hard time limits)."""
    timeout: int = 3
    """Seconds math-verify may take to parse or compare one answer (its SIGALRM limit, a whole number: it ignores
    fractions); a worker whose item runs past 6 × timeout + 2 s is killed and replaced, whatever the function, and
    the item scores 0 (status ``timeout``)."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"reward.workers must be >= 0 (0: score in the training process; null: the node's CPUs "
                              f"shared by its ranks), got {self.workers}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int) or self.timeout < 1:
            raise ConfigError(f"reward.timeout must be a whole number of seconds >= 1, got {self.timeout!r}")
        if self.function not in (MATH_VERIFY, None):
            try:
                resolve_reward_function(self.function)
            except ValueError as exc:
                raise ConfigError(f"reward.function={self.function}: {exc}") from None

    def pool_config(self, overlong_max_length: int | None = None, overlong_cache_length: int = 0) -> RewardConfig:
        """The reward's own settings: workers and time limits from here, DAPO's overlong penalty from the algorithm."""
        return RewardConfig(num_workers=self.workers, parse_timeout_s=self.timeout, verify_timeout_s=self.timeout,
                            overlong_max_length=overlong_max_length, overlong_cache_length=overlong_cache_length)


@dataclass
class AsTrainedRewardConfig(RunRewardConfig):
    """``reward.*`` of a job that reads a trained policy (the evaluation, the head probe): as a run's, with
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
    from arrol_pl.train.checkpoint import read_checkpoint

    if path.is_dir():
        summary = path.parent / "summary.json"
        config = json.loads(summary.read_text()).get("config", {}) if summary.is_file() else {}
    elif path.is_file():
        config = read_checkpoint(path, "checkpoint", {"arrol": "the run's records"})["arrol"].get("config", {})
    else:
        return None
    return (config.get("reward") or {}).get("function")
