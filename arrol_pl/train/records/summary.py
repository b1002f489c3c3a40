"""The record of one run that ``summary.json`` holds: :class:`RunSummary`.

Written by :func:`arrol_pl.train.run.experiment.run_experiment`; read by the run's report, sweep tables and the
results page (:mod:`arrol_pl.analysis`). The file keeps its keys (the field names, in this order), so runs
written before the record existed load too; keys a run predates take their defaults.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def values_from(history: list[dict[str, float]], key: str, start: int) -> list[float]:
    """The finite values of the history tag ``key`` from step index ``start`` on (after a cold start, over the last
    steps): what the summary's means and the results page's per-step statistics read."""
    return [h[key] for h in history[start:] if key in h and math.isfinite(h[key])]


@dataclass
class RunSummary:
    """Means over the steps after the cold start unless named otherwise (``None``: never measured)."""

    name: str = ""
    heldout_accuracy_before: float | None = None
    """Held-out avg@k before training (``trainer.eval_samples`` samples per problem)."""
    heldout_accuracy_after: float | None = None
    heldout_greedy_accuracy_before: float | None = None
    heldout_greedy_accuracy_after: float | None = None
    heldout_accuracy_se_before: float | None = None
    """Standard error of the held-out avg@k over problems."""
    heldout_accuracy_se_after: float | None = None
    heldout_problems: int = 0
    heldout_samples: int = 0
    heldout_per_problem_after: list[float] = field(default_factory=list)
    """Held-out avg@k of each problem after training (``HeldoutResult.per_problem``): the results page pairs two
    arms' evaluations by problem with it."""
    heldout_per_problem_before: list[float] = field(default_factory=list)
    """Held-out avg@k of each problem before training, in the same order: :meth:`heldout_gain` pairs it with the
    after figures."""
    train_accuracy_first: float | None = None
    """Training accuracy (over survivors) of the first step."""
    train_accuracy_last10: float | None = None
    """Training accuracy over the last 10 steps."""
    keep_ratio_target: float | None = None
    """κ (1 without pruning)."""
    keep_ratio_mean: float | None = None
    pruning_active_fraction: float | None = None
    head_accuracy_after_cold_start: float | None = None
    head_majority_after_cold_start: float | None = None
    """The head accuracy of always answering a step's more common label, max(acc, 1 − acc) of its
    survivors, over the same steps as ``head_accuracy_after_cold_start``: the floor a useful head must beat."""
    head_auc_after_cold_start: float | None = None
    scorer_auc_after_cold_start: float | None = None
    """The realised online AUC of the score the decisions read (``pruning.scorer``) over every rollout of a step
    before pruning (``scorer/auc``: exact for the oracle, else estimated from the survivors, each pair weighted
    1/(p_i p_j)), after the cold start (the head's own is ``head_auc_after_cold_start``)."""
    scorer_within_auc_after_cold_start: float | None = None
    """The same score's AUC over the (correct, wrong) pairs of one group among each group's rollouts before
    pruning (``scorer/within_auc``), after the cold start: the order pruning acts on, without the prompts' difficulty
    that lifts the pooled figure (the results page's break-even axis)."""
    scorer_within_auc_survivors_after_cold_start: float | None = None
    """The same over the survivors' pairs as they are (``scorer/within_auc_survivors``): the order of what the rule
    kept, which reads above the scorer's own AUC under the default rule (0.74 at 0.70, κ = 0.5)."""
    head_within_auc_after_cold_start: float | None = None
    """The head's AUC over the (correct, wrong) pairs of one group before pruning (``head/within_auc``), estimated
    from the survivors (each pair weighted 1/(p_i p_j)) after the cold start."""
    head_spearman_after_cold_start: float | None = None
    head_calibration_error_after_cold_start: float | None = None
    positive_ratio_mean: float | None = None
    """E[ρ̂] over groups (paper Table 4)."""
    rho_1_minus_rho_mean: float | None = None
    """E[ρ̂(1−ρ̂)] (paper Table 4)."""
    zero_advantage_fraction: float | None = None
    screen: dict[str, Any] = field(default_factory=dict)
    """The group screen's audit per stage (``prompt``, ``detect``) over its active steps: the counts of
    :class:`~arrol_pl.core.screen_audit.AuditCounts` and its precisions (``screen``, ``random``, ``oracle``,
    ``progress``); ``cost_share``, the screen's mean share of the step after the cold start. Empty without the
    screen."""
    refill: dict[str, float] = field(default_factory=dict)
    """DAPO refill (``algo.dynamic_sampling_refill``), means over every step: ``rounds`` generated per step,
    ``short`` (share of steps that ended below B informative groups). Empty without refill."""
    seconds_per_phase: dict[str, float | None] = field(default_factory=dict)
    """Phase name → mean seconds per step (Table 5's decomposition)."""
    seconds_per_step: float | None = None
    policy: dict[str, float | None] = field(default_factory=dict)
    """``policy/*`` metric → its mean over every step."""
    steps: int = 0
    wall_seconds: float | None = None
    """This command's seconds, model loading and evaluations included (a resumed run: its last session's)."""
    training_seconds: float | None = None
    """The whole run's training clock: ``time/wall`` of its last step, every session of a resumed run included,
    held-out evaluations excluded (None: no step)."""
    credited_seconds: float | None = None
    """The oracle scorer's credit over the run (``time/credit`` summed: the decode time its pruning would have
    saved); None for any other scorer."""
    status: str = "completed"
    """completed | interrupted | failed."""
    signal: str | None = None
    """The first SIGINT / SIGTERM received (None: none); beside ``completed``, it came once the run was trained, and
    its export finished."""
    error: str | None = None
    checkpoint: str | None = None
    """The last good checkpoint (what ``trainer.resume`` takes)."""
    skipped_steps: dict[str, int] = field(default_factory=dict)
    reward_failures: dict[str, int] = field(default_factory=dict)
    """Reward items whose scoring failed over the run, per kind (error, timeout, deadline, gold_error): each scored
    0; a step whose every item failed is skipped (``skipped_steps``' reward_failed)."""
    keep_ratio_effective: float | None = None
    """The keep ratio the per-group floor allows."""
    fit_seconds: float | None = None
    policy_dir: str | None = None
    export_dir: str | None = None
    checkpoint_dir: str | None = None
    tensorboard_dir: str | None = None
    overrides: list[str] = field(default_factory=list)
    """The command line's Hydra overrides (sweep tables name their rows by them)."""
    data_rows: dict[str, Any] = field(default_factory=dict)
    """Per split: source, rows read, problems, skipped rows per reason."""
    config: dict[str, Any] = field(default_factory=dict)
    """The whole :class:`~arrol_pl.train.config.run.RunConfig`, as a dict."""
    run_dir: str | None = field(default=None, metadata={"file": False})
    """The directory the record was read from (not written to the file)."""

    @property
    def gain_is_paired(self) -> bool:
        """Whether both evaluations kept per-problem figures of the same problems (:meth:`heldout_gain` pairs them)."""
        return len(self.heldout_per_problem_before) == len(self.heldout_per_problem_after) > 1

    def heldout_gain(self) -> tuple[float, float] | None:
        """Held-out accuracy after minus before and its standard error: over the per-problem differences when
        both evaluations recorded them (the same problems, so what the problems share cancels), else the two
        standard errors combined as if independent (an overestimate). ``None`` without both evaluations."""
        if self.heldout_accuracy_before is None or self.heldout_accuracy_after is None:
            return None
        gain = self.heldout_accuracy_after - self.heldout_accuracy_before
        if self.gain_is_paired:
            diffs = [a - b for a, b in zip(self.heldout_per_problem_after, self.heldout_per_problem_before)]
            mean = sum(diffs) / len(diffs)
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
            return gain, sd / math.sqrt(len(diffs))
        ses = (self.heldout_accuracy_se_before, self.heldout_accuracy_se_after)
        return gain, math.hypot(*(float("nan") if v is None else v for v in ses))

    def learned(self) -> bool | None:
        """Whether held-out accuracy rose by more than two standard errors of :meth:`heldout_gain` (``None``:
        not evaluated before and after)."""
        g = self.heldout_gain()
        return None if g is None else g[0] > 2 * g[1]

    def to_json(self) -> dict[str, Any]:
        """What ``summary.json`` holds."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("file", True)}

    @classmethod
    def from_json(cls, data: dict[str, Any], run_dir: str | None = None) -> "RunSummary":
        known = {f.name for f in dataclasses.fields(cls) if f.metadata.get("file", True)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"summary.json has keys RunSummary does not know: {unknown}")
        return cls(**data, run_dir=run_dir)

    @classmethod
    def read(cls, run_dir: Path | str) -> "RunSummary":
        """``run_dir/summary.json``."""
        path = Path(run_dir) / "summary.json"
        try:
            return cls.from_json(json.loads(path.read_text()), run_dir=str(run_dir))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc

    def write(self, run_dir: Path) -> None:
        (Path(run_dir) / "summary.json").write_text(json.dumps(self.to_json(), indent=2, default=str))
