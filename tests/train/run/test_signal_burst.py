"""Once the first SIGTERM / SIGINT is being handled, further ones are absorbed until the checkpoint, the history, the
summary and the claim's release are done (a scheduler's kill loop sends ten in a fifth of a second); a second SIGINT
during a step still abandons it, once, and never skips the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python
import torch

from arrol_pl.train.records.rundir import CLAIM_FILE
from arrol_pl.train.run.callbacks import RunCheckpoints

ROOT = Path(__file__).resolve().parents[3]


def test_signals_after_the_first_are_absorbed_until_restore_and_one_second_sigint_hurries_a_step(tmp_path, caplog):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop = RunCheckpoints(tmp_path, checkpoint_every=2)
    try:
        with stop:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10):
                os.kill(os.getpid(), signal.SIGTERM)
            assert stop.signum == signal.SIGTERM and stop.absorbed == 10
            assert caplog.text.count("SIGTERM received again: ignored until the checkpoint and the summary") == 1
            os.kill(os.getpid(), signal.SIGINT)  # no step in flight: absorbed too
            stop.in_step = True
            with pytest.raises(KeyboardInterrupt, match="second SIGINT: abandoning the step in flight"):
                os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # hurried once already
            assert stop.absorbed == 12
        # the fit is over, the summary not yet written: still absorbing
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.absorbed == 13
    finally:
        stop.restore()
    assert {sig: signal.getsignal(sig) for sig in before} == before
    quiet = RunCheckpoints(tmp_path, checkpoint_every=2)
    with quiet:
        pass
    assert {sig: signal.getsignal(sig) for sig in before} == before  # no signal: restored on leaving


def test_a_signal_during_the_export_lets_it_finish_and_is_recorded(tmp_path, caplog):
    stop = RunCheckpoints(tmp_path, checkpoint_every=2)
    try:
        with stop:
            with stop.unstoppable("the export"):
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C after it: absorbed too, no step is in flight
                os.kill(os.getpid(), signal.SIGTERM)
            assert stop.signum == signal.SIGTERM and stop.absorbed == 2 and stop.stopped_in is None
            assert "SIGTERM received: finishing the export, then exiting" in caplog.text
            assert stop.finishing is None
    finally:
        stop.restore()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
def test_a_burst_of_signals_still_writes_the_summary_and_releases_the_claim(tmp_path, signum):
    """A burst of SIGINTs through the real entry point. A burst of SIGTERMs, which lets the step in flight finish and
    saves it, is test_faults.py's SIGTERM run (test_a_sigterm_burst_saves_checkpoint_history_and_summary)."""
    run_dir = tmp_path / "run"
    proc = warm_python.Popen(
        [
            sys.executable,
            str(ROOT / "experiments" / "run.py"),
            "model.warm_start.steps=0",
            f"model.cache_dir={tmp_path / 'cache'}",
            "data.num_heldout=0",
            "algo.prompts_per_step=2",
            "algo.group_size=2",
            "algo.max_response_tokens=16",
            "engine.detect_length=4",
            "trainer.max_steps=200",
            "trainer.checkpoint_every=2",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while not (run_dir / "checkpoints" / "step00002.ckpt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    for _ in range(12):  # about 200 ms
        proc.send_signal(signum)
        time.sleep(0.015)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signum, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == signum.name
    assert not (run_dir / CLAIM_FILE).exists(), "the claim was released"
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert summary["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    # the second SIGINT abandoned the step in flight: the checkpoint is of a step before it
    assert 2 <= last["global_step"] <= summary["steps"]
    line = f"interrupted: {signum.name}: stopped after {summary['steps']} steps; resume with trainer.resume={run_dir} "
    assert line in stderr
    assert "Traceback" not in stderr
