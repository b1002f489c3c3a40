import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arrol_pl.core.calibration import BinnedCalibrator, bin_index


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_bin_index_matches_definition():
    # b(s') = min(B-1, floor(B s')) on s' = sigmoid(score)
    scores = torch.tensor([-50.0, logit(0.1), 0.0, logit(0.74), 50.0])
    assert bin_index(scores, 4).tolist() == [0, 0, 2, 2, 3]
    assert bin_index(scores, 128).tolist() == [0, 12, 64, 94, 127]


def test_posterior_equals_hand_computed_closed_form():
    # B = 4 bins; positives: two in bin 3, one in bin 2; negatives: three in bin 0, one in bin 2.
    cal = BinnedCalibrator(num_bins=4, capacity=100, alpha=1.0)
    pos = [logit(0.9), logit(0.95), logit(0.6)]
    neg = [logit(0.1), logit(0.05), logit(0.2), logit(0.55)]
    cal.update(torch.tensor(pos + neg), torch.tensor([1, 1, 1, 0, 0, 0, 0]))
    c_pos, c_neg = cal.counts()
    assert c_pos.tolist() == [0, 0, 1, 2] and c_neg.tolist() == [3, 0, 1, 0]
    pi = 3 / 7
    like_pos = [(c + 1) / (3 + 4) for c in (0, 0, 1, 2)]
    like_neg = [(c + 1) / (4 + 4) for c in (3, 0, 1, 0)]
    expected = [pi * lp / (pi * lp + (1 - pi) * ln) for lp, ln in zip(like_pos, like_neg)]
    assert cal.prior() == pytest.approx(pi)
    assert cal.bin_posteriors().tolist() == pytest.approx(expected, abs=1e-12)
    # posterior() looks up the bin of each raw score
    got = cal.posterior(torch.tensor([logit(0.01), logit(0.3), logit(0.6), logit(0.99)]))
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_empty_calibrator_is_uninformative():
    cal = BinnedCalibrator(num_bins=8)
    assert torch.allclose(cal.bin_posteriors(), torch.full((8,), 0.5, dtype=torch.float64))


def test_weights_act_as_repeated_samples():
    a = BinnedCalibrator(num_bins=8, capacity=64)
    b = BinnedCalibrator(num_bins=8, capacity=64)
    s = torch.tensor([1.0, -1.0, 2.0])
    y = torch.tensor([1, 0, 1])
    a.update(s, y, weights=torch.tensor([3.0, 1.0, 2.0]))
    b.update(torch.tensor([1.0, 1.0, 1.0, -1.0, 2.0, 2.0]), torch.tensor([1, 1, 1, 0, 1, 1]))
    assert torch.allclose(a.bin_posteriors(), b.bin_posteriors())
    assert a.prior() == pytest.approx(b.prior())


def test_sliding_window_forgets_oldest():
    cal = BinnedCalibrator(num_bins=4, capacity=4)
    cal.update(torch.tensor([5.0, 5.0]), torch.tensor([1, 1]))
    cal.update(torch.tensor([-5.0, -5.0, -5.0]), torch.tensor([0, 0, 0]))
    scores, labels, _ = cal.buffer()
    # the first positive fell out; order is chronological
    assert scores.tolist() == [5.0, -5.0, -5.0, -5.0]
    assert labels.tolist() == [True, False, False, False]
    assert len(cal) == 4 and cal.total_seen == 5
    cal.update(torch.tensor([-5.0]), torch.tensor([0]))
    assert cal.prior() == 0.0  # the last positive is gone too
    # a single batch larger than the window keeps only its newest samples
    cal.update(torch.arange(10, dtype=torch.float64), torch.ones(10))
    assert cal.buffer()[0].tolist() == [6.0, 7.0, 8.0, 9.0]


@settings(max_examples=40, deadline=None)
@given(
    scores=st.lists(st.floats(-8, 8, allow_nan=False), min_size=1, max_size=60),
    seed=st.integers(0, 2**16),
    capacity=st.integers(1, 80),
)
def test_state_round_trips_exactly(scores, seed, capacity):
    g = torch.Generator().manual_seed(seed)
    s = torch.tensor(scores, dtype=torch.float64)
    y = (torch.rand(len(scores), generator=g) < 0.5).long()
    w = torch.rand(len(scores), generator=g) + 0.1
    groups = torch.arange(len(scores)) // 3
    cal = BinnedCalibrator(num_bins=16, capacity=capacity)
    cal.update(s, y, w, groups)
    clone = BinnedCalibrator(num_bins=16, capacity=capacity)
    clone.load_state_dict(cal.state_dict())
    assert torch.equal(cal.bin_posteriors(), clone.bin_posteriors())
    for a, b in zip(cal.buffer(), clone.buffer()):
        assert torch.equal(a, b)
    # and both continue identically, the next call's groups told apart from this one's in both
    cal.update(s[:3], y[:3], groups=groups[:3])
    clone.update(s[:3], y[:3], groups=groups[:3])
    assert torch.equal(cal.bin_posteriors(), clone.bin_posteriors())
    assert cal.within_auc() == clone.within_auc() or math.isnan(cal.within_auc()) and math.isnan(clone.within_auc())


def test_the_window_auc_within_groups_pairs_only_one_calls_groups():
    cal = BinnedCalibrator(num_bins=8, capacity=16)
    # within each group the right rollout scores higher; across groups the easy group's wrong one outscores
    # the hard group's right one, so the pooled AUC is below 1
    cal.update(torch.tensor([3.0, 2.0, 0.0, -1.0]), torch.tensor([1, 0, 1, 0]), groups=torch.tensor([0, 0, 1, 1]))
    assert cal.within_auc() == 1.0 and cal.auc() == pytest.approx(3 / 4)
    # the next call's group 0 is another prompt: its rows pair with each other only
    cal.update(torch.tensor([-2.0, 5.0]), torch.tensor([1, 0]), groups=torch.tensor([0, 0]))
    assert cal.within_auc() == pytest.approx(2 / 3)
    # rows without a group pair with nothing; the window forgets the oldest call first
    alone = BinnedCalibrator(num_bins=8, capacity=4)
    alone.update(torch.tensor([1.0, -1.0]), torch.tensor([1, 0]))
    assert math.isnan(alone.within_auc()) and alone.auc() == 1.0
    alone.update(torch.tensor([1.0, -1.0, 2.0]), torch.tensor([0, 1, 1]), groups=torch.tensor([4, 4, 5]))
    assert alone.within_auc() == 0.0 and len(alone) == 4
    with pytest.raises(ValueError, match="groups"):
        alone.update(torch.zeros(2), torch.ones(2), groups=torch.tensor([-1, 0]))


def test_the_window_auc_weights_each_pair_by_its_chance_to_survive():
    """Two groups: the first kept its right rollout and the better-scored wrong one of two (p = 1/2), the second
    every rollout; the survivors order both groups right, but the pruned wrong one stands for a pair ordered wrong."""
    cal = BinnedCalibrator(num_bins=8, capacity=16)
    scores, labels = torch.tensor([1.0, 0.0, 2.0, 3.0]), torch.tensor([1, 0, 1, 0])
    groups = torch.tensor([0, 0, 1, 1])
    cal.update(scores, labels, groups=groups, survival=torch.tensor([1.0, 0.5, 1.0, 1.0]))
    # group 0's pair counts 2 (right), group 1's counts 1 (wrong)
    assert cal.within_auc() == pytest.approx(2 / 3)
    assert cal.auc() == pytest.approx((2 * 1 + 2 * 1 + 0 + 0) / (2 + 2 + 1 + 1))  # pooled: the pairs across groups too
    clone = BinnedCalibrator(num_bins=8, capacity=16)
    clone.load_state_dict(cal.state_dict())
    assert clone.within_auc() == cal.within_auc()
    # a state saved before rows kept their survival reads its rows as every rollout
    clone.load_state_dict(
        {k: v for k, v in cal.state_dict().items() if k not in ("survival", "pair_right", "pair_total")}
    )
    assert clone.within_auc() == 0.5 and clone.posterior(scores).tolist() == cal.posterior(scores).tolist()
    with pytest.raises(ValueError, match="survival"):
        cal.update(scores, labels, survival=torch.tensor([1.0, 1.5, 1.0, 1.0]))
    with pytest.raises(ValueError, match="survival"):
        cal.update(scores, labels, survival=torch.ones(3))


def test_a_state_saved_without_groups_loads_with_each_row_alone():
    cal = BinnedCalibrator(num_bins=8, capacity=8)
    cal.update(torch.tensor([1.0, -1.0]), torch.tensor([1, 0]), groups=torch.tensor([0, 0]))
    old = {k: v for k, v in cal.state_dict().items() if k not in ("groups", "updates", "pair_right", "pair_total")}
    clone = BinnedCalibrator(num_bins=8, capacity=8)
    clone.load_state_dict(old)
    assert math.isnan(clone.within_auc()) and clone.auc() == 1.0
    clone.update(torch.tensor([2.0, -2.0]), torch.tensor([1, 0]), groups=torch.tensor([0, 0]))
    assert clone.within_auc() == 1.0


@settings(max_examples=40, deadline=None)
@given(
    pos=st.lists(st.integers(0, 50), min_size=8, max_size=8),
    neg=st.lists(st.integers(0, 50), min_size=8, max_size=8),
)
def test_posterior_monotone_when_likelihood_ratio_is(pos, neg):
    # Build counts whose smoothed likelihood ratio is non-decreasing across bins: then q must be too.
    pos_sorted = sorted(pos)
    neg_sorted = sorted(neg, reverse=True)
    cal = BinnedCalibrator(num_bins=8, capacity=10_000)
    centers = [logit((b + 0.5) / 8) for b in range(8)]
    scores, labels = [], []
    for b in range(8):
        scores += [centers[b]] * (pos_sorted[b] + neg_sorted[b])
        labels += [1] * pos_sorted[b] + [0] * neg_sorted[b]
    if not scores:
        return
    cal.update(torch.tensor(scores), torch.tensor(labels))
    q = cal.bin_posteriors()
    assert torch.all(q[1:] >= q[:-1] - 1e-12)


def test_bad_input_is_named():
    cal = BinnedCalibrator(num_bins=4)
    with pytest.raises(ValueError, match="labels"):
        cal.update(torch.tensor([0.0]), torch.tensor([2]))
    with pytest.raises(ValueError, match="differ in length"):
        cal.update(torch.tensor([0.0, 1.0]), torch.tensor([1]))
    with pytest.raises(ValueError, match="num_bins"):
        BinnedCalibrator(num_bins=0)
    other = BinnedCalibrator(num_bins=8)
    with pytest.raises(ValueError, match="num_bins"):
        other.load_state_dict(cal.state_dict())
