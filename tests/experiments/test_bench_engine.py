"""experiments/bench_engine.py on a small random policy: every row runs, and with ``--detect-first both`` it says
which schedule the engine's default runs, with the model's figures and the measured ratio."""

import json
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_engine_benchmark_reports_the_schedule_the_default_runs(tmp_path):
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "bench_engine.py"),
            "--prompts",
            "2",
            "--group-size",
            "4",
            "--max-tokens",
            "24",
            "--max-num-seqs",
            "4",
            "--repeats",
            "1",
            "--kappas",
            "1.0",
            "0.5",
            "--hidden-size",
            "64",
            "--layers",
            "1",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--head-dim",
            "32",
            "--detect-first",
            "both",
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
    assert set(summary["results"]) == {"bare", "stock", "kappa=1", "kappa=0.5", "kappa=0.5/one"}
    default = summary["default_k0.5"]
    assert default["modelled_one_pass_s"] > 0 and default["modelled_detect_first_s"] > 0
    assert default["detect_first"] == (default["modelled_detect_first_s"] < default["modelled_one_pass_s"])
    assert default["speed_vs_other"] > 0 and "wall_vs_token_ratio_gap" in default
    assert "κ = 0.5, the default (engine.detect_first null) runs " in out.stdout
