"""One run per directory, the history written as the run goes, and checkpoint retention, without a model: the
directory check, the rows a resume starts from, and the callbacks that write the history and the checkpoints
(driven by a stand-in trainer that writes small files). Whole runs through experiments/run.py (a reused
directory refused, a killed run resumed in its own directory, retention) are in test_faults.py."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from arrol_pl.train.records.summary import RunSummary
from arrol_pl.train.run.callbacks import HistoryFile, RunCheckpoints
from arrol_pl.train.run.finish import RunInterrupted
from arrol_pl.train.records.rundir import (
    CLAIM_FILE,
    OWNER_ENV,
    check_output_dir,
    claim_holder,
    claim_output_dir,
    history_before,
    latest_run,
    read_rows,
    remove_if_only_hydra,
    resolve_resume,
    resume_command,
    resumed_run_dir,
    run_files,
    step_checkpoints,
    write_rows,
)
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"step": float(k), "reward/accuracy": k / 10, "time/wall": 1.5 * k} for k in range(start, n)]


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def a_run(directory: Path, steps: tuple[int, ...] = (2, 4)) -> Path:
    """A directory as a run leaves it (file contents are stand-ins)."""
    (directory / "checkpoints").mkdir(parents=True)
    (directory / "tb").mkdir()
    (directory / ".hydra").mkdir()
    (directory / ".hydra" / "config.yaml").write_text("trainer: {}\n")
    write_rows(directory / "history.jsonl", rows(5))
    (directory / "summary.json").write_text("{}")
    (directory / "tb" / "events.out.tfevents.1.host.1.0").write_bytes(b"\0")
    for k in steps:
        (directory / "checkpoints" / f"step{k:05d}.ckpt").write_bytes(b"ckpt")
    (directory / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    return directory


def test_a_directory_holding_a_run_is_refused_and_left_as_it_was(tmp_path):
    run = a_run(tmp_path / "run")
    before = snapshot(run)
    assert run_files(run) == ["history.jsonl", "summary.json", "checkpoints/", "tb/"]
    last = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError) as err:
        check_output_dir(run, None, None)
    message = str(err.value)
    assert "\n" not in message and f"output directory {run} already holds another run's files" in message
    assert f"resume it with trainer.resume={run}, or pass a new directory" in message
    # another run's checkpoint does not continue this one
    other = a_run(tmp_path / "other")
    with pytest.raises(ConfigError, match="already holds another run's files"):
        check_output_dir(run, str(other / "checkpoints" / "last.ckpt"), {"global_step": 4})
    # its own newest checkpoint does; an older one would drop the later checkpoint's steps
    check_output_dir(run, str(last), {"global_step": 4})
    check_output_dir(run, str(run / "checkpoints" / "step00004.ckpt"), {"global_step": 4})
    with pytest.raises(
        ConfigError,
        match=r"trainer.resume=.*step00002.ckpt: .* holds this run's later checkpoint "
        r"step00004.ckpt; continue the run with trainer.resume=.*run, or "
        r"branch from step 2 into a new directory",
    ):
        check_output_dir(run, str(run / "checkpoints" / "step00002.ckpt"), {"global_step": 2})
    assert snapshot(run) == before


def test_what_counts_as_a_run(tmp_path):
    check_output_dir(tmp_path / "missing", None, None)
    hydra_only = tmp_path / "hydra-only"
    (hydra_only / ".hydra").mkdir(parents=True)
    (hydra_only / "run.log").write_text("")
    (hydra_only / "checkpoints").mkdir()  # empty folders are no run
    (hydra_only / "tb").mkdir()
    check_output_dir(hydra_only, None, None)
    crashed = tmp_path / "crashed"  # a run that died before its first checkpoint: nothing to resume
    crashed.mkdir()
    write_rows(crashed / "history.jsonl", rows(1))
    with pytest.raises(ConfigError, match=r"\(history.jsonl\): it has no checkpoint to resume, or pass a new "):
        check_output_dir(crashed, None, None)


def test_a_refused_run_leaves_only_the_directories_that_were_there(tmp_path):
    """The run directory goes when it holds only Hydra's files, and so do its parents below the deepest directory
    that existed before the command (a sweep's holding its multirun.yaml); a directory with anything else stays."""
    run = tmp_path / "outputs" / "multirun" / "sweep" / "0"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("")
    (run.parent / "multirun.yaml").write_text("")
    remove_if_only_hydra(run, existed=tmp_path)
    assert list(tmp_path.iterdir()) == []
    (run / ".hydra").mkdir(parents=True)
    (tmp_path / "outputs" / "keep.txt").write_text("")
    remove_if_only_hydra(run, existed=tmp_path)  # outputs/ holds a file: it stays, and what is above it
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep.txt", "outputs"]
    (run / ".hydra").mkdir(parents=True)
    remove_if_only_hydra(run, existed=tmp_path / "outputs" / "multirun")  # it was there before: kept, empty
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == [
        "outputs",
        "outputs/keep.txt",
        "outputs/multirun",
    ]
    (run / "history.jsonl").parent.mkdir(parents=True)
    (run / "history.jsonl").write_text("")
    remove_if_only_hydra(run, existed=tmp_path)  # a run's file: nothing goes
    assert (run / "history.jsonl").is_file()


def test_a_resume_starts_from_the_rows_before_its_checkpoint(tmp_path, caplog):
    run = a_run(tmp_path / "run")
    # a crash mid-write leaves a cut line; rows of steps after the checkpoint's are dropped
    with open(run / "history.jsonl", "a") as f:
        f.write('{"step": 5.0, "rew')
    assert [r["step"] for r in read_rows(run / "history.jsonl")] == [0, 1, 2, 3, 4]
    kept = history_before(run / "checkpoints" / "last.ckpt", {"global_step": 3, "arrol": {}})
    assert kept == rows(3)
    # a checkpoint written before the history left checkpoints holds its rows itself
    assert history_before(tmp_path / "x.ckpt", {"global_step": 2, "arrol": {"history": rows(2)}}) == rows(2)
    # a checkpoint alone, without its run's history: the summary covers fewer steps, and says so
    assert history_before(tmp_path / "alone" / "x.ckpt", {"global_step": 2, "arrol": {}}) == []
    assert "0 of the 2 steps before it have a history row" in caplog.text
    (run / "history.jsonl").write_text('{"step": 0.0}\nnot json\n{"step": 1.0}\n')
    with pytest.raises(ConfigError, match=r"^trainer.resume=.*last.ckpt: .*history.jsonl: line 2 is not JSON"):
        history_before(run / "checkpoints" / "last.ckpt", {"global_step": 3, "arrol": {}})


def checkpointed(run: Path, ns: int) -> None:
    """Date ``run``'s checkpoints as written at ``ns``: its step files just before its last.ckpt."""
    for path in (run / "checkpoints").glob("*.ckpt"):
        os.utime(path, ns=(ns - (path.name != "last.ckpt"),) * 2)


def test_resume_by_run_finds_the_checkpoint_and_the_directory_it_continues(tmp_path):
    """``trainer.resume``: a run directory continues that run in it; ``auto`` continues the run's own directory,
    else the run of the same name whose last.ckpt was written last; no checkpoint: a fresh start, said in one line."""
    runs = tmp_path / "outputs" / "runs"
    old, new = a_run(runs / "2026-01-01_09-00-00_arrol-grpo"), a_run(runs / "2026-01-01_10-00-00_arrol-grpo")
    a_run(runs / "2026-01-01_11-00-00_other-arrol-grpo")  # another name, its checkpoint written last
    a_run(runs / "2026-01-01_12-00-00_arrol-grpo-2")
    (runs / "2026-01-01_13-00-00_arrol-grpo" / "checkpoints").mkdir(parents=True)  # killed before a checkpoint
    for i, d in enumerate(sorted(runs.iterdir())):
        checkpointed(d, 10**18 + i * 10**9)
    fresh = runs / "2026-01-02_08-00-00_arrol-grpo"  # the directory Hydra would make now
    assert latest_run(runs, "arrol-grpo") == new and latest_run(tmp_path / "nowhere", "arrol-grpo") is None
    assert resolve_resume("auto", "arrol-grpo", fresh, pinned=False) == (new / "checkpoints" / "last.ckpt", new, None)
    checkpointed(old, 2 * 10**18)  # the older run was resumed since
    assert resolve_resume("auto", "arrol-grpo", fresh, pinned=False)[:2] == (old / "checkpoints" / "last.ckpt", old)
    # the run's own directory first, and only it when trainer.output_dir pins it
    assert resolve_resume("auto", "arrol-grpo", new, pinned=True)[:2] == (new / "checkpoints" / "last.ckpt", new)
    checkpoint, where, note = resolve_resume("auto", "arrol-grpo", fresh, pinned=True)
    assert (checkpoint, where) == (None, fresh)
    assert note == f"trainer.resume=auto: no run in {fresh} holds a checkpoint; starting a fresh run in {fresh}"
    checkpoint, where, note = resolve_resume("auto", "gsm8k-run", fresh, pinned=False)
    assert (checkpoint, where) == (None, fresh) and "\n" not in note
    assert note.startswith(f"trainer.resume=auto: no run named gsm8k-run under {runs} holds a checkpoint; starting")
    # a run directory (or its checkpoints/): that run, in it; without a checkpoint a fresh start there
    for given in (new, new / "checkpoints"):
        assert resolve_resume(str(given), "x", fresh, pinned=False) == (new / "checkpoints" / "last.ckpt", new, None)
    empty = runs / "2026-01-01_13-00-00_arrol-grpo"
    checkpoint, where, note = resolve_resume(str(empty), "x", fresh, pinned=False)
    assert (checkpoint, where) == (None, empty) and "no checkpoints/last.ckpt there; starting a fresh run in it" in note
    with pytest.raises(
        ConfigError,
        match=r"trainer.resume=.* continues that run in its own directory, and "
        r"trainer.output_dir=.* names another: drop one",
    ):
        resolve_resume(str(new), "x", fresh, pinned=True)
    # a .ckpt path resumes into the directory given, as it always has; no resume: nothing found
    ckpt = str(old / "checkpoints" / "step00002.ckpt")
    assert resolve_resume(ckpt, "x", fresh, pinned=False) == (Path(ckpt), fresh, None)
    assert resolve_resume(None, "x", fresh, pinned=False) == (None, fresh, None)
    # what the command line hands Hydra as the run's directory
    run = load_run_config({"name": "arrol-grpo", "trainer": {"resume": "auto"}})
    assert resumed_run_dir(run, fresh) == old
    pinned = load_run_config({"trainer": {"resume": "auto", "output_dir": str(new)}})
    assert resumed_run_dir(pinned, fresh) == new  # trainer.output_dir is Hydra's too: its record and log go there
    # killed between a step's two writes: its step file is newer than last.ckpt, and is the one to continue from
    os.utime(new / "checkpoints" / "step00004.ckpt", ns=(3 * 10**18,) * 2)
    assert resolve_resume(str(new), "x", fresh, pinned=False)[0] == new / "checkpoints" / "step00004.ckpt"


def test_the_resume_command_names_the_run_directory_wherever_it_continues_the_run_in_place(tmp_path):
    """What a stopped run prints (a signal's, a failure's line): the run's directory, which resumes from the same
    checkpoint in place; a .ckpt path, a new run from it, only where the directory would resume from another one."""
    run = a_run(tmp_path / "run")
    checkpointed(run, 10**18)
    ckpts = run / "checkpoints"
    assert resume_command(ckpts / "last.ckpt") == resume_command(str(ckpts / "last.ckpt")) == f"trainer.resume={run}"
    assert resume_command(ckpts / "step00002.ckpt") == f"trainer.resume={ckpts / 'step00002.ckpt'}"
    os.utime(ckpts / "step00004.ckpt", ns=(2 * 10**18,) * 2)  # a kill -9 between a step's two writes
    assert resume_command(ckpts / "step00004.ckpt") == f"trainer.resume={run}"
    assert resume_command(ckpts / "last.ckpt") == f"trainer.resume={ckpts / 'last.ckpt'}"
    loose = tmp_path / "last.ckpt"  # a checkpoint outside a run's checkpoints/ (a resume branched from it)
    loose.write_bytes(b"ckpt")
    assert resume_command(loose) == f"trainer.resume={loose}"
    interrupted = RunInterrupted(signal.SIGTERM, RunSummary(steps=4, checkpoint=str(ckpts / "step00004.ckpt")))
    assert str(interrupted) == f"SIGTERM: stopped after 4 steps; resume with trainer.resume={run}"


def test_a_run_that_finds_nothing_to_resume_starts_fresh_and_says_so(tmp_path, caplog):
    from arrol_pl.train.run.experiment import continued_run

    run = load_run_config({"trainer": {"resume": "auto"}})
    with caplog.at_level(logging.WARNING):
        fresh, where = continued_run(run, tmp_path / "runs" / "new")
    assert fresh.trainer.resume is None and where == tmp_path / "runs" / "new"
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("trainer.resume=auto: no run named arrol-grpo under") and line.endswith(
        f"starting a fresh run in {tmp_path / 'runs' / 'new'}"
    )
    found = a_run(tmp_path / "runs" / "arrol-grpo")
    resumed, where = continued_run(run, tmp_path / "runs" / "new")
    assert resumed.trainer.resume == str(found / "checkpoints" / "last.ckpt") and where == found


def test_a_resume_that_does_not_exist_is_refused_in_one_line_before_hydra_starts(tmp_path, command_main):
    out = command_main(tmp_path, "train", f"trainer.resume={tmp_path / 'no-such-run'}")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"config error: trainer.resume='{tmp_path / 'no-such-run'}': no such file or "
        "directory (a run's, a .ckpt, or auto)"
    )
    assert list(tmp_path.iterdir()) == [], "a refused resume left a directory behind"


class Trainer(SimpleNamespace):
    """The parts of a Lightning trainer the callbacks use; checkpoints are small files named by their step."""

    def save_checkpoint(self, path: Path, weights_only: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(self.global_step))


def test_each_step_is_on_disk_when_it_ends_and_old_checkpoints_go(tmp_path):
    path = tmp_path / "history.jsonl"
    write_rows(path, rows(5))  # an earlier session went two steps past its checkpoint at 3
    module = SimpleNamespace(history=rows(3), ranks=None)
    trainer = Trainer(global_step=3, max_steps=10, should_stop=False, is_global_zero=True)
    history, checkpoints = HistoryFile(path), RunCheckpoints(tmp_path / "checkpoints", checkpoint_every=2, keep=2)
    history.on_train_start(trainer, module)
    assert read_rows(path) == rows(3)
    for step in range(3, 10):
        module.history.append(rows(step + 1, step)[0])
        trainer.global_step = step + 1
        history.on_train_batch_end(trainer, module, None, None, step)
        checkpoints.on_train_batch_end(trainer, module, None, None, step)
        assert read_rows(path) == rows(step + 1)  # appended and flushed as the step ended
        kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
        newest = sorted(step_checkpoints(tmp_path / "checkpoints"))
        assert newest == [k for k in (4, 6, 8, 10) if k <= step + 1][-2:], step
        assert kept == ["last.ckpt", *(f"step{k:05d}.ckpt" for k in newest)]
        assert (tmp_path / "checkpoints" / "last.ckpt").read_text() == str(newest[-1])
    # several ranks: the others write nothing
    other = tmp_path / "rank1.jsonl"
    HistoryFile(other).on_train_batch_end(SimpleNamespace(is_global_zero=False), module, None, None, 0)
    assert not other.exists()


def test_keep_zero_writes_last_alone_and_none_keeps_every_one(tmp_path):
    module = SimpleNamespace(history=[], ranks=None)
    for keep, expected in (
        (0, ["last.ckpt"]),
        (None, ["last.ckpt", "step00001.ckpt", "step00002.ckpt", "step00003.ckpt"]),
    ):
        directory = tmp_path / str(keep)
        trainer = Trainer(global_step=0, max_steps=3, should_stop=False, is_global_zero=True)
        checkpoints = RunCheckpoints(directory, checkpoint_every=1, keep=keep)
        for step in range(3):
            trainer.global_step = step + 1
            checkpoints.on_train_batch_end(trainer, module, None, None, step)
        assert sorted(p.name for p in directory.iterdir()) == expected, keep


def test_keep_checkpoints_is_checked():
    assert load_run_config({}).trainer.keep_checkpoints == 3
    assert load_run_config({"trainer": {"keep_checkpoints": None}}).trainer.keep_checkpoints is None
    with pytest.raises(
        ConfigError,
        match=r"trainer.keep_checkpoints must be >= 0 \(0: last.ckpt alone; null: keep "
        r"every one\), got -1",
    ):
        load_run_config({"trainer": {"keep_checkpoints": -1}})


def test_a_crash_writes_a_failed_summary_and_propagates(tmp_path, monkeypatch):
    """Any exception during a run (not a config error, not a signal) leaves its history and a summary marked failed
    naming the error, then propagates with its own traceback; the policy never gets built here."""
    import json

    import arrol_pl.train.run.build as build
    import arrol_pl.train.run.experiment as experiment

    def crash(run):
        raise RuntimeError("injected: the node went away")

    monkeypatch.setattr(build, "policy_directory", crash)
    accepted = []
    run = load_run_config({"model": {"cache_dir": str(tmp_path / "cache")}, "data": {"num_heldout": 8}})
    with pytest.raises(RuntimeError, match="injected: the node went away") as err:
        experiment.run_experiment(run, tmp_path / "run", accepted=lambda: accepted.append(True))
    assert err.traceback[-1].name == "crash"  # the original traceback, not a re-raise site
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "injected: the node went away" in summary["error"]
    assert read_rows(tmp_path / "run" / "history.jsonl") == [] and accepted == [True]
    assert not (tmp_path / "cache").exists()


def test_a_cache_the_disk_cannot_take_refuses_the_run_and_leaves_no_run_files(tmp_path, monkeypatch):
    """A full disk met while building the tiny policy (the check before launch passed): a ConfigError naming the cache,
    as any refusal, with nothing of a run written (the directory the run made goes with its claim), nothing left in
    the cache."""
    import errno
    import tempfile

    from arrol_pl.train.run import experiment

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    cache = tmp_path / "cache"
    run = load_run_config({"model": {"cache_dir": str(cache)}, "data": {"num_heldout": 8}})
    with pytest.raises(ConfigError) as err:
        experiment.run_experiment(run, tmp_path / "run")
    assert str(err.value) == (
        f"the model cache {cache} cannot be written (No space left on device): set "
        "model.cache_dir or $ARROL_CACHE to a writable directory with free space"
    )
    assert not (tmp_path / "run").exists() and list(cache.iterdir()) == []


def test_the_hydra_record_is_written_as_hydra_writes_it(tmp_path):
    from omegaconf import OmegaConf

    from arrol_pl.train.records.rundir import save_hydra_record

    save_hydra_record(
        tmp_path,
        OmegaConf.create({"name": "x", "trainer": {"seed": 1}}),
        OmegaConf.create({"run": {"dir": "outputs/runs/${now:%Y}_${name}"}}),
        ["trainer.seed=1"],
    )
    assert OmegaConf.load(tmp_path / ".hydra" / "config.yaml") == {"name": "x", "trainer": {"seed": 1}}
    hydra = OmegaConf.to_container(OmegaConf.load(tmp_path / ".hydra" / "hydra.yaml"), resolve=False)
    assert hydra == {"hydra": {"run": {"dir": "outputs/runs/${now:%Y}_${name}"}}}  # interpolations kept, as Hydra's
    assert OmegaConf.load(tmp_path / ".hydra" / "overrides.yaml") == ["trainer.seed=1"]


def hold_claim(directory: Path) -> subprocess.Popen:
    """Another process holding the claim on ``directory`` until its stdin closes."""
    code = (
        "import sys; from pathlib import Path; from arrol_pl.train.records.rundir import claim_output_dir\n"
        "with claim_output_dir(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("RANK", OWNER_ENV)},
    )
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.subprocess
def test_a_directory_another_live_run_claimed_is_refused_until_it_ends(tmp_path, monkeypatch):
    """Two runs given one directory (the default's name is the time to the second): the second is refused while the
    first lives, whatever either has written; once the first ends its claim is gone and the directory is free."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv(OWNER_ENV, raising=False)
    run = tmp_path / "2026-12-03_10-00-00_arrol-grpo"
    other = hold_claim(run)
    assert claim_holder(run / CLAIM_FILE) == {"pid": other.pid, "host": socket.gethostname()}
    with pytest.raises(ConfigError) as refused, claim_output_dir(run):
        pytest.fail("the claimed directory was accepted")
    message = str(refused.value)
    assert (
        f"output directory {run} is in use by another run (process {other.pid} on {socket.gethostname()})" in message
        and "pass a new directory" in message
        and str(run / CLAIM_FILE) in message
    )
    other.communicate("")  # the first run ends: its claim goes with it
    assert other.returncode == 0 and not (run / CLAIM_FILE).exists()
    with claim_output_dir(run):
        assert claim_holder(run / CLAIM_FILE)["pid"] == os.getpid()
    assert not run.exists(), "an empty directory the claim created is removed with it"


@pytest.mark.subprocess
def test_a_claim_left_by_a_killed_run_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv(OWNER_ENV, raising=False)
    run = a_run(tmp_path / "run")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (run / CLAIM_FILE).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    with claim_output_dir(run):  # its resume, say
        assert claim_holder(run / CLAIM_FILE)["pid"] == os.getpid()
    assert not (run / CLAIM_FILE).exists() and run_files(run), "the run's files stay"
    # a claim from another host cannot be checked: refused, naming the file to delete
    (run / CLAIM_FILE).write_text(json.dumps({"pid": gone.pid, "host": "elsewhere"}))
    with (
        pytest.raises(ConfigError, match=f"process {gone.pid} on elsewhere.*delete {run / CLAIM_FILE}"),
        claim_output_dir(run),
    ):
        pass


@pytest.mark.subprocess
def test_the_ranks_of_one_run_share_its_claim(tmp_path, monkeypatch):
    """The launcher claims for its ranks: rank 0 started under its claim takes none, and no other rank claims."""
    run = tmp_path / "run"
    launcher = hold_claim(run)
    monkeypatch.setenv(OWNER_ENV, str(launcher.pid))
    monkeypatch.setenv("RANK", "0")
    with claim_output_dir(run):
        assert claim_holder(run / CLAIM_FILE)["pid"] == launcher.pid
    assert (run / CLAIM_FILE).exists(), "rank 0 leaves the launcher's claim in place"
    monkeypatch.delenv(OWNER_ENV)
    monkeypatch.setenv("RANK", "1")
    with claim_output_dir(run):
        pass
    monkeypatch.setenv("RANK", "0")  # a rank 0 that is not the claimant's is another run
    with pytest.raises(ConfigError, match="in use by another run"), claim_output_dir(run):
        pass
    launcher.communicate("")


def test_a_compiled_engine_start_that_fails_in_inductor_names_enforce_eager(monkeypatch, tmp_path):
    """CUDA starts the engine compiled; without a host compiler or Python's headers Inductor fails deep inside vLLM.
    The run refuses it in one line naming the way out; any other start failure stays as it was."""
    import dataclasses

    import arrol_pl.engine
    from arrol_pl.engine.adapter.startup import compile_failure
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.run.build import build_engine

    class InductorError(RuntimeError):
        pass

    def failing(*args, **kwargs):
        try:
            raise InductorError("CppCompileError: C++ compile error\\n fatal error: Python.h: No such file")
        except InductorError as inner:
            raise RuntimeError("Engine core initialization failed. See root cause above.") from inner

    monkeypatch.setattr(arrol_pl.engine, "ArrolEngine", failing)
    run = RunConfig()
    run = dataclasses.replace(run, engine=dataclasses.replace(run.engine, max_model_len=64, enforce_eager=False))
    with pytest.raises(ConfigError) as err:
        build_engine(run, tmp_path, None, [])
    message = str(err.value)
    assert "\n" not in message and message.startswith("engine.enforce_eager: the engine's compiled start failed")
    assert "InductorError: CppCompileError: C++ compile error" in message and "engine.enforce_eager=true" in message
    assert compile_failure(ValueError("max_model_len too large")) is None
    monkeypatch.setattr(arrol_pl.engine, "ArrolEngine", lambda *a, **k: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):
        build_engine(run, tmp_path, None, [])
