"""One SIGINT stops each phase of a run through the real entry point (experiments/run.py): the tiny policy's warm
start and the held-out evaluation before training at once, keeping nothing of them; a held-out evaluation during
training is dropped and the step it follows ends with its checkpoint. Each exits 128 + SIGINT in one line naming the
phase; no temporary directory stays in the model cache. Once the run is trained, a SIGTERM (and a second one) lets
the export finish: the run completed. (A signal during a training step: test_faults.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import warm_python
import torch

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

STOP_WITHIN = 60
"""Seconds a stopped run may take to exit (it writes its summary and closes the engine)."""


class Run:
    """``experiments/run.py`` started in ``tmp`` with ``overrides``; its stdout and stderr read as they come."""

    def __init__(self, tmp: Path, cache: Path, *overrides: str) -> None:
        self.dir = tmp / "run"
        self.proc = warm_python.Popen(
            [
                sys.executable,
                str(ROOT / "experiments" / "run.py"),
                f"model.cache_dir={cache}",
                "algo.prompts_per_step=4",
                "algo.group_size=4",
                "pruning.cold_start_steps=1",
                f"hydra.run.dir={self.dir}",
                *overrides,
            ],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ARROL_PROGRESS_SECONDS": "0"},  # off a terminal, each bar's update a line
            runtime_env=["ARROL_PROGRESS_SECONDS"],  # read as each bar starts
        )
        self.text = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while chunk := self.proc.stdout.read1(4096):
            self.text += chunk.decode(errors="replace")

    def wait_for(self, marker: str, after: int = 0, timeout: float = 600) -> int:
        """Where ``marker`` first shows in the output from ``after`` on."""
        deadline = time.monotonic() + timeout
        while (at := self.text.find(marker, after)) < 0:
            assert self.proc.poll() is None, f"run ended before {marker!r}: {self.text[-3000:]}"
            assert time.monotonic() < deadline, f"{marker!r} did not show: {self.text[-3000:]}"
            time.sleep(0.05)
        return at

    def interrupt(self) -> str:
        """SIGINT; the process's exit within :data:`STOP_WITHIN` s; its last line of output."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {STOP_WITHIN} s after SIGINT: {self.text[-3000:]}")
        time.sleep(0.2)  # the reader's last chunk
        assert self.proc.returncode == 128 + signal.SIGINT, self.text[-3000:]
        assert "Traceback" not in self.text, self.text[-3000:]
        return next(line for line in self.text.splitlines()[::-1] if line.startswith("interrupted:"))


def temporaries(cache: Path) -> list[str]:
    return [p.name for p in cache.iterdir() if p.name.startswith(".")]


def test_sigint_in_the_warm_start_stops_it_and_keeps_nothing(tmp_path):
    cache = tmp_path / "cache"
    run = Run(
        tmp_path,
        cache,
        "model.warm_start.steps=1000",
        "model.warm_start.check_every=1",
        "data.num_heldout=0",
        "trainer.max_steps=2",
    )
    run.wait_for("warm start step 2:")  # the warm start is under way, its temporary directory in the cache
    assert [n for n in temporaries(cache) if n.startswith(".warm-")]
    line = run.interrupt()
    assert line.startswith(
        "interrupted: SIGINT: stopped in the warm start after 0 steps; no checkpoint to resume "
        f"from (outputs: {run.dir})"
    ), line
    assert temporaries(cache) == [] and not list(cache.glob("warm-*")), "a half-built warm start stayed"
    assert not (run.dir / "checkpoints").exists()
    summary = json.loads((run.dir / "summary.json").read_text())
    assert (summary["status"], summary["signal"], summary["steps"]) == ("interrupted", "SIGINT", 0)


def test_sigint_in_the_first_heldout_evaluation_stops_it(tmp_path, policy_cache):
    run = Run(tmp_path, policy_cache, "model.warm_start.steps=0", "data.num_heldout=64", "trainer.max_steps=2")
    run.wait_for("held-out before training avg@4: ")  # a line of its progress bar (its greedy part ran)
    line = run.interrupt()
    assert line.startswith(
        "interrupted: SIGINT: stopped in the held-out evaluation after 0 steps; no checkpoint to resume from"
    ), line
    assert not (run.dir / "checkpoints").exists() and not (run.dir / "export").exists()
    assert json.loads((run.dir / "summary.json").read_text())["heldout_accuracy_before"] is None


def test_sigint_in_an_evaluation_during_training_keeps_the_steps_checkpoint(tmp_path, policy_cache):
    run = Run(
        tmp_path,
        policy_cache,
        "model.warm_start.steps=0",
        "data.num_heldout=64",
        "trainer.max_steps=6",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=1",
    )
    ckpt = run.dir / "checkpoints" / "step00001.ckpt"
    deadline = time.monotonic() + 600
    while not ckpt.exists():
        assert run.proc.poll() is None and time.monotonic() < deadline, run.text[-3000:]
        time.sleep(0.05)
    run.wait_for("held-out during training avg@4: ", after=len(run.text))  # step 2's evaluation, under way
    line = run.interrupt()
    last = run.dir / "checkpoints" / "last.ckpt"
    assert line.startswith(
        f"interrupted: SIGINT: stopped in the held-out evaluation after 2 steps; resume with trainer.resume={run.dir} "
    ), line
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 2
    assert (run.dir / "checkpoints" / "step00002.ckpt").exists() and not (run.dir / "export").exists()
    rows = [json.loads(x) for x in (run.dir / "history.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and "heldout/accuracy" not in rows[-1]  # the dropped evaluation recorded nothing


SIGNALLED_EXPORT = """
import os, signal, sys

import arrol_pl.train.run.experiment as experiment
import arrol_pl.train.run.finish as finish
from arrol_pl.cli.train import main

real_export, real_head = experiment.export_run, finish.save_head


def export_run(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's, as the export starts
    return real_export(*args, **kwargs)


def save_head(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # and its second, with the policy written and the head not yet
    return real_head(*args, **kwargs)


experiment.export_run, finish.save_head = export_run, save_head
sys.exit(main(prog="run.py"))
"""


def test_sigterm_in_the_export_lets_it_finish_and_the_run_completed(tmp_path, policy_cache):
    """experiments/run.py's job with two SIGTERMs sent as its export runs (the only way to land one there: it takes
    a second). The run is given ``trainer.output_dir``, so this is also the run that shows Hydra's record and log go
    there, and nothing under Hydra's own ``outputs/runs/``."""
    (tmp_path / "signalled_export.py").write_text(SIGNALLED_EXPORT)
    run_dir = tmp_path / "run"
    out = warm_python.run(
        [
            sys.executable,
            "signalled_export.py",
            f"model.cache_dir={policy_cache}",
            "model.warm_start.steps=0",
            "data.num_heldout=0",
            "algo.prompts_per_step=2",
            "algo.group_size=2",
            "algo.max_response_tokens=16",
            "engine.detect_length=4",
            "pruning.cold_start_steps=1",
            "trainer.max_steps=1",
            f"trainer.output_dir={run_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 128 + signal.SIGTERM, out.stderr[-3000:]
    assert "SIGTERM received: finishing the export, then exiting" in out.stdout + out.stderr
    assert (
        (
            f"SIGTERM received once the run was trained: its export finished, the run completed (outputs: {run_dir})"
            in out.stderr
        )
        and "interrupted:" not in out.stderr
        and "Traceback" not in out.stderr
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["signal"], summary["steps"]) == ("completed", "SIGTERM", 1)
    assert summary["export_dir"] == str(run_dir / "export")
    from arrol_pl.train.run.finish import HUB_FILES, hub_files

    assert set(HUB_FILES) <= set(hub_files(run_dir / "export"))  # whole: the head written after the second signal
    assert not list(run_dir.glob(".export*")), "no partial copy left"
    assert (run_dir / ".hydra" / "config.yaml").is_file() and list(run_dir.glob("*.log"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "signalled_export.py"], "nothing under outputs/"
