"""The survival rules' balance without a model: the default rule against random pruning over a grid of keep ratios,
pass rates and scorer AUCs, and the kept positive share of the paper's Eq. 2 as docs/algorithm.md derives it."""

import dataclasses

import pytest
import torch

from arrol_pl.core.decisions import decide_group
from arrol_pl.core.pruning import DEFAULT_BALANCE_TARGET, PrunerParams, PruningConfig
from arrol_pl.core.simulation import balance_cell
from arrol_pl.core.survival import anchored_survival, soft_anchored_survival, survival_probabilities

KEEP_RATIOS = (0.25, 0.5)
PASS_RATES = (0.1, 0.3, 0.5, 0.7, 0.9)
AUCS = (0.6, 0.7, 0.8, 0.9, 1.0)
GROUPS = {0.25: (2**16, 2**13, 2**12, 2**11, 2**10), 0.5: (2**15, 2**12, 2**11, 2**10, 2**10)}
"""Groups per cell by κ and AUC (in the order of :data:`AUCS`): fewer with each step up in AUC, as the gain grows,
down to 2^10, and most at AUC 0.6, where the gain of a weak scorer is smallest (about 0.002 in E[ρ̂(1-ρ̂)]: the
fixed-size draw keeps random pruning's groups as whole as the rule's, which halves the gap independent draws left).
At seed 0 each cell clears two standard errors."""
EQ2_CELLS = {(0.1, 1.0), (0.3, 1.0)}
"""(π, AUC) of the cells that also run Eq. 2's rule: the hard tasks with a perfect scorer, where it is checked."""


@pytest.fixture(scope="module")
def grid() -> dict[tuple[float, float, float], dict[str, dict[str, float]]]:
    cells = {}
    for kappa in KEEP_RATIOS:
        base = PruningConfig(keep_ratio=kappa)
        rules = {"random": dataclasses.replace(base, policy="random"), "default": base}
        # Eq. 2 only in the cells it is checked in; its other figures: `arrol simulate`
        with_eq2 = {**rules, "eq2": dataclasses.replace(base, balance_target="global")}
        for pi in PASS_RATES:
            for auc in AUCS:
                cells[(kappa, pi, auc)] = balance_cell(
                    with_eq2 if (pi, auc) in EQ2_CELLS else rules,
                    pi,
                    auc,
                    num_groups=GROUPS[kappa][AUCS.index(auc)],
                    group_size=8,
                    seed=0,
                )
    return cells


def test_the_default_rule_is_the_anchored_one():
    assert DEFAULT_BALANCE_TARGET == "anchored" and PruningConfig().balance_target == "anchored"


@pytest.mark.slow  # the grid draws a million groups at fixed size: outside the quick tier
@pytest.mark.parametrize("keep_ratio", KEEP_RATIOS)
@pytest.mark.parametrize("pass_rate", PASS_RATES)
def test_default_rule_balances_better_than_random_in_every_cell(grid, keep_ratio, pass_rate):
    """In every cell the default raises E[ρ̂(1-ρ̂)] and lowers the zero-advantage share against random pruning at the
    same κ, each by more than two standard errors paired by group, and keeps no more rollouts than random pruning."""
    for auc in AUCS:
        cell = grid[(keep_ratio, pass_rate, auc)]
        default, random = cell["default"], cell["random"]
        print(
            f"κ={keep_ratio} π={pass_rate} AUC={auc}: random {random['balance']:.4f}/"
            f"{random['zero_advantage_fraction']:.3f}, default {default['balance_gain']:+.4f}/"
            f"{default['zero_advantage_change']:+.4f}"
        )
        assert default["balance_gain"] > 2 * default["balance_gain_se"], (keep_ratio, pass_rate, auc, default)
        assert default["zero_advantage_change"] < -2 * default["zero_advantage_change_se"], (
            keep_ratio,
            pass_rate,
            auc,
            default,
        )
        assert default["keep_ratio"] <= random["keep_ratio"] + 0.005, (keep_ratio, pass_rate, auc)


@pytest.mark.slow  # the grid draws a million groups at fixed size: outside the quick tier
@pytest.mark.parametrize("keep_ratio", KEEP_RATIOS)
def test_eq2_lowers_the_kept_positive_share_on_hard_tasks_and_the_default_raises_it(grid, keep_ratio):
    """Eq. 2 prunes the likely-right first: on a hard task (π = 0.1, 0.3) with a perfect scorer it keeps fewer right
    answers than random pruning, the opposite of the paper's Table 4; the default keeps more."""
    for pi, auc in sorted(EQ2_CELLS):
        cell = grid[(keep_ratio, pi, auc)]
        assert cell["eq2"]["positive_ratio"] < cell["random"]["positive_ratio"] - 0.02
        assert cell["default"]["positive_ratio"] > cell["random"]["positive_ratio"] + 0.01
        assert cell["eq2"]["balance_gain"] < 0


@pytest.mark.slow  # the grid draws a million groups at fixed size: outside the quick tier
@pytest.mark.parametrize("keep_ratio", KEEP_RATIOS)
def test_the_default_lowers_the_kept_positive_share_on_easy_tasks(grid, keep_ratio):
    """On an easy task (π = 0.7, 0.9) with a perfect scorer the default keeps fewer right answers than random pruning:
    the kept share moves toward ρ = ½ from above as it does from below on a hard task."""
    for pi in (0.7, 0.9):
        cell = grid[(keep_ratio, pi, 1.0)]
        assert cell["default"]["positive_ratio"] < cell["random"]["positive_ratio"] - 0.01


@pytest.mark.parametrize("pass_rate", [0.2, 0.3, 0.5, 0.7])
def test_eq2_kept_positive_share_follows_its_closed_form_whatever_rho(pass_rate):
    """With δ solved for mean κ, δ = λ(q̄ - ρ) and p_i = κ + λ(q̄ - q_i): ρ cancels. With a perfect scorer (q = y) the
    kept positive share is π(1 - (λ/κ)(1 - π)): π² at λ = κ = 0.5."""
    n, kappa, lam = 1000, 0.5, 0.5
    y = (torch.arange(n) < int(pass_rate * n)).to(torch.float64)
    expected = pass_rate * (1 - lam / kappa * (1 - pass_rate))
    for rho in (0.2, 0.5, 0.9):
        p = survival_probabilities(y, kappa, rho, lam, p_min=0.0, p_max=1.0).probs.to(torch.float64)
        assert float((p * y).sum() / p.sum()) == pytest.approx(expected, abs=1e-4)
    assert expected == pytest.approx(pass_rate**2) if lam == kappa else True


@pytest.mark.parametrize("group_mean, direction", [(0.2, +1), (0.8, -1)])
def test_anchored_rule_prunes_the_middle_in_lemma_4_1_direction(group_mean, direction):
    """Below ρ the middle's above-mean rollouts survive more, above ρ its below-mean ones; the ends always survive and
    the mean survival is κ."""
    scores = torch.linspace(-2, 2, 8)
    q = (group_mean + 0.1 * scores / 2).clamp(0.01, 0.99)
    p = anchored_survival(q, scores, keep_ratio=0.5, target_positive_ratio=0.5)
    assert float(p[0]) == 1.0 and float(p[-1]) == 1.0
    assert float(p.mean()) == pytest.approx(0.5, abs=1e-5)
    middle = p[1:-1]
    assert direction * float(middle[-1] - middle[0]) > 0.5
    kept_share = float((p * q).sum() / p.sum())
    assert abs(kept_share - 0.5) < abs(float(q.mean()) - 0.5)


def test_rollouts_of_one_calibrator_bin_are_ordered_by_their_raw_scores():
    """The binned posterior ties rollouts of one bin; the rules that order a group read the ordered posterior, so a
    group scored inside one bin is still pruned in the head's order, not at random."""
    table = tuple((b + 0.5) / 128 for b in range(128))  # q ≈ sigmoid(score), one value per bin
    params = PrunerParams(policy="arrol", keep_ratio=0.5, bin_posteriors=table, min_keep_per_group=0)
    low, high = torch.logit(torch.tensor([25.05 / 128, 25.95 / 128]))
    scores = torch.linspace(float(low), float(high), 8)  # all in bin 25: q = 0.2 for each, below ρ = 0.5
    assert torch.unique(params.posterior(scores)).numel() == 1
    ordered = params.ordered_posterior(scores)
    assert bool((ordered[1:] >= ordered[:-1]).all()) and float(ordered[-1]) > float(ordered[0])
    kept_top = sum(
        int(
            decide_group(params, scores, torch.ones(8, dtype=torch.bool), torch.Generator().manual_seed(s))
            .keep[4:7]
            .sum()
        )
        for s in range(50)
    )
    kept_bottom = sum(
        int(
            decide_group(params, scores, torch.ones(8, dtype=torch.bool), torch.Generator().manual_seed(s))
            .keep[1:4]
            .sum()
        )
        for s in range(50)
    )
    assert kept_top > kept_bottom + 50


def test_anchored_rule_goes_soft_where_kappa_buys_less_than_one_survivor_beyond_the_floor():
    """With the floor of 2 in a group of 8 the anchored split holds from κ = 3/8; below it (κ n - 2 < 1) the rows go
    to the soft rule. Without a floor the anchored split holds at every κ."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(16, 8, generator=gen)
    q = torch.sigmoid(scores + torch.randn(16, 1, generator=gen))
    for kappa in (0.25, 0.3):
        soft = soft_anchored_survival(q, scores, kappa)
        assert torch.equal(anchored_survival(q, scores, kappa, floor=2), soft)
        assert not torch.equal(anchored_survival(q, scores, kappa), soft)
    for kappa in (0.375, 0.5):
        assert torch.equal(anchored_survival(q, scores, kappa, floor=2), anchored_survival(q, scores, kappa))
    mixed = anchored_survival(q, scores, 0.25, floor=torch.tensor([2, 0] * 8))
    assert torch.equal(mixed[0::2], soft_anchored_survival(q[0::2], scores[0::2], 0.25))
    assert torch.equal(mixed[1::2], anchored_survival(q[1::2], scores[1::2], 0.25))


def test_soft_anchored_rule_keeps_kappa_and_moves_toward_the_anchored_split_with_the_odds():
    """Mean survival κ in [p_min, p_max]; a group whose ends lie 3 or more apart in log odds gets the anchored split
    (ends 0.85, the rest p_min at κ = 0.25, n = 8); one whose ends tie in posterior is tilted by rank toward ρ: up
    the ranks below ρ, down them above ρ, flat at ρ."""
    scores = torch.linspace(-2, 2, 8)
    for level, gap in ((0.1, 0.02), (0.5, 0.3), (0.8, 0.1), (0.2, 0.9)):
        q = (level + gap * (torch.arange(8) / 7 - 0.5)).clamp(0, 1)
        p = soft_anchored_survival(q, scores, 0.25).double()
        assert float(p.mean()) == pytest.approx(0.25, abs=1e-6)
        assert bool((p >= 0.05 - 1e-7).all()) and bool((p <= 1.0 + 1e-7).all())
    wide = soft_anchored_survival(torch.linspace(0.1, 0.9, 8), scores, 0.25)
    assert torch.allclose(wide, torch.tensor([0.85] + [0.05] * 6 + [0.85]))
    for level, sign in ((0.2, +1), (0.8, -1), (0.5, 0)):
        p = soft_anchored_survival(torch.full((8,), level), scores, 0.25)
        steps = p[1:] - p[:-1]
        assert bool((sign * steps > 0).all()) if sign else torch.allclose(p, torch.full((8,), 0.25))
