import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arrol_pl.core.advantages import compute_advantages, dynamic_sampling_mask, grpo_advantages


def test_grpo_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    adv = grpo_advantages(rewards, groups, eps=0.0)
    # group 0: mean 1/3, unbiased std sqrt(1/3); group 1 constant → 0; group 2 singleton → 0
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    assert adv[:3].tolist() == pytest.approx([(2 / 3) / std, -(1 / 3) / std, -(1 / 3) / std], rel=1e-5)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_singleton_groups_get_zero_advantage_in_every_estimator():
    rewards = torch.tensor([1.0, 0.0, 1.0])
    groups = torch.tensor([0, 1, 2])  # three singletons: no baseline anywhere
    for name in ("grpo", "drgrpo"):
        assert compute_advantages(name, rewards, groups).tolist() == [0.0, 0.0, 0.0]


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


def test_a_lone_survivor_gets_zero_or_verls_advantage():
    from arrol_pl.core.advantages import compute_advantages

    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 1, 1, 2])  # groups 0 and 2 have one survivor each
    zero = compute_advantages("grpo", rewards, groups)
    assert zero[0] == 0 and zero[3] == 0 and zero[1] < 0 < zero[2]
    verl = compute_advantages("grpo", rewards, groups, lone="verl")  # verl: mean 0, std 1 for a group of one
    assert torch.allclose(verl[[0, 3]], torch.tensor([1 / (1 + 1e-6)] * 2)) and torch.equal(verl[1:3], zero[1:3])
    assert torch.equal(compute_advantages("drgrpo", rewards, groups, lone="verl")[[0, 3]], torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="lone='one'"):
        compute_advantages("grpo", rewards, groups, lone="one")
