"""A rank that dies or times out, named in one line (:mod:`arrol_pl.train.run.ranks`), without starting a process:
what a rank records in torchrun's error file and how torchrun reads it back, the kind of an exception out of a
collective, the root cause among the failed ranks, the launcher's two lines and ``summary.json`` marked failed, the
wrapper's marker before torchrun closes the other ranks, and a rank's silence while it does. The real thing, a rank
killed mid-run, is ``tests/train/run/test_distributed_run.py``."""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest

from arrol_pl.train.config.run import RunConfig
from arrol_pl.train.run import rank_errors
from arrol_pl.train.run.rank_errors import RankTimeout
from arrol_pl.train.records.rundir import OWNER_ENV, write_rows
from arrol_pl.train.run import ranks
from arrol_pl.train.run.callbacks import RunCheckpoints

C10D = os.path.join("site-packages", "torch", "distributed", "distributed_c10d.py")
"""Where torch's collectives live: a frame there makes an exception a collective's."""


def collective_error(message: str, name: str = "all_gather_object") -> RuntimeError:
    """``RuntimeError(message)`` raised inside a function ``name`` of a file named like torch's collectives."""
    namespace: dict = {}
    exec(compile(f"def {name}(message):\n    raise RuntimeError(message)\n", C10D, "exec"), namespace)
    try:
        namespace[name](message)
    except RuntimeError as exc:
        return exc
    raise AssertionError("not raised")


GLOO_LOST = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:11156: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
    "application."
)
GLOO_TIMEOUT = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 6000ms for recv"


@pytest.fixture
def a_rank(tmp_path, monkeypatch):
    """This process as rank 1 of 2 under arrol train's torchrun: its error file, no group closing yet."""
    for key, value in {
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
        "WORLD_SIZE": "2",
        "RANK": "1",
        OWNER_ENV: "1",
        rank_errors.CLOSING_ENV: str(tmp_path / "closing"),
    }.items():
        monkeypatch.setenv(key, value)
    return tmp_path


def test_a_collective_that_lost_its_peer_is_told_from_a_timeout_and_from_a_bug(a_rank):
    lost, timeout = collective_error(GLOO_LOST), collective_error(GLOO_TIMEOUT, "barrier")
    assert rank_errors.collective_of(lost) == "all_gather_object" and rank_errors.collective_of(ValueError("x")) is None
    assert rank_errors.first_line(lost) == "Read error [127.0.0.1]:11156: Connection reset by peer."
    assert [rank_errors.failure_kind(e) for e in (lost, timeout, ValueError("Broken pipe"), RankTimeout("r"))] == [
        "lost",
        "timeout",
        "error",
        "timeout",
    ]
    assert rank_errors.failure_line(timeout, "timeout") == (
        "rank 1: barrier waited longer than trainer.rank_timeout_minutes for the other ranks; raise it if their work "
        "takes longer (Timed out waiting 6000ms for recv)"
    )
    (a_rank / "closing").write_text("{}")  # once torchrun closes the group, whatever the rank raises follows it
    assert rank_errors.failure_kind(ValueError("boom")) == "lost"


def test_a_rank_records_how_it_ended_in_torchruns_error_file_and_torchrun_reads_it(a_rank):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    try:
        raise ValueError("boom")
    except ValueError as exc:
        assert ranks.rank_ended(exc) is True  # under arrol train's launcher: it exits without a word
    failure = ProcessFailure(local_rank=1, pid=42, exitcode=1, error_file=str(a_rank / "error.json"))
    record = ranks.failure_record(1, failure)
    assert record["kind"] == "error" and record["line"] == "ValueError: boom" and record["signal"] is None
    assert "raise ValueError" in record["traceback"]
    # a rank that printed its own line keeps it; one killed by a signal wrote nothing
    assert ranks.rank_ended(OSError("disk full"), "reported") is False
    killed = ranks.failure_record(0, ProcessFailure(local_rank=0, pid=7, exitcode=-9, error_file="/nonexistent"))
    assert (killed["signal"], killed["line"], killed["kind"]) == ("SIGKILL", "", None)


def test_one_process_records_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    assert ranks.rank_ended(ValueError("boom")) is False


def failure(rank, exitcode, kind=None, timestamp=100, line=""):
    signal_name = signal.Signals(-exitcode).name if exitcode < 0 else None
    return {
        "rank": rank,
        "local_rank": rank,
        "pid": 1000 + rank,
        "exitcode": exitcode,
        "signal": signal_name,
        "timestamp": timestamp,
        "kind": kind,
        "line": line,
        "traceback": "",
    }


@pytest.mark.parametrize(
    "failures, root",
    [
        ([failure(0, 1, "lost"), failure(1, -9)], 1),  # the survivor saw its peer gone
        ([failure(0, -15), failure(1, -9)], 1),  # torchrun's SIGTERM ended the survivor
        ([failure(0, -9, timestamp=131), failure(1, 1, "error", timestamp=100)], 1),  # torchrun's SIGKILL 30 s on
        ([failure(0, 1, "lost"), failure(1, 1, "timeout", line="rank 1 waited")], 1),
        ([failure(0, 130, "interrupted"), failure(1, 130, "interrupted")], 0),  # Ctrl-C: each rank said it
    ],
)
def test_the_root_cause_is_the_first_failure_that_followed_no_other(failures, root):
    assert ranks.root_cause(failures)["rank"] == root


def run_dir_with(tmp_path, failures, steps=2, checkpoint=True, summary=None):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    write_rows(run / "history.jsonl", [{"step": k, "reward/accuracy": 0.5} for k in range(steps)])
    if checkpoint:
        (run / "checkpoints" / "step00002.ckpt").write_bytes(b"x")
        (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    (run / ranks.REPORT).write_text(json.dumps({"failures": failures}))
    return run


def two_ranks() -> RunConfig:
    from dataclasses import replace

    run = RunConfig()
    return replace(run, trainer=replace(run.trainer, devices=2, strategy="fsdp", accelerator="cpu"))


def test_a_killed_rank_is_two_lines_and_a_summary_marked_failed_from_the_history(tmp_path, capsys):
    run = run_dir_with(tmp_path, [failure(0, 1, "lost"), failure(1, -9)])
    assert ranks.report_end(two_ranks(), run, 1, 12.5, ["trainer.devices=2"]) == 128 + signal.SIGKILL
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "stopped: rank 1 of 2 was killed by SIGKILL after step 2; the other rank stopped with it",
        f"the last checkpoint is {run / 'checkpoints' / 'last.ckpt'}: resume with trainer.resume={run}",
    ]
    summary = json.loads((run / "summary.json").read_text())  # no rank wrote one: from history.jsonl
    assert summary["status"] == "failed" and summary["error"] == lines[0].removeprefix("stopped: ")
    assert summary["steps"] == 2 and summary["checkpoint"] == str(run / "checkpoints" / "last.ckpt")
    assert summary["overrides"] == ["trainer.devices=2"]


def test_a_rank_timeout_names_the_setting_and_a_summary_a_rank_wrote_is_marked_failed(tmp_path, capsys):
    line = (
        "rank 1 waited longer than trainer.rank_timeout_minutes=0.1 for rank 0 to prepare the policy (in barrier)"
        "; raise it if that work takes longer"
    )
    written = {"status": "interrupted", "signal": "SIGTERM", "error": "Connection closed by peer", "steps": 0}
    run = run_dir_with(
        tmp_path,
        [failure(0, 1, "lost"), failure(1, 1, "timeout", line=line)],
        steps=0,
        checkpoint=False,
        summary=written,
    )
    assert ranks.report_end(two_ranks(), run, 1, 1.0, []) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"stopped: {line}, before its first step; its traceback: {run / ranks.RANKS_LOG}",
        f"no checkpoint was written: nothing to resume (outputs: {run})",
    ]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["signal"], summary["steps"]) == ("failed", None, 0)
    assert "trainer.rank_timeout_minutes=0.1" in summary["error"]


def test_a_rank_that_said_its_own_line_and_a_completed_run_are_left_as_they_are(tmp_path, capsys):
    run = run_dir_with(tmp_path, [failure(0, 130, "interrupted"), failure(1, 130, "interrupted")])
    assert ranks.report_end(two_ranks(), run, 1, 1.0, []) == 130
    assert capsys.readouterr().err == "" and not (run / "summary.json").exists()
    done = run_dir_with(tmp_path / "done", [failure(1, -11)], summary={"status": "completed", "steps": 2})
    assert ranks.report_end(two_ranks(), done, 1, 1.0, []) == 128 + signal.SIGSEGV
    assert capsys.readouterr().err.splitlines() == [
        f"rank 1 of 2 was killed by SIGSEGV after step 2, once the run had completed (outputs: {done})"
    ]
    assert json.loads((done / "summary.json").read_text())["status"] == "completed"


def test_torchruns_wrapper_marks_the_group_closing_only_after_a_failure(tmp_path):
    class Context:
        closed = 0

        def close(self, death_sig=None, timeout=30):
            Context.closed += 1

    class Api:
        PContext = Context

    marker = tmp_path / "closing"
    ranks._announce_closing(Api, marker)
    done = Context()
    done._failures = {}
    done.close()  # every rank finished, or torchrun itself got a signal
    assert not marker.exists() and Context.closed == 1
    failed = Context()
    failed._failures = {1: type("Failure", (), {"exitcode": -9})()}
    failed.close()
    assert json.loads(marker.read_text()) == {"1": -9} and Context.closed == 2


def test_torchruns_closing_sigterm_stops_a_rank_in_silence(a_rank, caplog):
    stop = RunCheckpoints(a_rank, checkpoint_every=2)
    (a_rank / "closing").write_text("{}")
    with caplog.at_level(logging.DEBUG, logger="arrol_pl"):
        try:
            with stop:
                os.kill(os.getpid(), signal.SIGTERM)
        finally:
            stop.restore()
    assert stop.requested  # stopped as on any SIGTERM
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def vllm_dump(exc: BaseException) -> list[logging.LogRecord]:
    """What reaches vLLM's dump logger when it logs, as vLLM does, while handling ``exc`` (with the run's console)."""
    from arrol_pl.train.run.console import VLLM_DUMP, quiet_console

    quiet_console()
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger(VLLM_DUMP)
    logger.addHandler(handler)
    try:
        try:
            raise exc
        except BaseException:
            logger.error("Dumping scheduler output for model execution: %s", "...")
    finally:
        logger.removeHandler(handler)
    return records


def lost_peer() -> RuntimeError:
    """gloo's error for a peer gone, raised out of a ``torch.distributed`` call."""
    import torch
    import torch.distributed as dist

    try:
        try:
            # raises inside distributed_c10d.py whether or not this process has a group (vLLM's engine makes one)
            dist.all_reduce(torch.zeros(1), op="not an op")
        except TypeError as inner:
            raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:2") from inner
    except RuntimeError as exc:
        return exc
    raise AssertionError("all_reduce took an op it has no such name for")


def test_vllms_dump_is_dropped_when_the_world_goes_down_and_kept_for_an_error_of_its_own(a_rank):
    assert rank_errors.peer_lost(lost_peer())
    assert vllm_dump(lost_peer()) == [], "a peer gone: the launcher names the rank that died"
    assert len(vllm_dump(RuntimeError("an engine error of its own"))) == 1
    (a_rank / "closing").write_text("{}")  # torchrun closing the group after another rank failed
    assert vllm_dump(RuntimeError("interrupted")) == []
