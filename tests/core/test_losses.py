"""verl's vanilla PPO loss, aggregation and KL estimators against references computed by hand, one test
per branch (arrol_pl/core/losses.py)."""

import math

import pytest
import torch

from arrol_pl.core.advantages import grpo_advantages
from arrol_pl.core.losses import (
    LOSS_AGG_MODES,
    aggregate_loss,
    batch_counts,
    kl_penalty,
    ppo_clip_loss,
    truncated_is_weights,
)


def loss_and_grad(ratio: float, adv: float, **kw):
    """One token with π_θ/π_old = ``ratio``: (loss, d loss / d log π_θ, output)."""
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    out = ppo_clip_loss(lp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), loss_agg_mode="token-mean", **kw)
    out.loss.backward()
    return out.loss.item(), float(lp.grad), out


def test_ratio_above_one_plus_eps_high_with_positive_advantage_is_clipped():
    # r = 1.5 > 1.28, A = 2: max(-2·1.5, -2·1.28) = -2.56, no gradient, a high-side clip.
    loss, grad, out = loss_and_grad(1.5, 2.0, clip_low=0.2, clip_high=0.28)
    assert loss == pytest.approx(-2.56)
    assert grad == 0.0
    assert (float(out.clip_fraction_high), float(out.clip_fraction_low), float(out.clip_fraction)) == (1.0, 0.0, 1.0)
    # inside the bound (r = 1.2 < 1.28) the surrogate is -A r with gradient -A r = -2.4
    loss, grad, out = loss_and_grad(1.2, 2.0, clip_low=0.2, clip_high=0.28)
    assert (loss, grad) == pytest.approx((-2.4, -2.4))
    assert float(out.clip_fraction) == 0.0
    # the same ratio is clipped by GRPO's symmetric 0.2: what clip-higher changes
    assert loss_and_grad(1.25, 1.0, clip_low=0.2, clip_high=0.2)[0] == pytest.approx(-1.2)
    assert loss_and_grad(1.25, 1.0, clip_low=0.2, clip_high=0.28)[0] == pytest.approx(-1.25)


def test_ratio_below_one_minus_eps_low_with_negative_advantage_is_clipped():
    # r = 0.5 < 0.8, A = -1: max(0.5, 0.8) = 0.8, no gradient, a low-side clip.
    loss, grad, out = loss_and_grad(0.5, -1.0, clip_low=0.2, clip_high=0.28)
    assert loss == pytest.approx(0.8)
    assert grad == 0.0
    assert (float(out.clip_fraction_low), float(out.clip_fraction_high), float(out.dual_clip_fraction)) == (
        1.0,
        0.0,
        0.0,
    )
    # r = 0.5 with A > 0 is not clipped (the min keeps the pessimistic r A = 0.5)
    loss, grad, out = loss_and_grad(0.5, 1.0)
    assert (loss, grad) == pytest.approx((-0.5, -0.5))
    assert float(out.clip_fraction) == 0.0


def test_ratio_above_clip_ratio_c_with_negative_advantage_is_dual_clipped():
    # r = 4, A = -1: PPO-clip gives max(4, 1.2) = 4; dual-clip caps it at -A c = 3, with no gradient.
    loss, grad, out = loss_and_grad(4.0, -1.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(3.0)
    assert grad == 0.0
    assert float(out.dual_clip_fraction) == 1.0 and float(out.clip_fraction) == 0.0
    # below c the dual clip does nothing: loss r = 2, gradient -A r = 2
    loss, grad, out = loss_and_grad(2.0, -1.0, clip_ratio_c=3.0)
    assert (loss, grad) == pytest.approx((2.0, 2.0))
    assert float(out.dual_clip_fraction) == 0.0
    # off (None): the full 4 with gradient 4; positive advantages never see it
    assert loss_and_grad(4.0, -1.0, clip_ratio_c=None)[:2] == pytest.approx((4.0, 4.0))
    assert loss_and_grad(4.0, 1.0, clip_ratio_c=3.0)[0] == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        loss_and_grad(2.0, -1.0, clip_ratio_c=1.0)


def test_log_ratio_of_100_is_clamped_to_20_before_exp():
    for lr, adv, dual, expected in [
        (100.0, 1.0, 3.0, -1.2),
        (100.0, -1.0, 3.0, 3.0),
        (100.0, -1.0, None, math.exp(20.0)),
        (-100.0, -1.0, 3.0, 0.8),
    ]:
        lp = torch.tensor([[lr]], requires_grad=True)
        out = ppo_clip_loss(
            lp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), loss_agg_mode="token-mean", clip_ratio_c=dual
        )
        out.loss.backward()
        assert out.loss.item() == pytest.approx(expected, rel=1e-5)
        assert math.isfinite(float(lp.grad)) and math.isfinite(float(out.ratio_max))
    assert float(out.ratio_max) == pytest.approx(math.exp(-20.0), rel=1e-5)


def test_ratio_statistics_and_old_to_new_kl_hand_computed():
    # ratios 1.5 and 0.5 on the real tokens, a third (masked) token with ratio e must be ignored.
    new = torch.log(torch.tensor([[1.5, 0.5, math.e]]))
    out = ppo_clip_loss(new, torch.zeros(1, 3), torch.tensor([1.0]), torch.tensor([[1, 1, 0]]), 0.2, 0.28, "token-mean")
    assert out.loss.item() == pytest.approx(-(1.28 + 0.5) / 2)
    assert (float(out.ratio_min), float(out.ratio_mean), float(out.ratio_max)) == pytest.approx((0.5, 1.0, 1.5))
    assert float(out.ppo_kl) == pytest.approx(-(math.log(1.5) + math.log(0.5)) / 2)
    assert float(out.approx_kl) == pytest.approx((0.5 - math.log(1.5) + (-0.5) - math.log(0.5)) / 2)
    assert out.tokens == 2


def test_all_empty_mask_gives_zero_loss_and_zero_gradient_in_every_mode():
    for mode in LOSS_AGG_MODES:
        lp = torch.randn(3, 4, requires_grad=True)
        out = ppo_clip_loss(
            lp, torch.zeros(3, 4), torch.tensor([1.0, -1.0, 2.0]), torch.zeros(3, 4), loss_agg_mode=mode
        )
        out.loss.backward()
        assert out.loss.item() == 0.0, mode
        assert torch.all(lp.grad == 0), mode
        assert float(out.clip_fraction) == 0.0 and out.tokens == 0


def test_singleton_groups_contribute_nothing():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 2])  # groups 1 and 2 are singletons: advantage 0
    adv = grpo_advantages(rewards, groups)
    lp = torch.randn(4, 3, requires_grad=True)
    ppo_clip_loss(lp, lp.detach(), adv, torch.ones(4, 3)).loss.backward()
    assert torch.all(lp.grad[2:] == 0) and torch.all(lp.grad[:2] != 0)


def test_aggregation_modes_hand_computed_with_an_empty_row():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # row 3 is empty: no token, no sequence
    assert batch_counts(mask) == (4, 2)
    assert float(aggregate_loss(loss, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum")) == pytest.approx((6 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm")) == pytest.approx(10 / (2 * 3))
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum-norm", norm_length=5)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="seq-sum"):
        aggregate_loss(loss, mask, "seq-sum")


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_losses_sum_to_the_mini_batch_loss(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) < 0.7).long()
    mask[:, 0] = 1
    mask[4] = 0  # an empty row inside one micro-batch
    full = aggregate_loss(loss, mask, mode, norm_length=5)
    tokens, seqs = batch_counts(mask)
    parts = [aggregate_loss(loss[i : i + 2], mask[i : i + 2], mode, 5, tokens, seqs) for i in range(0, 6, 2)]
    assert float(sum(parts)) == pytest.approx(float(full), rel=1e-6)


def test_kl_estimators_hand_computed_with_verl_names():
    lp = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.2]]))
    for name in ("k1", "kl"):
        assert kl_penalty(lp, ref, name).tolist()[0] == pytest.approx([math.log(2), 0.0])
    for name in ("k2", "mse"):
        assert kl_penalty(lp, ref, name).tolist()[0] == pytest.approx([0.5 * math.log(2) ** 2, 0.0])
    for name in ("k3", "low_var_kl"):  # Δ = log(0.25/0.5): e^Δ - Δ - 1
        assert kl_penalty(lp, ref, name).tolist()[0] == pytest.approx([0.5 - math.log(0.5) - 1, 0.0])
    assert torch.all(kl_penalty(torch.randn(3, 5), torch.randn(3, 5), "k3") >= 0)
    with pytest.raises(ValueError, match="KL estimator"):
        kl_penalty(lp, ref, "k4")


def test_k3_is_clamped_to_ten():
    # Δ = 3: e^3 - 4 = 16.1 → 10; Δ = -5: e^-5 + 4 = 4.0067 (inside); Δ = 100 → 20 → still 10, finite.
    lp = torch.zeros(1, 3)
    ref = torch.tensor([[3.0, -5.0, 100.0]])
    assert kl_penalty(lp, ref, "low_var_kl").tolist()[0] == pytest.approx([10.0, math.exp(-5) + 4, 10.0])


def test_kl_term_enters_the_loss_with_its_coefficient():
    lp = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.2]]))
    out = ppo_clip_loss(
        lp,
        lp.detach(),
        torch.tensor([0.0]),
        torch.ones(1, 2),
        ref_log_probs=ref,
        kl_coef=0.1,
        loss_agg_mode="token-mean",
        kl_estimator="mse",
    )
    assert out.loss.item() == pytest.approx(0.1 * 0.5 * math.log(2) ** 2 / 2)
    assert float(out.kl) == pytest.approx(0.5 * math.log(2) ** 2 / 2)


def test_truncated_importance_weights_scale_the_policy_loss():
    old = torch.log(torch.tensor([[0.5, 0.25, 0.5]]))
    engine = torch.log(torch.tensor([[0.25, 0.5, 0.5]]))
    w = truncated_is_weights(old, engine, cap=1.5)
    assert w.tolist()[0] == pytest.approx([1.5, 0.5, 1.0])  # 2 capped at 1.5; 0.5; 1
    lp = old.clone().requires_grad_(True)
    out = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 3), loss_agg_mode="token-mean", is_weights=w)
    assert out.loss.item() == pytest.approx(-(1.5 + 0.5 + 1.0) / 3)
    assert float(truncated_is_weights(torch.zeros(1, 1), torch.full((1, 1), -100.0), cap=1e12)) == pytest.approx(
        math.exp(20.0), rel=1e-5
    )
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(old, engine, cap=0.0)
