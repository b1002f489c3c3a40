"""The reward section of a run's configuration (``reward.*``): what scores a completion (math-verify, or a function
of the user's own by import path), in how many worker processes, with what time limit.
:class:`~arrol_pl.train.config.run.RunConfig` holds it as ``reward``, as it holds the model section from
:mod:`.model`; each check names its ``reward.`` key, and a function that cannot be imported is refused here,
before any model loads. The reward itself: :mod:`arrol_pl.tasks.reward_function`; the section of a job that reads a
trained policy: :mod:`arrol_pl.analysis.trained_reward`.
"""

from __future__ import annotations

from dataclasses import dataclass

from arrol_pl.tasks.reward import RewardConfig
from arrol_pl.tasks.user_function import MATH_VERIFY, resolve_reward_function
from arrol_pl.train.config.loader import ConfigError


@dataclass
class RewardScoring:
    """How completions are scored (docs/data.md, "Rewards"): a run's and every job's that reads a trained policy."""

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
            raise ConfigError(
                f"reward.workers must be >= 0 (0: score in the training process; null: the node's CPUs "
                f"shared by its ranks), got {self.workers}"
            )
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int) or self.timeout < 1:
            raise ConfigError(f"reward.timeout must be a whole number of seconds >= 1, got {self.timeout!r}")
        if self.function not in (MATH_VERIFY, None):
            try:
                resolve_reward_function(self.function)
            except ValueError as exc:
                raise ConfigError(f"reward.function={self.function}: {exc}") from None

    def pool_config(self, overlong_max_length: int | None = None, overlong_cache_length: int = 0) -> RewardConfig:
        """The reward's own settings: workers and time limits from here, DAPO's overlong penalty from the algorithm."""
        return RewardConfig(
            num_workers=self.workers,
            parse_timeout_s=self.timeout,
            verify_timeout_s=self.timeout,
            overlong_max_length=overlong_max_length,
            overlong_cache_length=overlong_cache_length,
        )


@dataclass
class RunRewardConfig(RewardScoring):
    """How a run's rollouts are scored, and when a reward that fails everywhere stops it."""

    max_failed_steps: int = 3
    """Steps in a row whose every reward item failed (the function raised or returned no finite number, an item
    timed out, a gold math-verify cannot parse) before the run stops with a checkpoint, a summary marked failed
    naming the function and the failure kinds, and exit 1; such a step trains nothing (counted in
    skipped/reward_failed). 0: never stop."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if (
            isinstance(self.max_failed_steps, bool)
            or not isinstance(self.max_failed_steps, int)
            or self.max_failed_steps < 0
        ):
            raise ConfigError(
                f"reward.max_failed_steps must be a whole number >= 0 (0: never stop), got {self.max_failed_steps!r}"
            )


def refuse_recorded(recorded: str, source: str, other_way: str) -> ConfigError:
    """The one line for a ``reward.function`` that only a file (``source``, e.g. ``checkpoint='run/export'``)
    names: which function it records, how to opt in, and ``other_way`` on."""
    return ConfigError(
        f"{source} was trained with reward.function={recorded}, which is not imported because only "
        f"that file names it: pass reward.function={recorded} to use it (its module is imported and "
        f"run){other_way}"
    )
