"""experiments/gpu_smoke.py (``make check-gpu``), the first command on a new GPU node, run here on CPU through the same
code: a random policy of a given shape, 2 pruned steps through the real engine and trainer, and the report a user
reads (the runner vLLM built, its compilation mode, each phase's seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"_name_or_path": "tiny-qwen3", "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 256,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
         "vocab_size": 1000, "tie_word_embeddings": True}


@pytest.mark.subprocess
def test_the_smoke_command_runs_two_pruned_steps_and_reports_the_engine(tmp_path):
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps(SHAPE))
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "gpu_smoke.py"), "--config-json", str(shape), "--device", "cpu",
         "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
         "algo.max_response_tokens=32", "engine.detect_length=8", "algo.prompts_per_step=4", "data.num_heldout=4"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-4000:]
    engine_line = next(line for line in out.splitlines() if line.startswith("engine: "))
    assert "runner vllm.v1.worker.cpu_model_runner.CPUModelRunner" in engine_line
    assert "model_runner_v2 False" in engine_line and "enforce_eager True" in engine_line
    assert "dtype float32" in engine_line
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all("generation" in s and "update" in s and "keep ratio" in s for s in steps)
    assert "smoke: ok" in out
    rows = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert all(row["pruning/keep_ratio"] < 1.0 for row in rows), "both steps prune (no cold start)"


@pytest.mark.subprocess
def test_a_missing_shape_file_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "gpu_smoke.py"), "--config-json",
                           str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"config error: --config-json {tmp_path / 'nope.json'}: no such file"


@pytest.mark.subprocess
def test_the_torch_only_part_measures_the_update_against_the_plan(tmp_path):
    """What a GPU image without vLLM runs (``--torch-only``): one update micro-batch, its measured peak beside the
    plan's bytes (here on CPU, float32, where tests/train/test_update_peak.py holds the two within a few percent)."""
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps(SHAPE))
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "gpu_smoke.py"), "--torch-only", "--config-json",
                           str(shape), "--tokens", "512", "--device", "cpu", "--checkpointing"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if "measured/planned" in line)
    ratio = float(line.split("measured/planned ")[1].split()[0])
    assert 0.9 < ratio < 1.1, line
    assert "activation checkpointing on" in done.stdout
