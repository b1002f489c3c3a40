"""The keep/prune draws (arrol_pl.core.sampling): the fixed-size draw's chances checked against its definition by
enumeration, its sizes, and the AUC over survivors weighted by those chances against the AUC over every rollout."""

import itertools
import math

import pytest
import torch

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.decisions import decide_batch, draw_keep
from arrol_pl.core.pruning import PruningConfig, build_pruner_params
from arrol_pl.core.sampling import (
    conditional_poisson_weights,
    fixed_size_draw,
    fixed_size_draws,
    group_inclusion,
    joint_by_sample_index,
    joint_rows,
)
from arrol_pl.core.simulation import sample_oracle_groups
from arrol_pl.core.survivor_auc import survivor_aucs, weighted_within_group_auc

PROBABILITIES = [
    [0.85, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.85],  # the soft anchored rule at κ = 0.25, groups of 8
    [0.4, 0.1, 0.2, 0.3, 0.25, 0.15, 0.35, 0.25],
    [0.9, 0.6, 0.3, 0.2],
    [0.9549062252044678, 0.9682743549346924, 0.07681941986083984],  # Newton's full step overshoots here
]


@pytest.mark.parametrize("p", PROBABILITIES)
def test_the_fitted_design_has_the_asked_chances_by_enumerating_its_sets(p):
    p = torch.tensor(p, dtype=torch.float64)
    size = round(float(p.sum()))
    w, joint = conditional_poisson_weights(p, size)
    sets = list(itertools.combinations(range(p.numel()), size))
    mass = torch.tensor([math.prod(float(w[i]) for i in s) for s in sets], dtype=torch.float64)
    mass = mass / mass.sum()
    single = torch.zeros(p.numel(), dtype=torch.float64)
    pairs = torch.zeros(p.numel(), p.numel(), dtype=torch.float64)
    for s, m in zip(sets, mass):
        for i in s:
            single[i] += m
            for j in s:
                if i != j:
                    pairs[i, j] += m
    assert single.tolist() == pytest.approx(p.tolist(), abs=1e-9)
    pairs.diagonal().copy_(single)
    assert torch.allclose(joint, pairs, atol=1e-9)


def test_draws_keep_exactly_the_whole_sum_and_each_rollout_at_its_chance():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor(PROBABILITIES[1], dtype=torch.float64)
    draws = fixed_size_draws(p.expand(4000, 8), torch.rand(4000, 8, generator=gen, dtype=torch.float64))[0].double()
    assert set(draws.sum(1).tolist()) == {2.0}
    se = (p * (1 - p) / 4000).sqrt()
    assert ((draws.mean(0) - p).abs() < 4 * se + 1e-9).all()
    _, joint = fixed_size_draw(p, torch.rand(8, generator=gen))
    empirical = draws.T @ draws / 4000
    assert (empirical - joint).abs().max() < 0.03


def test_a_fractional_sum_keeps_its_floor_or_its_ceiling_and_certain_rollouts_always():
    gen = torch.Generator().manual_seed(1)
    p = torch.tensor([1.0, 0.3, 0.6, 0.0, 0.45, 0.9, 0.2, 0.3], dtype=torch.float64)  # free ones sum to 2.75
    draws = fixed_size_draws(p.expand(3000, 8), torch.rand(3000, 8, generator=gen, dtype=torch.float64))[0].double()
    assert set(draws.sum(1).tolist()) == {3.0, 4.0}  # the certain one plus 2 or 3
    assert draws[:, 0].min() == 1.0 and draws[:, 3].max() == 0.0
    assert float(draws.sum(1).mean()) == pytest.approx(float(p.sum()), abs=0.05)


def test_independent_draws_read_each_uniform_against_its_chance():
    p, u, eligible = (
        torch.tensor([[0.2, 0.7, 0.5]]),
        torch.tensor([[0.1, 0.9, 0.5]]),
        torch.ones(1, 3, dtype=torch.bool),
    )
    keep, joint = draw_keep(p, u, eligible, 0, "independent")
    assert keep[0].tolist() == [True, False, False]
    assert joint[0, 0, 1] == pytest.approx(0.14) and joint[0].diagonal().tolist() == pytest.approx([0.2, 0.7, 0.5])
    with pytest.raises(ValueError, match="unknown draw 'poisson'"):
        draw_keep(p, u, eligible, 0, "poisson")


def test_the_floor_no_longer_tops_up_a_quarter_kept_in_groups_of_eight():
    """κ = 0.25, G = 8, survival κ each: independent draws leave groups short of the floor of 2 and the floor tops
    them up (2.47 survivors a group on average); the fixed-size draw keeps 2."""
    gen = torch.Generator().manual_seed(2)
    survival = torch.full((2000, 8), 0.25)
    uniforms, eligible = torch.rand(2000, 8, generator=gen), torch.ones(2000, 8, dtype=torch.bool)
    fixed = draw_keep(survival, uniforms, eligible, 2, "fixed_size")[0].sum(1).double()
    independent = draw_keep(survival, uniforms, eligible, 2, "independent")[0].sum(1).double()
    assert set(fixed.tolist()) == {2.0}
    expected = 2 + sum((2 - k) * math.comb(8, k) * 0.25**k * 0.75 ** (8 - k) for k in (0, 1))
    assert float(independent.mean()) == pytest.approx(expected, abs=0.05)


def test_joint_rows_follow_sample_indices_and_give_each_pair_its_chance():
    inclusion = torch.tensor([[0.5, 0.2, 0.1], [0.2, 0.4, 0.05], [0.1, 0.05, 0.3]], dtype=torch.float64)
    rows = joint_by_sample_index(inclusion, [2, 0, 1])  # member 0 has sample index 2, ...
    assert rows[0] == pytest.approx((0.2, 0.1, 0.5))
    survivors = joint_rows([2, 1, 0], [rows[0], rows[2], None])  # the last drawn apart: None
    index, valid, blocks = group_inclusion(torch.tensor([7, 7, 7]), torch.tensor([0.5, 0.3, 0.4]), survivors)
    assert index.tolist() == [[0, 1, 2]] and valid.all()
    pi = blocks[0]
    assert pi[0, 1] == pytest.approx(0.1) and pi[1, 0] == pytest.approx(0.1)
    assert pi[0, 2] == pytest.approx(0.5 * 0.4)  # no draw known for the third: independent
    assert pi.diagonal().tolist() == pytest.approx([0.5, 0.3, 0.4])
    assert joint_by_sample_index(inclusion, [0, 0, 1]) == [None, None, None]


def test_a_batch_decision_carries_each_groups_pair_chances_by_sample_index():
    """:func:`decide_batch` gives each rollout its group's π row (no (N, N) matrix): the same chances
    :func:`decide_group` gives the group alone, in the columns of the members' sample indices."""
    from arrol_pl.core.decisions import decide_group
    from arrol_pl.core.pruning import PrunerParams

    params = PrunerParams(policy="arrol", keep_ratio=0.5, bin_posteriors=tuple(0.1 + 0.1 * i for i in range(8)), seed=9)
    scores = torch.randn(24, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([5, 3, 5, 3, 1] * 4 + [1, 1, 5, 3])
    eligible = torch.ones(24, dtype=torch.bool)
    sample_index = [0] * 24
    for g in (1, 3, 5):  # each group's members numbered in reverse of their rows
        idx = torch.nonzero(ids == g, as_tuple=True)[0].tolist()
        for k, i in enumerate(reversed(idx)):
            sample_index[i] = k
    batch = decide_batch(params, scores, eligible, ids, sample_index)
    assert batch.joint.shape == (24, 1 + 9)  # groups of 9, 9 and 6
    for g in (1, 3, 5):
        idx = torch.nonzero(ids == g, as_tuple=True)[0]
        alone = decide_group(params, scores[idx], eligible[idx], params.group_generator(g))
        assert torch.equal(batch.keep[idx], alone.keep)
        for a, i in enumerate(idx.tolist()):
            assert batch.joint[i, 0] == sample_index[i]
            for b, j in enumerate(idx.tolist()):
                assert float(batch.joint[i, 1 + sample_index[j]]) == pytest.approx(float(alone.inclusion[a, b]))
    default = decide_batch(params, scores, eligible, ids)
    assert torch.equal(default.keep, batch.keep)
    assert default.joint[ids == 1, 0].tolist() == list(range(6))


def _sets(p: torch.Tensor) -> list[tuple[tuple[int, ...], float]]:
    """Every set the fixed-size draw can keep from ``p`` (all free, Σp whole), with its chance."""
    size = round(float(p.sum()))
    w, _ = conditional_poisson_weights(p, size)
    sets = list(itertools.combinations(range(p.numel()), size))
    mass = [math.prod(float(w[i]) for i in s) for s in sets]
    return [(s, m / sum(mass)) for s, m in zip(sets, mass)]


@pytest.mark.parametrize("p", PROBABILITIES[:3])
def test_pair_sums_weighted_by_the_draws_chances_average_to_every_rollouts_over_its_sets(p):
    """Over every set the draw can keep, weighted by its chance, the survivors' pair sums (:func:`pair_auc_sums`
    with the draw's joint rows) average to those of the whole group, pair for pair (Horvitz–Thompson); weighting a
    pair 1/(p_i p_j), as for independent draws, does not."""
    from arrol_pl.core.survivor_auc import pair_auc_sums

    p = torch.tensor(p, dtype=torch.float64)
    n = p.numel()
    scores = torch.linspace(-1.0, 1.0, n).flip(0) * torch.tensor([1.0, -1.0] * (n // 2) + [1.0] * (n % 2))
    labels = torch.arange(n) % 3 == 0
    ids = torch.zeros(n, dtype=torch.long)
    truth = [float(x.sum()) for x in pair_auc_sums(scores, labels, ids, torch.ones(n))]
    _, joint = fixed_size_draw(p, torch.zeros(n))
    rows = joint_rows(list(range(n)), joint_by_sample_index(joint, list(range(n))))
    expected, naive = [0.0, 0.0], [0.0, 0.0]
    for kept, chance in _sets(p):
        k = torch.tensor(kept)
        for out, draw_rows in ((expected, rows[k]), (naive, None)):
            sums = pair_auc_sums(scores[k], labels[k], ids[k], p[k], draw_rows)
            out[0] += chance * float(sums[0].sum())
            out[1] += chance * float(sums[1].sum())
    assert expected == pytest.approx(truth, rel=1e-9)
    assert naive[1] != pytest.approx(truth[1], rel=0.05)


@pytest.mark.parametrize("keep_ratio", [0.25, 0.5])
def test_the_default_rule_keeps_kappa_and_the_step_reads_the_calibrators_estimate(keep_ratio):
    """The default rule through the fixed-size draw keeps κ of 400 groups of 8 exactly, and the step's AUCs over
    survivors (:func:`survivor_aucs`) are the calibrator's on the same rows."""
    gen = torch.Generator().manual_seed(3)
    warm = sample_oracle_groups(100, 8, 0.4, 0.7, gen)
    calibrator = BinnedCalibrator()
    calibrator.update(warm.scores.flatten(), warm.rewards.flatten(), groups=torch.arange(100).repeat_interleave(8))
    params = build_pruner_params(PruningConfig(keep_ratio=keep_ratio, cold_start_steps=0), calibrator, 0)
    batch = sample_oracle_groups(400, 8, 0.4, 0.7, gen)
    scores, rewards, ids = batch.scores.flatten(), batch.rewards.flatten(), torch.arange(400).repeat_interleave(8)
    decision = decide_batch(params, scores, torch.ones_like(rewards, dtype=torch.bool), ids)
    keep = decision.keep
    assert float(keep.double().mean()) == keep_ratio
    joint = decision.joint[keep]
    window = BinnedCalibrator(capacity=4000)
    window.update(scores[keep], rewards[keep], None, ids[keep], decision.survival[keep], joint)
    pooled, within = survivor_aucs(scores[keep], rewards[keep], ids[keep], decision.survival[keep], joint)
    assert (pooled, within) == pytest.approx((window.auc(), window.within_auc()), abs=1e-9)


def test_a_calibrator_keeps_its_pair_sums_through_its_state_and_rebuilds_an_old_states():
    batch = sample_oracle_groups(60, 8, 0.4, 0.7, torch.Generator().manual_seed(5))
    scores, rewards, ids = batch.scores.flatten(), batch.rewards.flatten(), torch.arange(60).repeat_interleave(8)
    survival = torch.rand(scores.numel(), generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 0.8 + 0.2
    calibrator = BinnedCalibrator(capacity=300)  # the window forgets the oldest of 480 rows
    for part in range(4):
        rows = slice(part * 120, (part + 1) * 120)
        calibrator.update(scores[rows], rewards[rows], None, ids[rows], survival[rows])
    within, pooled = calibrator.within_auc(), calibrator.auc()
    window = slice(480 - 300, 480)
    kept_ids = ids[window] + torch.arange(480)[window] // 120 * 1000  # each update call's groups apart
    assert within == pytest.approx(
        weighted_within_group_auc(scores[window], rewards[window], kept_ids, 1.0 / survival[window]), abs=1e-12
    )
    assert pooled == pytest.approx(
        weighted_within_group_auc(scores[window], rewards[window], torch.zeros(300), 1.0 / survival[window]), abs=1e-12
    )
    state = calibrator.state_dict()
    restored = BinnedCalibrator(capacity=300)
    restored.load_state_dict(state)
    assert (restored.within_auc(), restored.auc()) == (within, pooled)
    old = {k: v for k, v in state.items() if k not in ("pair_right", "pair_total")}
    rebuilt = BinnedCalibrator(capacity=300)
    rebuilt.load_state_dict(old)
    assert rebuilt.within_auc() == pytest.approx(within, abs=1e-12)
