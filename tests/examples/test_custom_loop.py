"""examples/custom_loop.py: ARRoL's pruning in a plain PyTorch loop with the real vLLM engine, run as a script of
its own (its engine is not the test session's) for three steps on the tiny policy, untrained (its warm start
would take longer than the loop; the rewards are then 0, which the head learns as well as any): the cold-start
step prunes nothing, the later ones prune inside the engine, and the head and calibrator learn from every survivor
(its update runs each step; the calibrator holds one label per survivor)."""

import json
import math
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.engine]


def test_the_custom_loop_prunes_and_the_head_learns(tmp_path, policy_cache):
    """The library without Lightning or Hydra, as examples/custom_loop.py uses it: the only test of that path."""
    metrics = tmp_path / "metrics.jsonl"
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "examples" / "custom_loop.py"),
            "--steps",
            "3",
            "--prompts",
            "4",
            "--group-size",
            "4",
            "--cache-dir",
            str(policy_cache),
            "--warm-start-steps",
            "0",
            "--reward-workers",
            "1",
            "--metrics",
            str(metrics),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert not rows[0]["pruning_active"] and rows[0]["pruned"] == 0  # the cold start
    assert all(r["pruning_active"] for r in rows[1:]) and sum(r["pruned"] for r in rows[1:]) > 0
    assert min(r["keep_ratio"] for r in rows[1:]) < 1.0
    survivors = 0
    for r in rows:
        survivors += r["rollouts"] - r["pruned"]
        assert r["calibrator_labels"] == survivors, "one label per survivor, none from a pruned rollout"
        assert math.isfinite(r["head_loss"]) and math.isfinite(r["policy_loss"])
    assert "step 2: pruning on" in out.stdout
