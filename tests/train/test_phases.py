import torch

from arrol_pl.core.quality_head import QualityHead
from arrol_pl.train.phases import FeatureReplay, head_update, step_advantages
from arrol_pl.train.config import AlgoConfig


def test_feature_replay_keeps_the_newest_window():
    replay = FeatureReplay(capacity=5)
    replay.add(torch.arange(3.0).unsqueeze(1), torch.tensor([0, 1, 0]), torch.ones(3))
    replay.add(torch.arange(3.0, 7.0).unsqueeze(1), torch.tensor([1, 1, 0, 0]), torch.ones(4))
    assert len(replay) == 5
    assert replay.features.squeeze(1).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert replay.labels.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]
    clone = FeatureReplay(1)
    clone.load_state_dict(replay.state_dict())
    assert clone.capacity == 5 and torch.equal(clone.features, replay.features)


def test_head_update_learns_from_the_replay_window():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = (x[:, 0] > 0).float()
    replay = FeatureReplay(1024)
    replay.add(x, y, torch.ones(512))
    head = QualityHead(8, 32)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-2)
    first = head_update(head, opt, replay, steps=1, batch_size=128, generator=g)
    for _ in range(10):
        last = head_update(head, opt, replay, steps=10, batch_size=128, generator=g)
    assert last < 0.5 * first
    assert float(((head(x) > 0).float() == y).float().mean()) > 0.9


def test_dynamic_sampling_rows_follow_the_algo():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    _, rows = step_advantages(rewards, groups, AlgoConfig())
    assert rows.all()
    adv, rows = step_advantages(rewards, groups, AlgoConfig(dynamic_sampling=True))
    assert rows.tolist() == [False, False, True, True]
    assert adv[:2].tolist() == [0.0, 0.0]
