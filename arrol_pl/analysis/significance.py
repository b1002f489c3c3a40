"""How the results page judges a difference: against its two-sided 95 % t interval, on the degrees of freedom its
standard error has, and, where the interval holds 0, with the smallest effect the comparison could have detected.

Decisions:
- **An estimate is ahead (behind) when it lies beyond its 95 % t interval**: mean > t_{0.975, df}·SE (mean <
  −t_{0.975, df}·SE; :func:`~arrol_pl.core.metrics.t_quantile`). The degrees of freedom are those of the standard
  error: seeds − 1 for a mean over seeds (3–5 seeds: t = 4.30, 3.18, 2.78 at df 2, 3, 4, where "two standard
  errors" would stand for the normal 1.96); problems − 1 for one evaluation's standard error over problems;
  steps − 1 for a per-step mean; points − seeds − 1 for the ladder's slope within seeds.
- **Over seeds, an estimate is judged on the larger of two uncertainties** (:class:`SeedMean`): the per-seed
  standard errors combined (the evaluations' noise, or the steps') and the spread of the per-seed values (which
  also holds the training paths' noise), on seeds − 1 degrees of freedom; one seed is judged on its own standard
  error and degrees of freedom.
- **Nothing is called tied**: an estimate inside its interval is "not distinguishable", stated with the smallest
  true effect the comparison detects at 80 % power and two-sided α = 0.05, (t_{0.975, df} + t_{0.80, df})·SE
  (:func:`~arrol_pl.core.metrics.min_detectable_effect`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from arrol_pl.core.metrics import mean_of_estimates, mean_sd_se, min_detectable_effect, t_quantile
from arrol_pl.train.records.summary import RunSummary

INTERVAL = "its 95 % t interval"
"""What "ahead" and "behind" are judged against (module docstring)."""
POWER = 0.8
"""The power at which :attr:`Estimate.detectable` is stated."""


def df_text(df: float) -> str:
    """Degrees of freedom as the page writes them (``2 df``; the normal limit for infinitely many)."""
    return "normal limit" if math.isinf(df) else f"{df:g} df"


@dataclass(frozen=True)
class Estimate:
    """A difference (or slope) with its standard error and the degrees of freedom of that standard error."""

    mean: float
    se: float
    df: float
    """``math.inf``: the normal limit (a standard error whose own noise is negligible)."""

    @property
    def margin(self) -> float:
        """The half-width of the two-sided 95 % interval, t_{0.975, df}·SE (NaN without a standard error)."""
        return t_quantile(0.975, self.df) * self.se

    @property
    def ahead(self) -> bool:
        return self.mean > self.margin

    @property
    def behind(self) -> bool:
        return self.mean < -self.margin

    @property
    def detectable(self) -> float:
        """The smallest true effect detected with 80 % power at two-sided α = 0.05."""
        return min_detectable_effect(self.se, self.df, power=POWER)

    def interval(self, spec: str = ".3f") -> str:
        """``95 % t interval ±0.043, 2 df``."""
        return f"95 % t interval {self.bounds(spec)}"

    def bounds(self, spec: str = ".3f") -> str:
        """``±0.043, 2 df``: the interval's half-width and degrees of freedom."""
        return f"±{self.margin:{spec}}, {df_text(self.df)}"

    def undetected(self, spec: str = ".3f") -> str:
        """What an estimate inside its interval is stated with: ``could detect ±0.061 at 80 % power``."""
        return f"could detect ±{self.detectable:{spec}} at {POWER * 100:.0f} % power"

    def standing(self, spec: str = ".3f") -> str:
        """Where the estimate stands against 0: ahead or behind beyond :data:`INTERVAL`, or not distinguishable
        with the effect the comparison could have detected."""
        if self.ahead or self.behind:
            return f"{'ahead' if self.ahead else 'behind'} beyond {INTERVAL} ({self.bounds(spec)})"
        return f"not distinguishable from 0 ({self.interval(spec)}); the comparison {self.undetected(spec)}"


@dataclass(frozen=True)
class SeedMean:
    """Per-seed estimates and their mean over the seeds, judged on the larger of two uncertainties (module
    docstring)."""

    per_seed: list[tuple[int, float, float]]
    """``(seed, value, its standard error)``, in seed order."""
    mean: float
    eval_se: float
    """The per-seed standard errors combined (:func:`~arrol_pl.core.metrics.mean_of_estimates`)."""
    seed_sd: float
    seed_se: float
    """The spread of the per-seed values (NaN for one seed)."""
    eval_df: float
    """The degrees of freedom of one seed's standard error (the fewest over the seeds): what one seed is judged
    on."""

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    @property
    def se(self) -> float:
        """The larger of the combined per-seed standard error and the seeds' (the former alone for one seed)."""
        return max(self.eval_se, self.seed_se) if self.seeds > 1 else self.eval_se

    @property
    def df(self) -> float:
        """seeds − 1; one seed: its own standard error's."""
        return self.seeds - 1 if self.seeds > 1 else self.eval_df

    @property
    def estimate(self) -> Estimate:
        return Estimate(self.mean, self.se, self.df)


def seed_mean(per_seed: Sequence[tuple[int, float, float]], eval_df: float) -> SeedMean:
    """The mean of ``(seed, value, standard error)`` estimates (not empty) over the seeds, with both
    uncertainties; ``eval_df``: the degrees of freedom of one seed's standard error."""
    mean, eval_se = mean_of_estimates([(v, se) for _, v, se in per_seed])
    _, seed_sd, seed_se = mean_sd_se([v for _, v, _ in per_seed])
    return SeedMean(list(per_seed), mean, eval_se, seed_sd, seed_se, eval_df)


def problems_df(problems: int) -> float:
    """The degrees of freedom of a standard error over ``problems`` held-out problems (problems − 1); the normal
    limit where the count was not recorded."""
    return problems - 1 if problems > 1 else math.inf


def gain_estimate(run: RunSummary) -> Estimate | None:
    """A run's held-out gain over its before figure (:meth:`~arrol_pl.train.records.summary.RunSummary.heldout_gain`) on
    problems − 1 degrees of freedom (paired by problem: the pairs'; unpaired: the evaluation's problems, a lower
    bound of Welch's for two evaluations of that many); None without both evaluations."""
    gain = run.heldout_gain()
    if gain is None:
        return None
    problems = len(run.heldout_per_problem_after) if run.gain_is_paired else run.heldout_problems
    return Estimate(*gain, problems_df(problems))


def detectable_span(estimates: Sequence[Estimate]) -> str:
    """The effects several comparisons could have detected at 80 % power: ``±0.042``, or ``±0.031–0.047``."""
    lo, hi = min(e.detectable for e in estimates), max(e.detectable for e in estimates)
    return f"±{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"±{lo:.3f}–{hi:.3f}"
