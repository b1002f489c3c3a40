"""The ranks of one node under torchrun (``arrol train trainer.devices=N``): when one of them dies or a collective
times out, one line says which rank, how, and how to resume.

Decisions:
- **torchrun runs inside a wrapper.** ``arrol train`` starts ``python -m arrol_pl.train.run.ranks <run dir>
  <torchrun's arguments>`` (:func:`launch`), which runs torchrun's own ``run`` and catches its
  ``ChildFailedError``: the failed ranks (exit code or signal, the record each wrote) go to a report the launcher
  reads (:data:`REPORT`), torchrun's log (the closing signals, the failure) and each failed rank's traceback to
  ``ranks.log`` in the run directory (:data:`RANKS_LOG`), not to the console. The ranks' own output is untouched.
- **A rank records how it ended.** A rank whose run raised writes torchrun's error file
  (``TORCHELASTIC_ERROR_FILE``, :func:`rank_ended`): one line, the traceback and its kind (:data:`KINDS`,
  :func:`~arrol_pl.train.run.rank_errors.failure_kind`). Under
  ``arrol train``'s launcher a rank that lost its peers, timed out or failed on its own exits 1 without a traceback
  (the launcher reports it); a rank that printed its own line (a record it could not write, a config error, a
  signal) keeps it; under a torchrun of the user's the rank raises as before, and torchrun's report shows the record.
- **torchrun's closing signal is told apart.** When one rank ends in failure torchrun sends SIGTERM to the others;
  the wrapper writes a marker first (:data:`~arrol_pl.train.run.rank_errors.CLOSING_ENV`), so a rank that
  receives it stops as on any SIGTERM but says nothing (:func:`~arrol_pl.train.run.rank_errors.group_closing`)
  and records itself as lost, and one whose peer vanished mid-collective keeps its handlers until its summary is
  written (:func:`~arrol_pl.train.run.rank_errors.peer_lost`).
- **The launcher says it once** (:func:`report_end`). The root cause is the earliest failure that is not a
  consequence of another (a lost peer, torchrun's SIGTERM, an interrupted rank); two lines on stderr: the rank, its
  signal, exit code or error, the steps done (and where its traceback is); the last checkpoint and the resume
  command (:func:`~arrol_pl.train.records.rundir.resume_command`). ``summary.json`` is marked failed with that
  reason, written from ``history.jsonl`` when no rank wrote one. The launcher exits with the rank's status (128 +
  signal for a signal).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from arrol_pl.train.run.rank_errors import CLOSING_ENV, failure_kind, failure_line, group_closing, timeout_setting
from arrol_pl.train.run.child import run_alone

RANKS_LOG = "ranks.log"
"""torchrun's log and the failed ranks' records (tracebacks included), in the run directory."""
REPORT = ".ranks-report.json"
"""The wrapper's report of the failed ranks, read and removed by the launcher."""
KINDS = ("lost", "timeout", "error", "reported", "interrupted")
"""How a rank's run ended: it lost a peer (or torchrun closed the group), a collective ran past
``trainer.rank_timeout_minutes``, its own error, one it printed itself in one line, a signal it printed."""


# -- in a rank ---------------------------------------------------------------------------------------------------


def rank_ended(exc: BaseException, kind: str | None = None) -> bool:
    """A rank of several, under torchrun, whose run ended with ``exc``: record it in torchrun's error file (one line,
    the traceback, ``kind``: :func:`failure_kind` unless given; ``interrupted`` becomes ``lost`` while torchrun closes
    the group). Returns whether to exit without a word: under ``arrol train``'s launcher, which reports it, every
    kind but those the rank printed itself. False, recording nothing, in one process or outside torchrun."""
    from arrol_pl.train.records.rundir import OWNER_ENV

    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return False
    kind = kind or failure_kind(exc)
    if kind == "interrupted" and group_closing():
        kind = "lost"
    record = {
        "message": {
            "message": failure_line(exc, kind),
            "extraInfo": {"py_callstack": "".join(traceback.format_exception(exc)), "timestamp": str(int(time.time()))},
        },
        "arrol": {"kind": kind},
    }
    try:
        Path(path).write_text(json.dumps(record))
    except OSError:
        pass  # torchrun reports the exit code alone
    return kind not in ("reported", "interrupted") and OWNER_ENV in os.environ


# -- torchrun's wrapper -------------------------------------------------------------------------------------------


def failure_record(rank: int, failure: Any) -> dict[str, Any]:
    """A failed rank of torchrun's ``ChildFailedError`` (a ``ProcessFailure``) as the report holds it."""
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    message = data.get("message")
    if isinstance(message, dict):
        line, stack = message.get("message", ""), message.get("extraInfo", {}).get("py_callstack", "")
    else:  # torchrun's placeholder where no rank wrote the file
        line, stack = "" if message in (None, "<NONE>") else str(message), ""
    return {
        "rank": rank,
        "local_rank": failure.local_rank,
        "pid": failure.pid,
        "exitcode": failure.exitcode,
        "signal": failure.signal_name() if failure.exitcode < 0 else None,
        "timestamp": failure.timestamp,
        "kind": data.get("arrol", {}).get("kind"),
        "line": line,
        "traceback": stack,
    }


def _announce_closing(api: Any, marker: Path) -> None:
    """Write ``marker`` before torchrun's process context closes the ranks left after a failure."""
    close = api.PContext.close

    def closing(self, *args, **kwargs):
        if getattr(self, "_failures", None):
            marker.write_text(json.dumps({str(r): f.exitcode for r, f in self._failures.items()}))
        return close(self, *args, **kwargs)

    api.PContext.close = closing


def main(argv: list[str] | None = None) -> int:
    """``python -m arrol_pl.train.run.ranks <run dir> <torchrun's arguments>``: torchrun, its log and its failure
    report in the run directory (module docstring); returns 0, 1 after a failed rank, 128 + signal after a signal."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    argv = list(sys.argv[1:] if argv is None else argv)
    out_dir, args = Path(argv[0]), argv[1:]
    handler = logging.FileHandler(out_dir / RANKS_LOG, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).propagate = False
    console = logging.StreamHandler()  # torchrun's OMP_NUM_THREADS notice, as `python -m torch.distributed.run` has it
    logging.getLogger("torch.distributed.run").addHandler(console)
    logging.getLogger("torch.distributed.run").propagate = False
    log = logging.getLogger("torch.distributed.elastic")
    if os.environ.get(CLOSING_ENV):
        _announce_closing(api, Path(os.environ[CLOSING_ENV]))
    try:
        torchrun.run(torchrun.parse_args(args))
    except ChildFailedError as exc:
        failures = [failure_record(rank, f) for rank, f in sorted(exc.failures.items())]
        for f in failures:
            log.error(
                "rank %d (pid %d) ended with exit code %d%s%s%s",
                f["rank"],
                f["pid"],
                f["exitcode"],
                f" ({f['signal']})" if f["signal"] else "",
                f": {f['line']}" if f["line"] else "",
                f"\n{f['traceback']}" if f["traceback"] else "",
            )
        (out_dir / REPORT).write_text(json.dumps({"failures": failures}))
        return 1
    except api.SignalException as exc:
        log.warning("torchrun received %s", exc.sigval.name)
        (out_dir / REPORT).write_text(json.dumps({"signal": exc.sigval.name}))
        return 128 + int(exc.sigval)
    except Exception:  # noqa: BLE001 - its rendezvous or its start: the launcher names the log
        log.exception("torchrun failed")
        return 1
    return 0


# -- the launcher -------------------------------------------------------------------------------------------------


def launch(run: Any, out_dir: Path, hydra_dir: Path, argv: list[str], overrides: list[str]) -> int:
    """Run ``argv`` (``arrol train``'s arguments) as ``trainer.devices`` ranks under torchrun's wrapper, one run
    directory ``out_dir`` for all; after a failed rank, :func:`report_end`. Returns the exit status."""
    from arrol_pl.train.records.rundir import OWNER_ENV

    closing, report = out_dir / f".{RANKS_LOG}.closing", out_dir / REPORT
    for stale in (closing, report):
        stale.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        __name__,
        str(out_dir),
        "--standalone",
        f"--nproc-per-node={run.trainer.devices}",
        "-m",
        "arrol_pl",
        "train",
        *argv,
        f"hydra.run.dir={hydra_dir}",
    ]
    start = time.perf_counter()
    # torchrun in a session of its own: a Ctrl-C reaches it once, from here, it stops its ranks on it (each saves
    # and says so), and this process waits for them rather than killing torchrun and leaving them running
    code = run_alone(command, env={**os.environ, OWNER_ENV: str(os.getpid()), CLOSING_ENV: str(closing)})
    try:
        return code if code == 0 else report_end(run, out_dir, code, time.perf_counter() - start, overrides)
    finally:
        for done in (closing, report):
            done.unlink(missing_ok=True)


def consequence(f: dict[str, Any]) -> bool:
    """Whether a failed rank ended because another did: it lost a peer, torchrun's closing SIGTERM ended it, or it
    stopped on a signal (torchrun's SIGKILL, 30 s after its SIGTERM, comes later than the failure it follows)."""
    return f["kind"] in ("lost", "interrupted") or (f["kind"] is None and f["signal"] in ("SIGTERM", "SIGINT"))


def root_cause(failures: list[dict[str, Any]]) -> dict[str, Any]:
    """The failure the others followed: the earliest that is not a :func:`consequence` (a recorded one first within
    a second, then the lowest rank); the earliest of all when every one is."""
    causes = [f for f in failures if not consequence(f)] or failures
    return min(causes, key=lambda f: (f["timestamp"], f["kind"] is None, f["rank"]))


def exit_status(f: dict[str, Any]) -> int:
    return 128 - f["exitcode"] if f["exitcode"] < 0 else f["exitcode"]


def describe(f: dict[str, Any], world: int, steps: int, log: Path, timeout: str, completed: bool = False) -> str:
    """The line naming what ended rank ``f`` (a report's failure) of ``world``, after ``steps`` steps (``completed``:
    once the run had completed, its summary written)."""
    rank = f"rank {f['rank']} of {world}"
    when = f"after step {steps}" if steps else "before its first step"
    others = "the other rank stopped with it" if world == 2 else "the other ranks stopped with it"
    if completed:
        when, others = f"{when}, once the run had completed", ""
    if f["kind"] in ("timeout", "lost"):  # the line names the rank
        return f"{f['line']}, {when}; its traceback: {log}"
    others = f"; {others}" if others else ""
    if f["kind"] == "error":
        return f"{rank} failed {when}: {f['line']}{others} (its traceback: {log})"
    if f["signal"]:
        hint = (
            f" (NCCL aborts a rank whose collective ran past {timeout}: its output above names the collective)"
            if f["signal"] == "SIGABRT"
            else ""
        )
        return f"{rank} was killed by {f['signal']} {when}{others}{hint}"
    return f"{rank} exited with code {f['exitcode']} {when}{others} (its output is above; torchrun's log: {log})"


def resume_line(out_dir: Path) -> str:
    """The last checkpoint and the command that resumes from it, or that none was written."""
    from arrol_pl.train.records.rundir import last_checkpoint, resume_command

    last = last_checkpoint(out_dir)
    if last is None:
        return f"no checkpoint was written: nothing to resume (outputs: {out_dir})"
    return f"the last checkpoint is {last}: resume with {resume_command(last)}"


def written_summary(out_dir: Path) -> Any:
    """The ``summary.json`` a rank wrote (a ``RunSummary``); None: none, or unreadable."""
    from arrol_pl.train.records.summary import RunSummary

    try:
        return RunSummary.read(out_dir)
    except (OSError, ValueError):
        return None


def mark_failed(run: Any, out_dir: Path, reason: str, wall: float, overrides: list[str]) -> None:
    """``summary.json`` marked failed with ``reason``; written from ``history.jsonl`` when no rank wrote one."""
    from arrol_pl.train.records.rundir import last_checkpoint, read_rows
    from arrol_pl.train.run.finish import summarise
    from arrol_pl.train.run.prelaunch import effective_keep_ratio

    summary = written_summary(out_dir)
    if summary is None:
        history = read_rows(out_dir / "history.jsonl") if (out_dir / "history.jsonl").is_file() else []
        last = last_checkpoint(out_dir)
        summary = summarise(
            run,
            history,
            None,
            None,
            wall,
            checkpoint=str(last) if last else None,
            keep_ratio_effective=effective_keep_ratio(run),
            checkpoint_dir=str(out_dir / "checkpoints"),
            tensorboard_dir=str(out_dir / "tb"),
            overrides=list(overrides),
        )
    summary.status, summary.error, summary.signal = "failed", reason, None
    try:
        summary.write(out_dir)
    except OSError as exc:
        print(f"summary.json not written ({exc.strerror or exc})", file=sys.stderr)


def report_end(run: Any, out_dir: Path, code: int, wall: float, overrides: list[str]) -> int:
    """After torchrun's wrapper exited ``code`` (not 0): the lines of the module docstring, ``summary.json`` marked
    failed; returns the exit status (the failed rank's)."""
    from arrol_pl.train.records.rundir import read_rows

    log = out_dir / RANKS_LOG
    try:
        report = json.loads((out_dir / REPORT).read_text())
    except (OSError, ValueError):
        report = {}
    if "signal" in report:  # torchrun was stopped (Ctrl-C): the ranks stopped on it and said so
        return code
    failures = report.get("failures") or []
    summary = written_summary(out_dir)
    completed = summary is not None and summary.status == "completed"
    if not failures:
        reason = f"torchrun exited with code {code} before any rank failed (its log: {log})"
        status = code
    else:
        root = root_cause(failures)
        if root["kind"] in ("reported", "interrupted"):  # the rank printed its own line, the resume command in it
            return exit_status(root)
        steps = len(read_rows(out_dir / "history.jsonl")) if (out_dir / "history.jsonl").is_file() else 0
        reason = describe(
            root, run.trainer.ranks, steps, log, timeout_setting(run.trainer.rank_timeout_minutes), completed
        )
        status = exit_status(root)
    if completed:  # a rank ended badly once every record was written: the run stands
        print(f"{reason} (outputs: {out_dir})", file=sys.stderr)
        return status
    mark_failed(run, out_dir, reason, wall, overrides)
    print(f"stopped: {reason}", file=sys.stderr)
    print(resume_line(out_dir), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
