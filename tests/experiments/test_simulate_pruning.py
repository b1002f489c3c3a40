import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "simulate_pruning.py"), *overrides],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )


def test_selfcheck_writes_summary(tmp_path):
    out = run("selfcheck.steps=6", "selfcheck.num_groups=8", "pruning.cold_start_steps=2",
              f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["policies"]) == {"arrol/global", "arrol/group", "arrol/spread", "random", "none"}
    for row in summary["policies"].values():
        assert all(math.isfinite(v) for v in row.values())
        assert 0 < row["keep_ratio"] <= 1
    assert summary["policies"]["none"]["keep_ratio"] == 1.0
    assert "arrol/group" in out.stdout


def test_bad_config_names_the_key(tmp_path):
    out = run("pruning.keep_ratio=1.5", f"hydra.run.dir={tmp_path}/bad", cwd=tmp_path)
    assert out.returncode != 0
    assert "pruning.keep_ratio" in out.stderr + out.stdout
    out = run("+pruning.kappa=0.5", f"hydra.run.dir={tmp_path}/bad2", cwd=tmp_path)
    assert out.returncode != 0
    assert "pruning.kappa" in out.stderr + out.stdout
