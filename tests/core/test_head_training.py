"""The quality head's online recipe (paper §4.2–4.3 (iii)): replay window, BCE update, metrics, save/load."""

import math

import pytest
import torch

from arrol_pl.core.head_training import FeatureReplay, HeadTrainingConfig, head_quality, head_update
from arrol_pl.core.quality_head import QualityHead


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


def test_an_unbounded_window_keeps_everything():
    replay = FeatureReplay(None)
    for _ in range(3):
        replay.add(torch.zeros(4, 2), torch.ones(4), torch.ones(4))
    assert len(replay) == 12
    clone = FeatureReplay(1)
    clone.load_state_dict(replay.state_dict())
    assert clone.capacity is None


def test_head_quality_names_its_metrics_without_a_prefix_and_nan_where_undefined():
    scores, labels = torch.tensor([2.0, -1.0, 0.5, -3.0]), torch.tensor([1, 0, 0, 0])
    m = head_quality(scores, None, labels)
    assert m["accuracy"] == 0.75 and m["auc"] == 1.0
    assert math.isnan(m["calibration_error"]) and math.isnan(m["posterior_accuracy"])
    m = head_quality(scores, torch.tensor([0.9, 0.2, 0.6, 0.1]), labels)
    assert m["posterior_accuracy"] == 0.75 and m["calibration_error"] > 0
    assert math.isnan(head_quality(scores, None, torch.ones(4))["auc"]), "one class: no AUC"
    # within groups: group 0 = rollouts 0, 1 (ordered right), group 1 = rollouts 2, 3 (one class: no pair)
    assert math.isnan(m["within_auc"])
    groups = torch.tensor([0, 0, 1, 1])
    assert head_quality(scores, None, labels, groups)["within_auc"] == 1.0
    flipped = torch.tensor([-2.0, 1.0, 0.5, -3.0])  # pooled AUC 1/3, the one mixed group ordered wrong
    assert head_quality(flipped, None, labels, groups)["within_auc"] == 0.0
    assert math.isnan(head_quality(scores, None, labels, torch.tensor([0, 1, 2, 3]))["within_auc"])


def test_head_training_config_names_the_bad_key():
    with pytest.raises(ValueError, match=r"^lr must be > 0"):
        HeadTrainingConfig(lr=0.0)
    with pytest.raises(ValueError, match=r"^replay must be >= 1 or null"):
        HeadTrainingConfig(replay=0)


def test_save_and_load_round_trip(tmp_path):
    head = QualityHead(8, 4)
    head.save(tmp_path / "quality_head.pt")
    back = QualityHead.load(tmp_path / "quality_head.pt")
    assert (back.input_dim, back.hidden_dim, back.training) == (8, 4, False)
    x = torch.randn(3, 8)
    torch.testing.assert_close(back(x), head(x))
