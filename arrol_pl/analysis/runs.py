"""The runs of a results directory: reading a sweep's summaries, picking runs by config, pairing two arms by seed
and the standard error of their held-out difference.

Decisions:
- **A run is found by its config**, never by its directory name: :func:`pick` matches ``config.pruning`` values,
  :func:`pick_config` any nested subset of the whole config (a dict value names a subset of that section).
- **Two arms are compared seed by seed** (:func:`pairs_by_seed`): each ``trainer.seed`` starts both arms from the
  same policy; a seed with one arm only is left out.
- **Held-out differences are paired by problem** when both runs recorded per-problem results (the same held-out
  problems), else the two standard errors are combined as if independent (an overestimate).
- **Over seeds, a difference is judged on the larger of two uncertainties** (:class:`PairedDifference`, a
  :class:`~arrol_pl.analysis.significance.SeedMean`): the evaluations' noise and, over several seeds, the spread of
  the per-seed differences (which also holds the training paths' noise), against its 95 % t interval on seeds − 1
  degrees of freedom; one seed on problems − 1 (:mod:`arrol_pl.analysis.significance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from arrol_pl.analysis.history import history_curve, read_history
from arrol_pl.analysis.significance import Estimate, SeedMean, problems_df, seed_mean
from arrol_pl.core.metrics import mean_sd_se
from arrol_pl.train.records.summary import RunSummary, values_from


def sweep_runs(sweep_dir: Path) -> list[RunSummary]:
    """The summaries of a sweep's jobs (each with ``run_dir``), in job order."""
    return [
        RunSummary.read(path.parent) for path in sorted(sweep_dir.glob("*/summary.json"), key=lambda p: p.parent.name)
    ]


def comparable(x: Any) -> float:
    """``x`` as a float that orders: None and NaN (never measured) become -inf, below every number."""
    return float("-inf") if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _has(actual: Any, expected: Any) -> bool:
    """``expected`` equals ``actual``, or, a dict, names a subset of ``actual``'s keys with those values."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(_has(actual.get(k), v) for k, v in expected.items())
    return actual == expected


def pick(runs: Sequence[RunSummary], **pruning) -> RunSummary | None:
    """The first run whose ``config.pruning`` has all of ``pruning``'s values (a dict value, such as
    ``screen={"stages": "none"}``, matches those keys of the nested section)."""
    return pick_config(runs, {"pruning": pruning})


def pick_config(runs: Sequence[RunSummary], spec: dict[str, Any]) -> RunSummary | None:
    """The first run whose whole config has ``spec``'s values (nested dicts name subsets of their sections)."""
    return next((s for s in runs if _has(s.config, spec)), None)


def pairs_by_seed(
    runs: Sequence[RunSummary], first: dict[str, Any], second: dict[str, Any], whole: bool = False
) -> list[tuple[int, RunSummary, RunSummary]]:
    """``(seed, run, run)`` for each ``trainer.seed`` that has a run of both arms (``pick``'s pruning values, or with
    ``whole`` ``pick_config``'s specs), in seed order; a seed with one arm only is left out."""
    seed_of = lambda r: r.config.get("trainer", {}).get("seed", 0)  # noqa: E731
    match = pick_config if whole else (lambda rs, spec: pick(rs, **spec))
    pairs = []
    for seed in sorted({seed_of(r) for r in runs}):
        of_seed = [r for r in runs if seed_of(r) == seed]
        a, b = match(of_seed, first), match(of_seed, second)
        if a is not None and b is not None:
            pairs.append((seed, a, b))
    return pairs


def heldout_curve(run: RunSummary) -> list[tuple[float, float]]:
    """``(training seconds, held-out avg@k)`` of a run: before training at 0 s, then every evaluation."""
    try:
        return history_curve(Path(run.run_dir), "heldout/accuracy")
    except KeyError:  # trained with trainer.eval_every=0 and no held-out set
        return []


def per_step_after_cold_start(run: RunSummary, key: str) -> Estimate:
    """The mean over a run's steps after its cold start of the history tag ``key``, with its standard error on
    steps − 1 degrees of freedom (NaN without two steps)."""
    values = values_from(read_history(Path(run.run_dir)), key, run.config["pruning"]["cold_start_steps"])
    mean, _, se = mean_sd_se(values) if values else (float("nan"),) * 3
    return Estimate(mean, se, max(len(values) - 1, 1))


def paired_by_problem(a: RunSummary, b: RunSummary) -> bool:
    """Whether two runs recorded per-problem held-out results on the same number of problems."""
    pa, pb = a.heldout_per_problem_after, b.heldout_per_problem_after
    return len(pa) == len(pb) > 1


def heldout_difference_se(a: RunSummary, b: RunSummary) -> float:
    """Standard error of ``a``'s held-out accuracy after minus ``b``'s: over the per-problem differences when both
    runs recorded them (the same held-out problems), else the two standard errors combined as if independent."""
    if paired_by_problem(a, b):
        _, _, se = mean_sd_se([x - y for x, y in zip(a.heldout_per_problem_after, b.heldout_per_problem_after)])
        return se
    return math.hypot(comparable(a.heldout_accuracy_se_after), comparable(b.heldout_accuracy_se_after))


def heldout_difference_df(a: RunSummary, b: RunSummary) -> float:
    """The degrees of freedom of :func:`heldout_difference_se`: the pairs' problems − 1, or unpaired the fewer
    problems − 1 (a lower bound of Welch's)."""
    if paired_by_problem(a, b):
        return problems_df(len(a.heldout_per_problem_after))
    return problems_df(min(a.heldout_problems, b.heldout_problems))


@dataclass(frozen=True)
class PairedDifference(SeedMean):
    """One arm's held-out accuracy after minus another's, seed by seed and over the seeds (``per_seed``:
    ``(seed, difference, its standard error)``, :func:`heldout_difference_se`)."""

    by_problem: int
    """How many seeds' runs were paired by problem (:func:`paired_by_problem`)."""


def paired_difference(pairs: Sequence[tuple[int, RunSummary, RunSummary]]) -> PairedDifference:
    """The second run's held-out accuracy after minus the first's over ``pairs`` (:func:`pairs_by_seed`'s, not
    empty): each seed's difference with its standard error, their mean and both uncertainties."""
    per_seed = [
        (seed, comparable(b.heldout_accuracy_after) - comparable(a.heldout_accuracy_after), heldout_difference_se(b, a))
        for seed, a, b in pairs
    ]
    over_seeds = seed_mean(per_seed, min(heldout_difference_df(b, a) for _, a, b in pairs))
    return PairedDifference(**vars(over_seeds), by_problem=sum(paired_by_problem(a, b) for _, a, b in pairs))
