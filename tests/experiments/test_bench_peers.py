"""experiments/bench_peers.py without a run: bad input refused before any model loads, TRL's backends chosen from
what is installed (TRL is never a test dependency), and the per-arm figures it prints."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import bench_peers  # noqa: E402


def test_a_bad_override_is_named_in_one_line_before_anything_loads(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_peers.main(["--out", str(tmp_path / "b"), "--trl", "off", "algo.group_size=1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "config error: algo.group_size must be >= 2" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "argv,message",
    [(["--kappa", "1"], "--kappa must lie in (0, 1)"), (["--steps", "0"], "need --warmup >= 0, --steps >= 1")],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_peers.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_arms_are_the_projects_grpo_and_arrol_on_one_configuration():
    arms = bench_peers.compose_arms(bench_peers.parse_args(["--kappa", "0.25", "--warmup", "1", "--steps", "3"]))
    (grpo, _), (arrol, overrides) = arms["GRPO"], arms["ARRoL κ=0.25"]
    assert grpo.pruning.policy == "none" and arrol.pruning.keep_ratio == 0.25 and "pruning=arrol" in overrides
    assert grpo.trainer.max_steps == arrol.trainer.max_steps == 4 and grpo.data.num_heldout == 0
    assert (grpo.algo.prompts_per_step, grpo.algo.group_size) == (arrol.algo.prompts_per_step, arrol.algo.group_size)


def test_trl_is_left_out_with_a_reason_when_absent_or_off(monkeypatch):
    assert bench_peers.trl_backends("off") == ([], ["TRL: left out (--trl off)"])
    real = importlib.metadata.version

    def version(dist):
        if dist == "trl":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    backends, notes = bench_peers.trl_backends("auto")
    assert backends == [] and "not installed (pip install trl)" in notes[0]


def test_versions_compare_as_numbers_and_the_summary_takes_medians():
    assert bench_peers.version_tuple("0.32.0+cpu") == (0, 32, 0) > bench_peers.version_tuple("0.31.0")
    rows = [{"step": s, "generation": g, "tokens": 100} for s, g in [(1.0, 0.5), (3.0, 1.0), (2.0, 0.8)]]
    t = bench_peers.summarise(rows)
    assert (t["s_per_step"], t["min"], t["max"], t["generation_s"], t["steps"]) == (2.0, 1.0, 3.0, 0.8, 3)
    assert t["generation_share"] == 0.4 and t["tokens_per_s"] == 125.0
