"""experiments/run.py with DAPO over PPO mini-batches and epochs: the clip acts, the metrics reach
TensorBoard and summary.json, Lightning still counts one global step per training step, and the engine's
temperature-scaled sampling log-probs match the trainer's."""

import json
import sys
from pathlib import Path

import pytest
import warm_python
import torch

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def test_dapo_with_mini_batches_and_epochs_clips_and_logs(tmp_path):
    """The only run with PPO mini-batches and several epochs over a step's rollouts (the other runs make one update
    per step), where the ratio leaves 1 and the clip acts."""
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "algo=dapo",
        "pruning=arrol",
        "model.warm_start.steps=0",
        f"model.cache_dir={tmp_path / 'cache'}",
        "data.num_heldout=0",
        "algo.prompts_per_step=2",
        "algo.group_size=4",
        "algo.ppo_mini_batch_size=1",
        "algo.ppo_epochs=2",
        "algo.max_response_tokens=16",
        "engine.detect_length=4",
        "algo.temperature=0.7",
        "algo.dynamic_sampling=false",
        "algo.dynamic_sampling_refill=false",
        "pruning.cold_start_steps=1",
        "trainer.max_steps=2",
        "trainer.checkpoint_every=2",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    out = warm_python.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    run = tmp_path / "run"
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [h["policy/optimizer_steps"] for h in history] == [4.0, 4.0]  # 2 mini-batches × 2 epochs
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 2
    summary = json.loads((run / "summary.json").read_text())["policy"]
    assert summary["clip_fraction"] > 0 and summary["ratio_max"] > 1 > summary["ratio_min"]
    assert summary["clip_fraction"] == pytest.approx(summary["clip_fraction_low"] + summary["clip_fraction_high"])
    assert 0 <= summary["engine_logprob_diff_max"] < 1e-3  # processed (T = 0.7) log-probs on both sides

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set(EventAccumulator(str(run / "tb")).Reload().Tags()["scalars"])
    for tag in (
        "policy/clip_fraction_low",
        "policy/clip_fraction_high",
        "policy/dual_clip_fraction",
        "policy/approx_kl",
        "policy/ratio_min",
        "policy/ratio_mean",
        "policy/ratio_max",
        "policy/grad_norm",
        "policy/optimizer_steps",
        "policy/engine_logprob_diff_mean",
        "policy/engine_logprob_diff_max",
        "time/old_logprob",
    ):
        assert tag in tags, tag
