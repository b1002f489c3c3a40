"""How the results page judges a difference (arrol_pl.analysis.significance): against its 95 % t interval on the
degrees of freedom of its standard error, over seeds on the larger of two uncertainties, and never as a tie."""

import math

import pytest

from arrol_pl.analysis.significance import Estimate, detectable_span, gain_estimate, seed_mean
from arrol_pl.train.records.summary import RunSummary


def test_an_estimate_is_ahead_only_beyond_its_t_interval():
    # 3 standard errors ahead: beyond two, but on 2 df the 95 % interval is 4.30 SE wide
    few = Estimate(0.03, 0.01, 2)
    assert few.margin == pytest.approx(0.04303, abs=1e-5) and not few.ahead and not few.behind
    assert few.standing() == (
        "not distinguishable from 0 (95 % t interval ±0.043, 2 df); the comparison could detect ±0.054 at 80 % power"
    )
    assert Estimate(0.03, 0.01, math.inf).ahead  # in the normal limit 1.96 SE suffice
    assert Estimate(-0.05, 0.01, 4).standing() == "behind beyond its 95 % t interval (±0.028, 4 df)"
    assert Estimate(0.05, 0.01, math.inf).standing() == "ahead beyond its 95 % t interval (±0.020, normal limit)"
    assert Estimate(0.03, 0.01, 2).detectable == pytest.approx((4.3027 + 1.0607) * 0.01, abs=1e-5)
    assert detectable_span([Estimate(0, 0.01, 4), Estimate(0, 0.02, 4)]) == "±0.037–0.074"
    assert detectable_span([Estimate(0, 0.01, 4), Estimate(1, 0.01, 4)]) == "±0.037"


def test_over_seeds_the_larger_uncertainty_is_judged_on_seeds_minus_one_df():
    # three seeds whose differences spread more than their evaluations' noise: the seeds' SE, on 2 df
    spread = seed_mean([(0, 0.02, 0.005), (1, 0.06, 0.005), (2, 0.10, 0.005)], eval_df=255)
    assert spread.seed_se == pytest.approx(0.04 / math.sqrt(3)) and spread.se == spread.seed_se
    assert spread.df == 2 and spread.estimate == Estimate(0.06, spread.seed_se, 2)
    # equal differences: the evaluations' SE, still on 2 df (their spread is estimated from three values)
    equal = seed_mean([(0, 0.05, 0.01), (1, 0.05, 0.01), (2, 0.05, 0.01)], eval_df=255)
    assert equal.se == pytest.approx(0.01 / math.sqrt(3)) and equal.df == 2
    # one seed: its own standard error and degrees of freedom
    one = seed_mean([(0, 0.05, 0.02)], eval_df=127)
    assert (one.se, one.df) == (0.02, 127) and math.isnan(one.seed_se)


def test_a_runs_gain_is_judged_on_its_problems_degrees_of_freedom():
    paired = RunSummary(
        heldout_accuracy_before=0.2,
        heldout_accuracy_after=0.3,
        heldout_problems=4,
        heldout_per_problem_before=[0.2, 0.2, 0.2, 0.2],
        heldout_per_problem_after=[0.3, 0.2, 0.4, 0.3],
    )
    e = gain_estimate(paired)
    assert e.mean == pytest.approx(0.1) and e.df == 3  # four paired problems
    unpaired = RunSummary(
        heldout_accuracy_before=0.2,
        heldout_accuracy_after=0.3,
        heldout_problems=128,
        heldout_accuracy_se_before=0.03,
        heldout_accuracy_se_after=0.04,
    )
    assert gain_estimate(unpaired) == Estimate(pytest.approx(0.1), pytest.approx(0.05), 127)
    assert gain_estimate(RunSummary(heldout_accuracy_after=0.3)) is None
    unknown = RunSummary(
        heldout_accuracy_before=0.2,
        heldout_accuracy_after=0.3,
        heldout_accuracy_se_before=0.03,
        heldout_accuracy_se_after=0.04,
    )
    assert gain_estimate(unknown).df == math.inf  # a count never recorded: the normal limit
