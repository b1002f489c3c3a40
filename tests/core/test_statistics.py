"""The statistics the results page judges its comparisons with (arrol_pl.core.metrics): Student's t quantile
against the printed table, the minimum detectable effect, and the time to reach a reference's final value as a share
of the reference's own."""

import math

import pytest

from arrol_pl.core.metrics import min_detectable_effect, reach_share, t_cdf, t_quantile, time_to_reach

# Student's t, two-sided 95 % (t_{0.975}) and one-sided 80 % (t_{0.80}), from the printed tables
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 30: 2.042, math.inf: 1.960}
T_80 = {1: 1.376, 2: 1.061, 3: 0.978, 4: 0.941, 5: 0.920, 10: 0.879, 30: 0.854, math.inf: 0.842}


@pytest.mark.parametrize("df", list(T_975))
def test_t_quantile_matches_the_table_to_three_decimals(df):
    assert round(t_quantile(0.975, df), 3) == T_975[df]
    assert round(t_quantile(0.80, df), 3) == T_80[df]
    assert t_quantile(0.025, df) == pytest.approx(-t_quantile(0.975, df))  # symmetric about 0
    assert t_quantile(0.5, df) == pytest.approx(0.0, abs=1e-9)


def test_t_quantile_inverts_the_cdf_and_tends_to_the_normal():
    assert t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-4)  # Cauchy: tan(0.45 π)
    assert t_quantile(0.9995, 1) == pytest.approx(math.tan(math.pi * 0.4995), rel=1e-9)  # far in the tail
    assert t_quantile(0.99, 7) == pytest.approx(2.998, abs=1e-3)
    for df, p in ((2, 0.9), (3, 0.7), (30, 0.99), (2.5, 0.975)):
        assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    assert t_cdf(1.0, 2) == pytest.approx(0.5 + 1 / (2 * math.sqrt(3)))  # closed form at df 2: ½ + t / (2√(2 + t²))
    assert t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)
    assert [round(t_quantile(0.975, df), 3) for df in (2, 3, 4)] == [4.303, 3.182, 2.776]  # not "two SE"
    with pytest.raises(ValueError, match="0 < p < 1 and df > 0"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="0 < p < 1 and df > 0"):
        t_quantile(0.5, 0)


def test_min_detectable_effect_is_both_quantiles_times_the_standard_error():
    assert min_detectable_effect(0.01, math.inf) == pytest.approx((1.95996 + 0.84162) * 0.01, abs=1e-6)  # 2.80 SE
    assert min_detectable_effect(0.01, 2) == pytest.approx((4.3027 + 1.0607) * 0.01, abs=1e-5)  # 5.36 SE at df 2
    assert min_detectable_effect(0.01, 4) == pytest.approx((2.7764 + 0.9410) * 0.01, abs=1e-5)
    # more power or a stricter level needs a larger effect; it scales with the standard error
    assert min_detectable_effect(0.01, 4, power=0.9) > min_detectable_effect(0.01, 4)
    assert min_detectable_effect(0.01, 4, alpha=0.01) > min_detectable_effect(0.01, 4)
    assert min_detectable_effect(0.02, 4) == pytest.approx(2 * min_detectable_effect(0.01, 4))


def test_a_curve_against_itself_reaches_in_exactly_the_same_time():
    grpo = [(0.0, 0.20), (100.0, 0.30), (200.0, 0.41), (300.0, 0.40)]  # peaks at 200 s, ends lower
    assert reach_share(grpo, grpo) == 1.0
    # the old reading divided by the whole run: 200 / 300, as if GRPO were faster than itself
    assert time_to_reach(grpo, grpo[-1][1]) / grpo[-1][0] == pytest.approx(2 / 3)


def test_reach_share_is_over_the_time_the_reference_took_to_reach_its_final_value():
    grpo = [(0.0, 0.20), (100.0, 0.30), (200.0, 0.41), (300.0, 0.40)]  # first at its final 0.40 at 200 s
    assert reach_share([(0.0, 0.2), (150.0, 0.40), (400.0, 0.45)], grpo) == pytest.approx(150 / 200)
    assert reach_share([(0.0, 0.2), (250.0, 0.39), (350.0, 0.42)], grpo) == pytest.approx(350 / 200)
    assert reach_share([(0.0, 0.2), (300.0, 0.39)], grpo) is None  # never
    flat = [(0.0, 0.40), (300.0, 0.35)]  # ends below where it began: no time of its own to compare with
    assert math.isnan(reach_share([(0.0, 0.1), (50.0, 0.4)], flat))
