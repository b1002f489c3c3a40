"""experiments/gpu_smoke.py (``make check-gpu``), the first command on a new GPU node, run here on CPU through the same
code: a random policy of a given shape, 2 pruned steps through the real engine and trainer, and the report a user
reads (the runner vLLM built, its compilation mode, each phase's seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {
    "_name_or_path": "tiny-qwen3",
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "tie_word_embeddings": True,
}


SMOKE_ARGS = (
    "--device",
    "cpu",
    "algo.max_response_tokens=32",
    "engine.detect_length=8",
    "algo.prompts_per_step=4",
    "data.num_heldout=4",
)

STALE_SYNC = """
import sys

sys.path.insert(0, sys.argv.pop(1))
from arrol_pl.engine.engine import ArrolEngine

original, calls = ArrolEngine.sync_weights, []


def stale(self, weights=None, head_state=None, **kw):
    calls.append(1)
    if len(calls) > 1 and weights is not None:
        list(weights)  # taken from the trainer, never loaded: the engine keeps the weights it started with
        weights = None
    return original(self, weights, head_state, **kw)


if __name__ == "__main__":
    ArrolEngine.sync_weights = stale
    import gpu_smoke

    sys.exit(gpu_smoke.main(sys.argv[1:]))
"""
"""The smoke with a weight sync that loads nothing after the first: what a sync leaving weights behind looks like."""


def smoke(tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps(SHAPE))
    return warm_python.run(
        [
            *command,
            "--config-json",
            str(shape),
            "--out",
            str(tmp_path / "run"),
            "--cache-dir",
            str(tmp_path / "cache"),
            *SMOKE_ARGS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


@pytest.mark.subprocess
def test_the_smoke_command_runs_both_cases_and_checks_every_step(tmp_path):
    """Two cases, each with an engine of its own in the one process: one pass, and detect-first with twice as many
    rollouts as slots; on every step the engine's log-probs against the trainer's, within float32's bound."""
    done = smoke(tmp_path, sys.executable, str(ROOT / "experiments" / "gpu_smoke.py"))
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-4000:]
    engine_lines = [line for line in out.splitlines() if line.startswith("  engine: ")]
    assert len(engine_lines) == 2
    for line in engine_lines:
        assert "runner vllm.v1.worker.cpu_model_runner.CPUModelRunner" in line
        assert "model_runner_v2 False" in line and "enforce_eager True" in line and "dtype float32" in line
    assert "one pass: 32 rollouts a step, 256 slots" in out and "detect-first: 32 rollouts a step, 16 slots" in out
    steps = [line for line in out.splitlines() if line.startswith("  step ")]
    assert len(steps) == 4 and all("generation" in s and "update" in s and "keep ratio" in s for s in steps)
    diffs = [float(s.split("mean |Δ| ")[1].split(",")[0]) for s in steps]
    assert all(d <= 1e-3 for d in diffs), steps
    assert len([line for line in out.splitlines() if "generation with the hidden-state tap" in line]) == 2
    assert "smoke: ok" in out and "FAILED" not in out
    for case, detect_first in (("one_pass", 0.0), ("detect_first", 1.0)):
        rows = [json.loads(line) for line in (tmp_path / "run" / case / "history.jsonl").read_text().splitlines()]
        assert all(row["pruning/keep_ratio"] < 1.0 for row in rows), "both steps prune (no cold start)"
        assert [row["engine/detect_first"] for row in rows] == [detect_first] * 2


@pytest.mark.subprocess
def test_a_sync_that_loads_nothing_fails_the_smoke_on_the_second_step(tmp_path):
    """The smoke's reward and learning rate make the first update move the log-probs: an engine left with the weights
    it started with is 100× past the bound on the step after the sync, and the exit is 1. One case (``--case``, what
    each process runs on CUDA)."""
    script = tmp_path / "stale_sync.py"
    script.write_text(STALE_SYNC)
    done = smoke(tmp_path, sys.executable, str(script), str(ROOT / "experiments"), "--case", "detect_first")
    assert done.returncode == 1, (done.stdout + done.stderr)[-4000:]
    assert "one pass:" not in done.stdout and "detect-first: 32 rollouts a step, 16 slots" in done.stdout
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED: ")]
    assert len(failed) == 1 and "detect-first: step 1's engine log-probs differ" in failed[0], failed
    assert "after the first weight sync" in failed[0]
    assert "smoke: FAILED" in done.stdout


@pytest.mark.subprocess
def test_a_missing_shape_file_is_one_line_and_exit_2(tmp_path):
    done = warm_python.run(
        [sys.executable, str(ROOT / "experiments" / "gpu_smoke.py"), "--config-json", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"config error: --config-json {tmp_path / 'nope.json'}: no such file"


@pytest.mark.subprocess
def test_the_torch_only_part_measures_the_update_against_the_plan(tmp_path):
    """What a GPU image without vLLM runs (``--torch-only``): one update micro-batch, its measured peak beside the
    plan's bytes (here on CPU, float32, where tests/train/policy/test_update_peak.py holds the two within a few
    percent)."""
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps(SHAPE))
    done = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "gpu_smoke.py"),
            "--torch-only",
            "--config-json",
            str(shape),
            "--tokens",
            "512",
            "--device",
            "cpu",
            "--checkpointing",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if "measured/planned" in line)
    ratio = float(line.split("measured/planned ")[1].split()[0])
    assert 0.9 < ratio < 1.1, line
    assert "activation checkpointing on" in done.stdout
