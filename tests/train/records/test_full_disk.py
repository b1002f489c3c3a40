"""A disk that fills during a run: the checkpoint, history or summary that cannot be written is named in one line
with the file system's reason and the last good checkpoint, the run's summary says so, a signal received meanwhile
still ends the run with 128 + signal, and the one-line error starts a line of its own below the progress bar.

The runs are experiments/run.py through ``full_disk.py``, which fails the chosen file's writes as a full disk does
(ENOSPC). A write that fails under a real kernel limit (RLIMIT_FSIZE): test_faults.py."""

from __future__ import annotations

import errno
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

from arrol_pl.train.records.checkpoint import AtomicCheckpointIO
from arrol_pl.train.records.rundir import CLAIM_FILE, RecordWriteError, last_checkpoint, read_rows
from arrol_pl.train.records.summary import RunSummary
from arrol_pl.train.run.finish import write_outcome

HERE = Path(__file__).resolve().parent
FULL = "No space left on device"


def test_a_checkpoint_the_disk_cannot_take_is_named_in_the_file_systems_words(tmp_path, monkeypatch):
    """torch.save reports its archive's failed write as ``[enforce fail at inline_container.cc] unexpected pos``, the
    OSError only its context: the error names the OSError's reason, and the last good checkpoint stays whole."""
    from full_disk import Writes

    from arrol_pl.train.records import checkpoint

    io_ = AtomicCheckpointIO()
    step, last = tmp_path / "step00002.ckpt", tmp_path / "last.ckpt"
    state = {"weights": torch.zeros(10_000)}
    io_.save_checkpoint(state, last)
    good = last.read_bytes()
    io_.save_checkpoint(state, step)
    monkeypatch.setattr(checkpoint, "open", Writes("last.ckpt", 1), raising=False)
    with pytest.raises(RecordWriteError) as err:
        io_.save_checkpoint(state, last)
    assert str(err.value) == f"writing checkpoint {last} failed ({FULL}); the last good checkpoint is {step}"
    assert "enforce fail" in str(err.value.__cause__)  # what torch itself says
    assert last.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == [last.name, step.name]


def summary(status: str = "completed", error: str | None = None) -> RunSummary:
    return RunSummary(name="run", status=status, error=error, steps=2)


def test_a_history_the_disk_cannot_take_marks_the_summary_failed_and_a_summary_it_cannot_take_is_returned(
    tmp_path, monkeypatch
):
    rows = [{"step": 0.0}, {"step": 1.0}]
    good = tmp_path / "checkpoints" / "last.ckpt"
    (tmp_path / "history.jsonl").mkdir()  # the history cannot be replaced: it is a directory
    done = summary()
    failed = write_outcome(None, tmp_path, done, rows, rank=0, last_good=good)
    history = tmp_path / "history.jsonl"
    assert isinstance(failed, RecordWriteError) and failed.failed.startswith(f"writing history {history} failed (")
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["status"] == "failed" and written["error"] == str(failed)
    assert str(failed).endswith(f"; the last good checkpoint is {good}")
    interrupted = summary("interrupted")
    write_outcome(None, tmp_path, interrupted, rows, rank=0)
    assert interrupted.status == "interrupted" and interrupted.error.startswith("writing history")

    history.rmdir()

    def full(self, run_dir):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RunSummary, "write", full)
    failed = write_outcome(None, tmp_path, summary(), rows, rank=0)
    assert failed.failed == f"writing summary {tmp_path / 'summary.json'} failed ({FULL})"
    assert read_rows(history) == rows, "the history is written all the same"
    assert write_outcome(None, tmp_path, summary(), rows, rank=1) is None  # rank 0 writes


def command(tmp_path: Path, file: str, nth: int, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(HERE / "full_disk.py"),
        file,
        str(nth),
        "model.warm_start.steps=0",
        f"model.cache_dir={tmp_path / 'cache'}",
        "data.num_heldout=0",
        "algo.prompts_per_step=2",
        "algo.group_size=2",
        "algo.max_response_tokens=16",
        "engine.detect_length=4",
        "trainer.checkpoint_every=2",
        f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
    ]


@pytest.mark.slow
def test_a_history_row_the_disk_cannot_take_stops_the_run_in_one_line_of_its_own(tmp_path):
    """The third row's append fails (step 2's, after the step-2 checkpoint): exit 1, the summary marked failed with
    the same words, and the line starts below the progress bar (stdout and stderr read as a terminal shows them)."""
    run = tmp_path / "run"
    out = warm_python.run(
        command(tmp_path, "history.jsonl", 3, "trainer.max_steps=6"),
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert out.returncode == 1, out.stdout[-4000:]
    last = run / "checkpoints" / "last.ckpt"
    failed = f"writing history {run / 'history.jsonl'} failed ({FULL}); the last good checkpoint is {last}"
    lines = out.stdout.split("\n")
    assert f"stopped: {failed}; resume with trainer.resume={run}" in lines, out.stdout[-4000:]  # in place, from it
    assert "Traceback" not in out.stdout
    written = json.loads((run / "summary.json").read_text())
    assert written["status"] == "failed" and written["error"] == failed and written["checkpoint"] == str(last)
    assert [r["step"] for r in read_rows(run / "history.jsonl")] == [0.0, 1.0, 2.0]  # written whole at the end
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 2


@pytest.mark.slow
def test_signals_during_a_checkpoint_write_the_disk_cannot_take_still_end_the_run_with_143(tmp_path):
    """Two SIGTERMs while ``last.ckpt`` of step 4 is inside torch.save, which then fails (a full disk): the step file
    written just before is the last good checkpoint, the earlier ``last.ckpt`` stays whole, the summary is written
    (interrupted, naming the failed write), exit 143."""
    run, hold = tmp_path / "run", tmp_path / "hold"
    proc = warm_python.Popen(
        command(tmp_path, "last.ckpt", 2, "trainer.max_steps=20"),
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "FULL_DISK_HOLD": str(hold)},
        runtime_env=["FULL_DISK_HOLD"],
    )
    deadline = time.monotonic() + 600
    while not hold.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    for _ in range(2):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    Path(f"{hold}.go").touch()
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    ckpts = run / "checkpoints"
    step = ckpts / "step00004.ckpt"
    failed = f"writing checkpoint {ckpts / 'last.ckpt'} failed ({FULL})"
    # the run directory resumes from the newest good checkpoint, the step file
    assert f"interrupted: SIGTERM: stopped after 4 steps; {failed}; resume with trainer.resume={run}" in stderr
    assert "Traceback" not in stderr and "enforce fail" not in stderr
    written = json.loads((run / "summary.json").read_text())
    assert written["status"] == "interrupted" and written["signal"] == "SIGTERM"
    assert written["error"] == f"{failed}; the last good checkpoint is {step}" and written["checkpoint"] == str(step)
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt", "step00002.ckpt", "step00004.ckpt"]
    assert torch.load(ckpts / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 2
    assert torch.load(step, map_location="cpu", weights_only=True)["global_step"] == 4
    assert last_checkpoint(run) == step, "trainer.resume=<run> continues from the last good checkpoint"
    assert not (run / CLAIM_FILE).exists()
