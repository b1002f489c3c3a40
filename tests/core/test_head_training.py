"""The quality head's online recipe (paper §4.2–4.3 (iii)): replay window, BCE update, metrics, save/load, and
its inputs beyond the paper (prefix statistics, standardised inside the head)."""

import math

import pytest
import torch

from arrol_pl.core.head_training import FeatureReplay, HeadConfig, head_quality, head_update
from arrol_pl.core.confidence import PREFIX_STATISTICS
from arrol_pl.core.quality_head import HEAD_INPUTS, QualityHead, head_input_dim


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
        HeadConfig(lr=0.0)
    with pytest.raises(ValueError, match=r"^replay must be >= 1 or null"):
        HeadConfig(replay=0)


def test_save_and_load_round_trip(tmp_path):
    head = QualityHead(8, 4)
    head.save(tmp_path / "quality_head.pt")
    back = QualityHead.load(tmp_path / "quality_head.pt")
    assert (back.input_dim, back.hidden_dim, back.training) == (8, 4, False)
    x = torch.randn(3, 8)
    torch.testing.assert_close(back(x), head(x))


def test_head_inputs_name_their_width_and_bad_kinds_are_named():
    assert [head_input_dim(kind, 64) for kind in HEAD_INPUTS] == [
        64,
        len(PREFIX_STATISTICS),
        64 + len(PREFIX_STATISTICS),
    ]
    with pytest.raises(ValueError, match=r"^input='mean'; choose one of"):
        HeadConfig(input="mean")
    with pytest.raises(ValueError, match="input='hidden'"):
        head_input_dim("hidden", 64)
    assert HeadConfig(input="last+stats").input == "last+stats"


def test_a_stats_head_z_scores_its_input_with_stored_moments():
    torch.manual_seed(0)
    features = torch.randn(64, 3) * torch.tensor([100.0, 0.01, 1.0]) + torch.tensor([-50.0, 3.0, 0.0])
    features[:, 2] = 7.0  # a constant column keeps a finite scale
    head = QualityHead(3, 4, "stats")
    assert head.standardize and set(head.state_dict()) >= {"input_mean", "input_std"}
    raw = head(features)
    head.set_input_moments(features)
    torch.testing.assert_close(head.input_mean, features.mean(0))
    z = (features - features.mean(0)) / features.std(0, correction=0).clamp_min(1e-6)
    expected = head.fc2(torch.nn.functional.gelu(head.fc1(z))).squeeze(-1)
    torch.testing.assert_close(head(features), expected)
    assert not torch.allclose(head(features), raw) and torch.isfinite(head(features)).all()
    paper = QualityHead(3, 4)  # the paper's hidden-state head reads its input raw
    paper.set_input_moments(features)
    assert not paper.standardize and "input_mean" not in paper.state_dict()


def test_head_update_takes_the_replay_windows_moments_and_learns_on_mixed_scales():
    torch.manual_seed(1)
    labels = (torch.rand(512) < 0.4).float()
    signal = labels + 0.5 * torch.randn(512)
    features = torch.stack([1000.0 * signal - 4000.0, 0.001 * torch.randn(512), torch.randn(512)], 1)
    head = QualityHead(3, 16, "stats")
    replay = FeatureReplay(None)
    replay.add(features, labels, torch.ones(512))
    head_update(head, torch.optim.AdamW(head.parameters(), lr=1e-2), replay, 100, 128, torch.Generator().manual_seed(0))
    torch.testing.assert_close(head.input_mean, features.mean(0))
    with torch.no_grad():
        assert head_quality(head(features), None, labels)["auc"] > 0.85


def test_save_and_load_keep_the_input_kind_and_moments(tmp_path):
    head = QualityHead(5, 4, "last+stats")
    head.set_input_moments(torch.randn(10, 5) * 3 + 1)
    head.save(tmp_path / "quality_head.pt")
    back = QualityHead.load(tmp_path / "quality_head.pt")
    assert (back.input_kind, back.standardize) == ("last+stats", True)
    torch.testing.assert_close(back.input_std, head.input_std)
    x = torch.randn(3, 5)
    torch.testing.assert_close(back(x), head(x))
    again = QualityHead.from_state_dict(head.state_dict(), "last+stats")
    torch.testing.assert_close(again(x), head(x))
    # a file written before head inputs existed reads as the paper's head
    old = QualityHead(8, 4)
    torch.save({"state_dict": old.state_dict(), "input_dim": 8, "hidden_dim": 4}, tmp_path / "old.pt")
    loaded = QualityHead.load(tmp_path / "old.pt")
    assert (loaded.input_kind, loaded.standardize) == ("last", False)
