"""The exported quality head on the hub's terms (arrol_pl.models.head): saved as safetensors plus a config JSON
and a card, loaded back with one call to the same logits, input moments and calibrator, strictly; the run's card;
the push target checked before a run starts (the push of a run's export: tests/train/run/test_export_push.py)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.models.head import CalibratedHead, save_head


def a_run_head() -> tuple[QualityHead, BinnedCalibrator]:
    torch.manual_seed(0)
    head = QualityHead(8, 4, "last+stats")  # standardising: its input moments are buffers that must come back
    head.set_input_moments(3 * torch.randn(40, 8) + 1)
    calibrator = BinnedCalibrator(num_bins=16, capacity=32)
    calibrator.update(torch.randn(50), torch.rand(50) < 0.4, 1.0 / (0.05 + torch.rand(50)))  # the window wrapped
    return head, calibrator


def test_save_and_load_round_trip(tmp_path: Path):
    head, calibrator = a_run_head()
    directory = save_head(head, calibrator, tmp_path / "quality_head")
    assert sorted(p.name for p in directory.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((directory / "config.json").read_text())
    assert (config["input_dim"], config["hidden_dim"], config["input_kind"], config["standardize"]) == (
        8,
        4,
        "last+stats",
        True,
    )
    assert config["calibrator"]["total_seen"] == 50 and len(config["calibrator"]["scores"]) == 32

    loaded = CalibratedHead.from_pretrained(directory)  # one call
    features = torch.randn(6, 8)
    assert not loaded.training and torch.equal(loaded(features), head(features))
    assert torch.equal(loaded.head.input_std, head.input_std)
    for key, value in calibrator.state_dict().items():
        got = loaded.calibrator.state_dict()[key]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value, key
    assert torch.equal(loaded.posterior(features), calibrator.posterior(head(features).detach()))
    card = (directory / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: arrol-pl" in card and "CalibratedHead.from_pretrained" in card


def test_loading_is_strict(tmp_path: Path):
    from safetensors.torch import load_file, save_file

    head, calibrator = a_run_head()
    directory = save_head(head, calibrator, tmp_path / "quality_head")
    weights = load_file(directory / "model.safetensors")
    del weights["head.fc2.bias"]
    save_file(weights, directory / "model.safetensors")
    with pytest.raises(RuntimeError, match="fc2.bias"):
        CalibratedHead.from_pretrained(directory)


def test_the_push_target_is_checked_before_the_run(monkeypatch):
    from huggingface_hub import constants

    from arrol_pl.train.config.loader import ConfigError
    from arrol_pl.train.config.sections import TrainerConfig

    assert TrainerConfig().push_to_hub is None
    with pytest.raises(ConfigError, match="trainer.push_to_hub=not a repo!: not a hub repository id"):
        TrainerConfig(push_to_hub="not a repo!")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="trainer.push_to_hub=someone/head: HF_HUB_OFFLINE=1"):
        TrainerConfig(push_to_hub="someone/head")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert TrainerConfig(push_to_hub="someone/head").push_to_hub == "someone/head"


def test_the_runs_card(tmp_path: Path, monkeypatch):
    import dataclasses

    from huggingface_hub import constants

    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.config.sections import TrainerConfig
    from arrol_pl.train.run.finish import write_run_card

    before = SimpleNamespace(accuracy=0.25, greedy_accuracy=0.5, samples=4, problems=128)
    after = SimpleNamespace(accuracy=0.375, greedy_accuracy=0.625, samples=4, problems=128)
    card = write_run_card(tmp_path, RunConfig(), 300, before, after).read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert "pruning.policy=arrol" in card and "300 steps" in card and "reward math_verify" in card
    assert (
        "0.250 before training, 0.375 after" in card and 'CalibratedHead.from_pretrained("export/quality_head")' in card
    )
    assert "before training" not in write_run_card(tmp_path, RunConfig(), 3, None, None).read_text()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # a push target is checked at once
    # pushed: the card loads the policy from the repository and the head from its download
    pushed = dataclasses.replace(RunConfig(), trainer=dataclasses.replace(TrainerConfig(), push_to_hub="me/policy"))
    card = write_run_card(tmp_path, pushed, 3, None, None).read_text()
    assert 'AutoModelForCausalLM.from_pretrained("me/policy")' in card and 'snapshot_download("me/policy")' in card
    assert 'CalibratedHead.from_pretrained(f"{local}/quality_head")' in card
