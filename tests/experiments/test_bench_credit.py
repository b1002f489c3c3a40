"""experiments/bench_credit.py on a random tiny policy: it runs real random pruning against the credited full
generation at each concurrency and reports their ratio."""

import json
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_bench_credit_compares_real_pruning_with_the_credit(tmp_path):
    """The only measurement of the oracle's credited time against pruning that really aborts requests."""
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "bench_credit.py"),
            "--prompts",
            "2",
            "--group-size",
            "4",
            "--max-tokens",
            "24",
            "--detect-length",
            "4",
            "--repeats",
            "1",
            "--kappas",
            "0.5",
            "--slots",
            "8",
            "2",
            "--cache-dir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(summary["results"]) == {"slots=8,kappa=0.5", "slots=2,kappa=0.5"}
    for row in summary["results"].values():
        assert row["real"] > 0 and row["full"] > 0 and 0 <= row["credit"] <= row["full"]
        assert row["same_keep"] == 1.0, "random decisions do not read the rollouts: both sides prune the same"
        assert row["credited"] == pytest.approx(row["full"] - row["credit"], abs=1e-3)
    assert isinstance(summary["within_target"], bool) and "credited / real" in out.stdout


def test_a_model_path_that_is_not_a_model_fails_in_one_line(tmp_path):
    out = warm_python.run(
        [sys.executable, str(ROOT / "experiments" / "bench_credit.py"), "--model", str(tmp_path / "missing")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--model" in out.stderr and "not a model directory" in out.stderr, out.stderr
