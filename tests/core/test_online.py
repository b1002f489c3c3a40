"""OnlinePruning: the pruning state a trainer holds (head, calibrator, replay window, optimizer), torch only."""

import copy

import torch

from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.online import OnlinePruning
from arrol_pl.core.pruning import PruningConfig


def labelled(n: int, dim: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    labels = (torch.rand(n, generator=g) < 0.5).float()
    features = torch.randn(n, dim, generator=g) + labels[:, None]  # separable along every axis
    return features, labels


def test_h_t_opens_after_the_cold_start_and_the_head_learns():
    torch.manual_seed(0)
    state = OnlinePruning(PruningConfig(cold_start_steps=2, keep_ratio=0.5), HeadConfig(hidden_dim=16, steps=20), 8, 0)
    assert not state.params_for(0).active and state.params_for(2).active
    losses = []
    for step in range(5):
        features, labels = labelled(64, 8, step)
        with torch.no_grad():
            scores = state.head(features)
        losses.append(state.update(features, scores, labels, torch.ones(64)))
    assert losses[-1] < losses[0]
    assert len(state.calibrator) == 5 * 64 and len(state.params_for(3).bin_posteriors) > 0


def test_ranks_share_h_t_but_draw_their_own_decisions():
    state = OnlinePruning(PruningConfig(cold_start_steps=0), HeadConfig(hidden_dim=8), 4, 1)
    one, rank0, rank1 = state.params_for(5), state.params_for(5, 0, 2), state.params_for(5, 1, 2)
    assert rank0.delta == rank1.delta == one.delta and rank0.bin_posteriors == rank1.bin_posteriors
    assert len({one.seed, rank0.seed, rank1.seed}) == 3


def test_state_dict_resumes_the_same_updates():
    def fresh():
        torch.manual_seed(3)
        return OnlinePruning(PruningConfig(), HeadConfig(hidden_dim=8, steps=3, batch_size=16), 4, 7)

    features, labels = labelled(32, 4, 1)
    a = fresh()
    a.update(features, torch.zeros(32), labels, torch.ones(32))
    b = fresh()
    b.head.load_state_dict(a.head.state_dict())
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as a checkpoint holds it: a copy, not a's own tensors
    more, more_labels = labelled(32, 4, 2)
    assert a.update(more, torch.zeros(32), more_labels, torch.ones(32)) == b.update(
        more, torch.zeros(32), more_labels, torch.ones(32)
    )
    assert all(torch.equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))


def generation(n: int, dim: int, seed: int, pruned_every: int = 3):
    """Engine-shaped records without the engine: every ``pruned_every``-th rollout pruned, survival p in (0.2, 1],
    one survivor without a feature (it ended before L_detect unscored)."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(seed)
    rollouts = [
        SimpleNamespace(
            pruned=i % pruned_every == 0,
            prompt_index=i // 4,
            feature=torch.randn(dim, generator=g),
            score=float(torch.randn(1, generator=g)),
            survival=0.2 + 0.8 * float(torch.rand(1, generator=g)),
        )
        for i in range(n)
    ]
    rollouts[1].feature, rollouts[1].score, rollouts[2].survival = None, None, None
    return SimpleNamespace(rollouts=rollouts)


def fresh_state(importance_weighting: bool = True) -> OnlinePruning:
    torch.manual_seed(5)
    return OnlinePruning(
        PruningConfig(importance_weighting=importance_weighting), HeadConfig(hidden_dim=8, steps=3, batch_size=8), 4, 11
    )


def same_state(a: OnlinePruning, b: OnlinePruning) -> bool:
    return (
        all(torch.equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
        and all(torch.equal(x, y) for x, y in zip(a.calibrator.buffer(), b.calibrator.buffer()))
        and a.calibrator.state_dict()["groups"].equal(b.calibrator.state_dict()["groups"])
    )


def test_observe_feeds_the_survivors_as_the_trainer_does():
    """observe(generation, rewards) = update on the survivors with a feature: their scores, 1[reward > 0.5], 1/p
    and their prompts as groups."""
    gen = generation(12, 4, 0)
    rewards = torch.tensor([float(i % 2) for i in range(12)])  # one per rollout; the pruned ones' ignored
    by_hand = fresh_state()
    rows = [r for r in gen.rollouts if not r.pruned and r.feature is not None]
    labels = torch.tensor([float(i % 2) for i, r in enumerate(gen.rollouts) if not r.pruned and r.feature is not None])
    survival = torch.tensor([1.0 if r.survival is None else r.survival for r in rows])
    loss = by_hand.update(
        torch.stack([r.feature for r in rows]),
        torch.tensor([r.score for r in rows]),
        labels,
        1.0 / survival,
        torch.tensor([r.prompt_index for r in rows]),
    )
    observed = fresh_state()
    assert observed.observe(gen, rewards) == loss
    assert same_state(observed, by_hand) and len(observed.calibrator) == len(rows) == 7
    per_survivor = fresh_state()  # the same rewards given per survivor, as graded rewards with explicit labels
    kept = [i for i, r in enumerate(gen.rollouts) if not r.pruned]
    assert per_survivor.observe(gen, 0.25 + 0.5 * rewards[kept], labels=rewards[kept]) == loss
    assert same_state(per_survivor, by_hand)


def test_observe_weighs_every_survivor_alike_without_importance_weighting():
    gen = generation(9, 4, 1)
    a, b = fresh_state(False), fresh_state(False)
    rows = [r for r in gen.rollouts if not r.pruned and r.feature is not None]
    a.observe(gen, torch.ones(9))
    b.update(
        torch.stack([r.feature for r in rows]),
        torch.tensor([r.score for r in rows]),
        torch.ones(len(rows)),
        torch.ones(len(rows)),
        torch.tensor([r.prompt_index for r in rows]),
    )
    assert same_state(a, b) and torch.equal(a.calibrator.buffer()[2], torch.ones(len(rows), dtype=torch.float64))


def test_observe_refuses_rewards_it_cannot_align_and_learns_nothing_without_survivors():
    import math

    import pytest

    gen = generation(6, 4, 2)
    state = fresh_state()
    with pytest.raises(ValueError, match="5 rewards for 4 survivors of 6 rollouts"):
        state.observe(gen, [1.0] * 5)
    for r in gen.rollouts:
        r.pruned = True
    assert math.isnan(state.observe(gen, [])) and len(state.calibrator) == 0
