import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arrol_pl.core.advantages import compute_advantages, dynamic_sampling_mask, grpo_advantages
from arrol_pl.core.losses import aggregate_loss, kl_penalty, ppo_clip_loss


def test_grpo_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    adv = grpo_advantages(rewards, groups, eps=0.0)
    # group 0: mean 1/3, unbiased std sqrt(1/3); group 1 constant → 0; group 2 singleton → 0
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    assert adv[:3].tolist() == pytest.approx([(2 / 3) / std, -(1 / 3) / std, -(1 / 3) / std], rel=1e-5)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_drgrpo_is_mean_centred():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = compute_advantages("drgrpo", rewards, torch.zeros(4, dtype=torch.long))
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages("ppo-gae", rewards, torch.zeros(4, dtype=torch.long))


@settings(max_examples=50, deadline=None)
@given(data=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, 1.0, 0.5])), min_size=1, max_size=40))
def test_vectorised_matches_loop(data):
    groups = torch.tensor([g for g, _ in data])
    rewards = torch.tensor([r for _, r in data])
    adv = grpo_advantages(rewards, groups, eps=1e-6)
    for i, (g, r) in enumerate(data):
        members = [rr for gg, rr in data if gg == g]
        if len(members) < 2:
            expected = 0.0
        else:
            mean = sum(members) / len(members)
            std = math.sqrt(sum((m - mean) ** 2 for m in members) / (len(members) - 1))
            expected = (r - mean) / (std + 1e-6)
        assert float(adv[i]) == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_dynamic_sampling_drops_uniform_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert dynamic_sampling_mask(rewards, groups).tolist() == [False, False, True, True, False, False, False]


def test_aggregation_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate_loss(loss, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm")) == pytest.approx(10 / (2 * 3))
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm", norm_length=5)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="seq-sum"):
        aggregate_loss(loss, mask, "seq-sum")


def test_ppo_clip_hand_computed_with_clip_higher():
    # One sequence, two tokens. ratio = [1.5, 0.5]; A = +1 then DAPO bounds [0.8, 1.28].
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.5, 0.5]]))
    out = ppo_clip_loss(new, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.28, "token-mean")
    # token 1: min(1.5, 1.28) = 1.28; token 2: min(0.5, 0.8) = 0.5 → loss = -(1.28 + 0.5) / 2
    assert float(out.loss) == pytest.approx(-(1.28 + 0.5) / 2)
    assert float(out.clip_fraction) == pytest.approx(0.5)
    # negative advantage: -min(-r, -clip(r)) = max(r, clip(r)) → token 1: 1.5, token 2: 0.8
    out = ppo_clip_loss(new, old, torch.tensor([-1.0]), torch.ones(1, 2), 0.2, 0.28, "token-mean")
    assert float(out.loss) == pytest.approx((1.5 + 0.8) / 2)


def test_ppo_gradient_vanishes_for_zero_advantage_and_on_policy_equals_pg():
    logits = torch.randn(2, 4, requires_grad=True)
    lp = torch.log_softmax(logits, -1)
    out = ppo_clip_loss(lp, lp.detach(), torch.tensor([0.0, 0.0]), torch.ones(2, 4))
    out.loss.backward()
    assert torch.all(logits.grad == 0)


def test_kl_estimators():
    lp = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.2]]))
    assert kl_penalty(lp, ref, "k1").tolist()[0] == pytest.approx([math.log(2), 0.0])
    k3 = kl_penalty(lp, ref, "k3")
    assert k3.tolist()[0] == pytest.approx([0.5 - math.log(0.5) - 1, 0.0])
    assert torch.all(kl_penalty(torch.randn(3, 5), torch.randn(3, 5), "k3") >= 0)
    out = ppo_clip_loss(lp, lp.detach(), torch.tensor([0.0]), torch.ones(1, 2), ref_log_probs=ref, kl_coef=0.1, loss_agg_mode="token-mean")
    assert float(out.loss) == pytest.approx(0.1 * float(k3.mean()), rel=1e-5)
    with pytest.raises(ValueError, match="KL estimator"):
        kl_penalty(lp, ref, "k2")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batch_losses_sum_to_the_full_batch_loss(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) < 0.7).long()
    mask[:, 0] = 1
    full = aggregate_loss(loss, mask, mode, norm_length=5)
    tokens, seqs = int(mask.sum()), 6
    parts = [aggregate_loss(loss[i : i + 2], mask[i : i + 2], mode, 5, tokens, seqs) for i in range(0, 6, 2)]
    assert float(sum(parts)) == pytest.approx(float(full), rel=1e-6)
