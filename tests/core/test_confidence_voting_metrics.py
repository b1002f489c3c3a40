import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arrol_pl.core.confidence import (
    PREFIX_STATISTICS,
    group_confidence,
    prefix_statistics,
    token_confidence,
    trace_confidence,
)
from arrol_pl.core.metrics import (
    balance_stats,
    binary_auc,
    expected_calibration_error,
    mean_accuracy,
    mean_sd_se,
    pass_at_k,
    spearman,
    vote_accuracy,
    within_block_slope,
    within_group_auc,
)
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.core.survivor_auc import inverse_survival, weighted_within_group_auc
from arrol_pl.core.voting import arrol_vote, majority_vote, rank_weights, weighted_vote


def test_token_and_trace_confidence_hand_computed():
    lp = torch.log(torch.tensor([[0.9, 0.05, 0.05], [0.4, 0.3, 0.3], [0.9, 0.05, 0.05], [0.9, 0.05, 0.05]]))
    conf = token_confidence(lp)
    c = conf.tolist()
    assert conf[0] == pytest.approx(-(math.log(0.9) + 2 * math.log(0.05)) / 3)
    assert conf[0] > conf[1]  # a peaked distribution is more confident
    groups = group_confidence(conf, window=2)
    assert groups.tolist() == pytest.approx([(c[0] + c[1]) / 2, (c[1] + c[2]) / 2, (c[2] + c[3]) / 2])
    assert trace_confidence(conf, "lowest_group", window=2) == pytest.approx(float(groups.min()))
    assert trace_confidence(conf, "bottom10", window=2) == pytest.approx(float(groups.min()))
    assert trace_confidence(conf, "tail", tail_tokens=2) == pytest.approx(float(conf[2:].mean()))
    assert trace_confidence(conf, "lowest_group", window=100) == pytest.approx(float(conf.mean()))
    with pytest.raises(ValueError, match="trace confidence mode"):
        trace_confidence(conf, "median")


def test_votes():
    answers = ["3", "5", "5", None, "3", "3"]
    assert majority_vote(answers) == "3"
    assert weighted_vote(answers, [0.1, 1.0, 1.0, 5.0, 0.1, 0.1]) == "5"
    assert majority_vote([None, None]) is None
    assert majority_vote(["a", "b"]) == "a"  # ties go to the first seen
    # rank weights: [lowest .. highest] → [0 .. 1], ties averaged
    assert rank_weights([2.0, -1.0, 5.0]).tolist() == pytest.approx([0.5, 0.0, 1.0])
    assert rank_weights([1.0, 1.0, 3.0]).tolist() == pytest.approx([0.25, 0.25, 1.0])
    assert rank_weights([7.0]).tolist() == [1.0]
    # two weak "3" votes lose to one strong "5" plus a middling "5"
    assert arrol_vote(["3", "3", "5", "5"], [0.0, 0.1, 9.0, 0.2]) == "5"


def test_pass_at_k_and_accuracy():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    assert pass_at_k(5, 4, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    correct = [[True, False, False, False], [True, True, True, False]]
    assert mean_accuracy(correct) == pytest.approx((0.25 + 0.75) / 2)
    answers = [["1", "2", "2", "2"], ["7", "7", "7", "8"]]
    assert vote_accuracy(answers, correct, majority_vote) == pytest.approx(0.5)
    assert vote_accuracy(answers, correct, weighted_vote, weights=[[10, 1, 1, 1], [1, 1, 1, 1]]) == pytest.approx(1.0)


def test_balance_stats_table4():
    rewards = torch.tensor([1, 1, 1, 1, 0, 1, 0, 0, 0, 0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 3, 3])
    stats = balance_stats(rewards, groups)
    assert stats["positive_ratio"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    assert stats["balance"] == pytest.approx(0.25 / 4)
    assert stats["zero_advantage_fraction"] == pytest.approx(3 / 4)


def test_rank_statistics():
    assert binary_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
    assert binary_auc(torch.tensor([1.0, 1.0]), torch.tensor([0, 1])) == pytest.approx(0.5)
    assert math.isnan(binary_auc(torch.tensor([1.0]), torch.tensor([1])))
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert math.isnan(spearman(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0])))
    probs = torch.tensor([0.1, 0.1, 0.9, 0.9])
    assert expected_calibration_error(probs, torch.tensor([0, 0, 1, 1])) == pytest.approx(0.1)


def test_within_group_auc_compares_only_rollouts_of_one_group():
    # pooled the scores separate perfectly (group 1 is easier), within each group they are reversed or tied
    scores = torch.tensor([0.1, 0.2, 0.9, 0.8, 0.8, 5.0, 5.0])
    labels = torch.tensor([0, 1, 0, 1, 1, 1, 1])
    groups = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    # group 0: 1 pair, right; group 1: pairs (0.8 vs 0.9) wrong twice; group 2: no negative
    assert within_group_auc(scores, labels, groups) == pytest.approx(1 / 3)
    assert within_group_auc(torch.tensor([1.0, 1.0]), torch.tensor([0, 1]), torch.tensor([4, 4])) == pytest.approx(0.5)
    assert math.isnan(within_group_auc(scores, torch.ones(7), groups))
    assert math.isnan(within_group_auc(torch.tensor([]), torch.tensor([]), torch.tensor([])))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-3, 3), st.booleans(), st.integers(0, 4)), min_size=1, max_size=40))
def test_within_group_auc_counts_every_pair_of_one_group(rows):
    """Against the definition, pair by pair: few distinct scores, so ties within and across groups are common."""
    right = pairs = 0.0
    for si, yi, gi in rows:
        for sj, yj, gj in rows:
            if gi == gj and yi and not yj:
                pairs += 1
                right += 1.0 if si > sj else 0.5 if si == sj else 0.0
    scores, labels, groups = (torch.tensor([r[k] for r in rows]) for k in range(3))
    got = within_group_auc(scores.double(), labels, groups)
    assert (math.isnan(got) and pairs == 0) or got == pytest.approx(right / pairs)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(-3, 3), st.booleans(), st.integers(0, 4), st.sampled_from([0.0, 0.5, 1, 3])),
        min_size=1,
        max_size=40,
    )
)
def test_weighted_within_group_auc_counts_each_pair_by_its_two_weights(rows):
    right = pairs = 0.0
    for si, yi, gi, wi in rows:
        for sj, yj, gj, wj in rows:
            if gi == gj and yi and not yj:
                pairs += wi * wj
                right += wi * wj * (1.0 if si > sj else 0.5 if si == sj else 0.0)
    scores, labels, groups, weights = (torch.tensor([r[k] for r in rows]) for k in range(4))
    got = weighted_within_group_auc(scores.double(), labels, groups, weights)
    assert (math.isnan(got) and pairs == 0) or got == pytest.approx(right / pairs)
    unit = weighted_within_group_auc(scores.double(), labels, groups, torch.ones(len(rows)))
    plain = within_group_auc(scores.double(), labels, groups)
    assert unit == plain or math.isnan(unit) and math.isnan(plain), "unit weights: the plain AUC, to the bit"


def test_weights_from_survival_leave_out_what_no_draw_kept():
    assert inverse_survival(torch.tensor([1.0, 0.5, 0.0])).tolist() == [1.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="differ in length"):
        weighted_within_group_auc(torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(2))


def test_quality_head_learns_a_separable_signal():
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).float()
    head = QualityHead(16, 32)
    opt = torch.optim.Adam(head.parameters(), lr=3e-2)
    for _ in range(100):
        opt.zero_grad()
        head.loss(x, y).backward()
        opt.step()
    acc = float(((head(x) > 0).float() == y).float().mean())
    assert acc > 0.95
    with pytest.raises(ValueError, match="features of size 16"):
        head(torch.randn(2, 8))
    # gradients never reach the features (detached backbone)
    feats = torch.randn(4, 16, requires_grad=True)
    head.loss(feats, torch.ones(4)).backward()
    assert feats.grad is None


def test_mean_sd_se_is_the_sample_sd_and_the_standard_error():
    mean, sd, se = mean_sd_se([0.1, 0.3, 0.2, 0.6])
    assert mean == pytest.approx(0.3)
    assert sd == pytest.approx(math.sqrt(((0.2) ** 2 + 0 + 0.1**2 + 0.3**2) / 3))
    assert se == pytest.approx(sd / 2)
    assert mean_sd_se(torch.tensor([[1.0, 3.0]])) == pytest.approx((2.0, math.sqrt(2), 1.0))
    one = mean_sd_se([0.5])
    assert one[0] == 0.5 and math.isnan(one[1]) and math.isnan(one[2])
    assert all(math.isnan(v) for v in mean_sd_se([]))


def test_prefix_statistics_read_only_the_prefix_and_name_bad_log_probs():
    logprobs = [{0: -0.1, 1: -2.5}, {5: -1.5, 2: -0.5}, {0: -0.2, 3: -1.8}]
    two = prefix_statistics([0, 5, 0], logprobs, length=2, topk=2)
    assert two.dtype == torch.float64 and two.shape == (len(PREFIX_STATISTICS),)
    assert two.tolist() == pytest.approx([-0.8, -1.5, -1.5, 1.15, 0.5])
    # a rollout shorter than L reads all of its tokens
    assert prefix_statistics([0, 5, 0], logprobs, length=10, topk=2)[2] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="lack the sampled token 7"):
        prefix_statistics([0, 7], logprobs, length=2)
    with pytest.raises(ValueError, match="at least one token"):
        prefix_statistics([], [], length=4)


def test_within_block_slope_centres_each_block_before_fitting():
    # y = 2x plus a different offset per block: the slope is exact, whatever the offsets
    exact = [(b, x, 2 * x + offset) for b, offset in (("a", 0.0), ("b", 5.0)) for x in (0.6, 0.7, 0.8)]
    slope, se, dof = within_block_slope(exact)
    assert slope == pytest.approx(2.0) and se == pytest.approx(0.0, abs=1e-9) and dof == 6 - 2 - 1
    # by hand: centred (-.5, -.5), (.5, .5), (-.5, -1), (.5, 1); slope 1.5, residual sum 0.25 on 4 - 2 - 1 dof
    slope, se, dof = within_block_slope([("a", 0, 0), ("a", 1, 1), ("b", 0, 1), ("b", 1, 3)])
    assert slope == pytest.approx(1.5) and se == pytest.approx(0.5) and dof == 1
    # pooled, the offsets would read as a slope: block b sits at higher x and higher y
    assert within_block_slope([("a", 0, 0), ("a", 1, 0), ("b", 2, 9), ("b", 3, 9)])[0] == pytest.approx(0.0)
    assert within_block_slope([("a", 0.5, 1), ("b", 0.5, 2), ("b", 0.5, 3)]) is None  # x never varies in a block
    assert within_block_slope([("a", 0, 0), ("a", 1, 1)]) is None  # no residual to estimate the noise from
