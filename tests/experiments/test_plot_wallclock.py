"""experiments/plot_wallclock.py from the command line: a sweep folder, a band per arm, bad arguments refused."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]


def fake_run(root: Path, arm: str, seed: int, slope: float) -> Path:
    run = root / f"{arm},trainer.seed={seed}"
    run.mkdir(parents=True)
    rows = [{"time/wall": 10.0 * (i + 1) + seed, "heldout/accuracy": 0.2 + slope * (i + 1)} for i in range(5)]
    (run / "history.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "summary.json").write_text(
        json.dumps({"overrides": [arm, f"trainer.seed={seed}", "+exp=demo"], "heldout_accuracy_before": 0.2})
    )
    return run


def plot(*args) -> subprocess.CompletedProcess:
    return warm_python.run(
        [sys.executable, str(ROOT / "experiments" / "plot_wallclock.py"), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.subprocess
def test_by_arm_draws_one_band_per_arm_and_checks_its_labels(tmp_path):
    sweep = tmp_path / "sweep"
    runs = [
        fake_run(sweep, arm, seed, slope)
        for arm, slope in (("pruning=none", 0.02), ("pruning=arrol", 0.03))
        for seed in (0, 1, 2)
    ]
    (sweep / "multirun.yaml").write_text("{}")  # a sweep's own files are passed over
    out = tmp_path / "band.png"
    done = plot(sweep, "--by-arm", "--tag", "heldout/accuracy", "--smooth", "0", "-o", out)  # the sweep folder
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 1000 and f"wrote {out}" in done.stdout
    # three arms' worth of labels for two arms is refused; so is a run directory that does not exist
    bad = plot(*runs, "--by-arm", "--labels", "a", "b", "c", "-o", out)
    assert bad.returncode == 2 and "3 labels for 2 arms" in bad.stderr
    gone = plot(tmp_path / "nowhere", "-o", out)
    assert gone.returncode == 2 and "no such run directory" in gone.stderr and "nowhere" in gone.stderr
