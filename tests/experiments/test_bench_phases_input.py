"""experiments/bench_phases.py fails on bad input as experiments/run.py does: one line naming the key, exit 2,
before any model loads."""

import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "override,message",
    [
        ("algo.group_size=1", "config error: algo.group_size must be >= 2"),
        ("algo.nope=1", "config error: algo.nope: no such key; algo takes name, advantage, "),
    ],
)
@pytest.mark.subprocess
def test_a_bad_override_is_named_in_one_line(tmp_path: Path, override: str, message: str):
    out = warm_python.run(
        [sys.executable, str(ROOT / "experiments" / "bench_phases.py"), "--out", str(tmp_path / "b"), "--", override],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "b").exists()
