import itertools
import math

import pytest
import torch

from arrol_pl.core.screen_audit import AuditCounts, audit_mask, zero_variance
from arrol_pl.core.screening import GroupScreen, ScreenConfig, oversampled, select_groups, zero_advantage_probability


def test_zero_advantage_probability_matches_enumeration():
    """P0 = Π q + Π (1 − q), checked against summing the probability of every all-equal outcome."""
    q = torch.tensor([0.9, 0.2, 0.6, 0.3, 0.5, 0.5, 0.99])
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    p0 = zero_advantage_probability(q, ids)
    for g, members in enumerate((q[:3], q[3:])):
        total = 0.0
        for outcome in itertools.product((0, 1), repeat=len(members)):
            if len(set(outcome)) == 1:
                total += math.prod(float(m) if o else 1 - float(m) for m, o in zip(members, outcome))
        assert float(p0[g]) == pytest.approx(total, abs=1e-12)


def test_zero_advantage_probability_of_a_shared_q():
    q = torch.tensor([0.0, 0.5, 0.1, 1.0], dtype=torch.float64)
    p0 = zero_advantage_probability(q, group_size=8)
    assert p0.tolist() == pytest.approx([1.0, 2 * 0.5**8, 0.9**8 + 0.1**8, 1.0], abs=1e-9)
    # The same as giving every member of a group that q.
    ids = torch.arange(4).repeat_interleave(8)
    assert zero_advantage_probability(q.repeat_interleave(8), ids).tolist() == pytest.approx(p0.tolist(), abs=1e-9)


def test_select_groups_keeps_the_lowest_p0_and_breaks_ties_at_random():
    p0 = torch.tensor([0.9, 0.1, 0.5, 0.1, 0.7, 0.3])
    keep = select_groups(p0, 3, torch.Generator().manual_seed(0))
    assert keep.tolist() == [False, True, False, True, False, True]
    tied = torch.full((10,), 0.2)
    picks = {tuple(select_groups(tied, 4, torch.Generator().manual_seed(s)).tolist()) for s in range(20)}
    assert len(picks) > 10 and all(sum(p) == 4 for p in picks)


def test_select_groups_without_scores_is_uniform_and_uses_the_same_draws():
    counts = torch.zeros(6)
    for s in range(3000):
        keep = select_groups(None, 2, torch.Generator().manual_seed(s), num_groups=6)
        assert int(keep.sum()) == 2
        counts += keep.float()
    assert torch.allclose(counts / 3000, torch.full((6,), 2 / 6), atol=0.03)
    # With ties everywhere the ranked screen falls back to exactly the random one (one stream, both modes).
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert select_groups(torch.zeros(6), 2, g1).tolist() == select_groups(None, 2, g2, num_groups=6).tolist()


def test_audit_mask_share():
    share = torch.stack([audit_mask(50, 0.1, torch.Generator().manual_seed(s)) for s in range(400)]).float().mean()
    assert float(share) == pytest.approx(0.1, abs=0.01)
    assert not audit_mask(50, 0.0, torch.Generator().manual_seed(0)).any()


def test_zero_variance():
    assert zero_variance(torch.ones(8)) and zero_variance(torch.zeros(8))
    assert not zero_variance(torch.tensor([1.0, 0.0, 1.0]))


def test_stage_counts():
    assert ScreenConfig().counts(8) == (8, 8)
    assert ScreenConfig(stages="detect", oversample=1.0).counts(8) == (16, 16)
    assert ScreenConfig(stages="prompt", prompt_oversample=2.0).counts(8) == (24, 8)
    assert ScreenConfig(stages="prompt+detect", oversample=0.25, prompt_oversample=1.0).counts(8) == (20, 10)
    assert oversampled(8, 0.25) == 10 and oversampled(3, 0.5) == 5


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"stages": "both"}, "screen.stages='both'"),
        ({"oversample": -1}, "screen.oversample must be in"),
        ({"audit": 1.5}, "screen.audit must be in"),
    ],
)
def test_screen_config_names_the_bad_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScreenConfig(**kwargs)


def test_group_screen_shadow_groups_are_audited():
    s = GroupScreen(keep=2, audited=frozenset({1}), shadow=frozenset({3}))
    assert s.is_audited(1) and s.is_audited(3) and not s.is_audited(0)
    assert s.is_shadow(3) and not s.is_shadow(1)
    with pytest.raises(ValueError, match="keep must be >= 1"):
        GroupScreen(keep=0)


def test_audit_precisions():
    # 10 audited groups, 4 zero-advantage; the screen dropped 5 of them, 3 zero; the stage drops half.
    c = AuditCounts.of_step(
        torch.tensor([1, 1, 1, 0, 0, 1, 0, 0, 0, 0], dtype=torch.bool),
        torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], dtype=torch.bool),
        0.5,
    )
    p = c.precisions()
    assert p["screen"] == pytest.approx(3 / 5) and p["random"] == pytest.approx(4 / 10)
    assert p["oracle"] == pytest.approx(0.8)  # a perfect screen drops 5 groups, 4 of them zero
    assert p["progress"] == pytest.approx((0.6 - 0.4) / (0.8 - 0.4))
    total = c + c
    assert total.audited == 20 and total.precisions() == pytest.approx(p)
    assert math.isnan(AuditCounts().precisions()["screen"])
