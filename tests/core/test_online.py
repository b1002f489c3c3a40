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
    assert a.update(more, torch.zeros(32), more_labels, torch.ones(32)) == \
        b.update(more, torch.zeros(32), more_labels, torch.ones(32))
    assert all(torch.equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
