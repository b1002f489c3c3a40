"""Fault injection on the real entry point (experiments/run.py, warm-started tiny policy, real vLLM engine):
SIGINT / SIGTERM, the resume a stopped run prints (by its directory), that resume killed with kill -9 and resumed
again by auto in the run's own directory, a checkpoint write that fails, configs and a reused run directory that must
fail before any model loads, a pruning config whose steps can lose every rollout, a directory another live run
holds, and a checkpoint that names a policy directory that is gone. (Evaluating an unfinished run from its
checkpoint alone: test_run_smoke.py's bf16 stats-head run.)

Resume is exact on CPU float32: a run stopped by SIGTERM, resumed, killed and resumed again ends with every history
line equal to the uninterrupted run's, except the ``time/*`` keys (wall-clock measurements), and with its weights.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_python

from arrol_pl.train.records.rundir import CLAIM_FILE, claim_holder, last_checkpoint, run_files
from arrol_pl.train.run.finish import HUB_FILES, hub_files

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow

STEPS = 6


def command(cache: Path, run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "model.warm_start.steps=1000",
        f"model.cache_dir={cache}",
        "data.num_heldout=8",
        "algo.prompts_per_step=4",
        "algo.group_size=4",
        "pruning.cold_start_steps=1",
        "trainer.checkpoint_every=2",
        f"trainer.max_steps={STEPS}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def run(cache: Path, run_dir: Path, *overrides: str, **kw) -> subprocess.CompletedProcess:
    return warm_python.run(
        command(cache, run_dir, *overrides), cwd=run_dir.parent, capture_output=True, text=True, timeout=600, **kw
    )


def start(cache: Path, run_dir: Path, *overrides: str) -> subprocess.Popen:
    return warm_python.Popen(
        command(cache, run_dir, *overrides),
        cwd=run_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"run ended before {path.name} appeared: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, policy_cache):
    """The uninterrupted run every fault is compared with (random pruning, as the stopped and killed runs)."""
    run_dir = tmp_path_factory.mktemp("faults") / "reference"
    out = run(policy_cache, run_dir, "pruning=random")
    assert out.returncode == 0, out.stderr[-4000:]
    assert len(history(run_dir)) == STEPS
    return run_dir


def rows_on_disk(run_dir: Path) -> int:
    path = run_dir / "history.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def test_a_directory_holding_a_run_is_refused_before_any_model_loads(reference, tmp_path):
    """Another run into the reference's directory: exit 2, one line naming both ways on, the run's files untouched,
    its Hydra record (.hydra/) included (Hydra appends to the log before the run starts)."""
    files = {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in reference.rglob("*") if p.is_file() and p.suffix != ".log"
    }
    assert {"config.yaml", "hydra.yaml", "overrides.yaml"} <= {p.name for p in (reference / ".hydra").iterdir()}
    cache = tmp_path / "cache"
    out = run(cache, reference)
    assert out.returncode == 2, out.stderr[-3000:]
    line = next(x for x in out.stderr.splitlines() if x.startswith("config error:"))
    assert f"output directory {reference} already holds another run's files" in line
    assert f"resume it with trainer.resume={reference}, or pass a new directory" in line
    assert "or pass a new directory" in line and "Traceback" not in out.stderr
    assert not cache.exists(), "a model was built before the directory was refused"
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == files


def test_a_directory_another_live_run_holds_is_refused_before_any_model_loads(tmp_path):
    """Two runs started in the same second share the default directory: the one that finds the other's claim
    exits 2 in one line naming the holder, before anything is built, and leaves the claim as it was."""
    run_dir = tmp_path / "2026-12-03_10-00-00_arrol-grpo"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    claim = {"pid": holder.pid, "host": socket.gethostname()}
    (run_dir / CLAIM_FILE).write_text(json.dumps(claim))
    cache = tmp_path / "cache"
    try:
        out = run(cache, run_dir)
    finally:
        holder.communicate(b"")
    assert out.returncode == 2, out.stderr[-3000:]
    line = next(x for x in out.stderr.splitlines() if x.startswith("config error:"))
    assert f"output directory {run_dir} is in use by another run (process {holder.pid} on " in line
    assert not cache.exists(), "a model was built before the directory was refused"
    assert claim_holder(run_dir / CLAIM_FILE) == claim and not run_files(run_dir)


def stop_with_sigterm(cache: Path, run_dir: Path) -> tuple[int, str]:
    """A run with random pruning in ``run_dir``, sent SIGTERM as a scheduler's kill loop sends it (a burst of twelve
    in about 200 ms) once step 2's checkpoint is on disk: its exit code and stderr."""
    proc = start(cache, run_dir, "pruning=random")
    wait_for(run_dir / "checkpoints" / "step00002.ckpt", proc)
    for _ in range(12):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.015)
    _, stderr = proc.communicate(timeout=600)
    return proc.returncode, stderr


@pytest.fixture(scope="module")
def sigterm_stopped(reference, policy_cache) -> tuple[Path, int, str]:
    """The run stopped by SIGTERM (:func:`stop_with_sigterm`): its directory, exit code and stderr."""
    run_dir = reference.parent / "signalled-SIGTERM"
    return (run_dir, *stop_with_sigterm(policy_cache, run_dir))


def test_a_sigterm_burst_saves_checkpoint_history_and_summary(sigterm_stopped):
    """Random pruning (``pruning=random``, the balance study's control) makes these runs its only end-to-end test;
    nothing below depends on which rollouts are pruned. SIGTERM comes as a burst: every one after the first is
    absorbed until the checkpoint, the history, the summary and the claim's release are done. A first SIGINT takes the
    same way (``RunCheckpoints._handle``); through the real entry points: a Ctrl-C that lets each of two ranks finish
    its step (test_distributed_run.py) and a burst of SIGINTs, whose second abandons the step in flight
    (test_signal_burst.py). The printed resume is followed by
    test_a_stopped_run_resumed_by_its_directory_killed_then_resumed_by_auto_ends_as_the_uninterrupted_run."""
    run_dir, returncode, stderr = sigterm_stopped
    signum = signal.SIGTERM
    assert returncode == 128 + signum, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = summary["steps"]
    assert summary["status"] == "interrupted" and summary["signal"] == signum.name
    assert not (run_dir / CLAIM_FILE).exists(), "the claim was released"
    # the signal can land after step 2's checkpoint and before step 3 starts (nothing in flight: 2 steps),
    # or during step 3, which then finishes; either way the run stops before STEPS
    assert 2 <= steps < STEPS, "the step in flight finishes, then the run stops"
    assert len(history(run_dir)) == steps
    assert summary["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    last = load(run_dir / "checkpoints" / "last.ckpt")
    assert last["global_step"] == steps and "history" not in last["arrol"]
    assert (run_dir / "checkpoints" / f"step{steps:05d}.ckpt").exists()
    assert not list((run_dir / "checkpoints").glob("last-*")), "one last.ckpt"
    assert not (run_dir / "export").exists()
    assert summary["config"]["pruning"]["policy"] == "random"
    assert all(row["pruning/keep_ratio"] < 1.0 for row in history(run_dir)[1:])  # pruned after the cold start
    resume = f"trainer.resume={run_dir}"  # the run's directory: the same resume the README and the guide give
    assert (
        f"interrupted: {signum.name}: stopped after {steps} steps; resume with {resume} (outputs: {run_dir})" in stderr
    )
    assert "Traceback" not in stderr
    # Exact resume through this checkpoint, a kill -9 and two resumes:
    # test_a_stopped_run_resumed_by_its_directory_killed_then_resumed_by_auto_ends_as_the_uninterrupted_run.


@pytest.mark.subprocess
def test_a_stopped_run_resumed_by_its_directory_killed_then_resumed_by_auto_ends_as_the_uninterrupted_run(
    reference, sigterm_stopped, tmp_path, policy_cache
):
    """The run SIGTERM stopped (a copy), followed as it printed from a new command (``trainer.resume=<its
    directory>``), that resume killed with SIGKILL once its checkpoint of step 4 and the step after it are on disk,
    then ``trainer.resume=auto``: both continue in the run's own directory, never in the one Hydra would make for the
    new command (which is not created). The kill leaves every finished step's row and only whole checkpoints; auto
    drops the rows past the checkpoint and redoes them once, and the run ends as the uninterrupted one: every history
    row but ``time/*``, the held-out figures and the final weights equal, two step checkpoints kept beside one
    last.ckpt, TensorBoard without a step twice. auto takes the run of the same name whose last.ckpt was written last
    (a copy of an earlier state with an older one is passed by)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "2026-01-01_10-00-00_arrol-grpo"
    shutil.copytree(sigterm_stopped[0], target)
    older = runs / "2026-01-01_09-00-00_arrol-grpo"
    shutil.copytree(target, older)
    last = older / "checkpoints" / "last.ckpt"
    os.utime(last, ns=(last.stat().st_atime_ns, last.stat().st_mtime_ns - 10**12))
    untouched = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in older.rglob("*") if p.is_file()}

    ckpts = target / "checkpoints"
    by_dir = runs / "2026-01-01_11-00-00_arrol-grpo"
    proc = start(policy_cache, by_dir, "pruning=random", f"trainer.resume={target}")
    wait_for(ckpts / "step00004.ckpt", proc)  # written by rename: complete once it exists
    deadline = time.monotonic() + 600
    while rows_on_disk(target) < 5:  # step 4's row, one past the checkpoint
        assert proc.poll() is None and time.monotonic() < deadline, "the resume ended before its fifth step"
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not by_dir.exists(), "the resume wrote into a new directory"
    assert claim_holder(target / CLAIM_FILE)["pid"] == proc.pid, "the resume held the run's claim"
    # a killed run writes no summary: the one on disk is still the stopped run's
    assert (target / "summary.json").read_bytes() == (sigterm_stopped[0] / "summary.json").read_bytes()
    for ckpt in ckpts.glob("*.ckpt"):  # no file with a checkpoint's name is partial
        assert load(ckpt)["global_step"] >= 2, ckpt
    rows = history(target)  # each step's row was written as it ended, not at the end of the run
    assert len(rows) >= 5 and without_times(rows) == without_times(history(reference))[: len(rows)]
    resumed_from = load(last_checkpoint(target))["global_step"]  # what a resume by the directory continues from
    assert resumed_from == 4

    by_auto = runs / "2026-01-01_12-00-00_arrol-grpo"
    out = run(policy_cache, by_auto, "pruning=random", "trainer.resume=auto", "trainer.keep_checkpoints=2")
    assert out.returncode == 0, out.stderr[-4000:]
    assert not by_auto.exists(), "auto started a new run"
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in older.rglob("*") if p.is_file()} == untouched, (
        "auto continued another run"
    )

    assert [r["step"] for r in history(target)] == list(map(float, range(STEPS)))
    for a, b in zip(without_times(history(reference)), without_times(history(target))):
        assert a == b, f"step {a['step']} differs after the stop, the kill and two resumes"
    summary, uninterrupted = (json.loads((d / "summary.json").read_text()) for d in (target, reference))
    for key in ("heldout_accuracy_before", "heldout_accuracy_after", "heldout_greedy_accuracy_after"):
        assert summary[key] == uninterrupted[key], key
    a, b = load(reference / "checkpoints" / "last.ckpt"), load(ckpts / "last.ckpt")
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["checkpoint"] == str(ckpts / "last.ckpt")
    assert b["global_step"] == STEPS and "history" not in b["arrol"], "checkpoints grow with the history"
    names = sorted(p.name for p in ckpts.iterdir() if not p.name.startswith("."))  # kill -9 may leave a .tmp
    assert names == ["last.ckpt", "step00004.ckpt", "step00006.ckpt"], names
    assert not (target / CLAIM_FILE).exists(), "auto took over the killed resume's claim and let it go"
    # the export a push uploads (test_export_push.py), as this real run wrote it: every file at its repository path
    files = hub_files(target / "export")
    assert set(HUB_FILES) <= set(files) and {"prompt_format.json", "quality_head/README.md"} <= set(files)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert len(list((target / "tb").glob("events.out.tfevents.*"))) == 3  # one per session
    events = EventAccumulator(str(target / "tb")).Reload()
    steps = [e.step for e in events.Scalars("reward/accuracy")]
    # each step at most once, in order, the last session's all there (a kill -9 loses events TensorBoard had not
    # flushed yet: the history file, written as each step ends, is the record)
    assert steps == sorted(set(steps)) and set(range(resumed_from, STEPS)) <= set(steps), steps
    assert [e.step for e in events.Scalars("heldout/accuracy")] == [STEPS - 1]


def test_failed_checkpoint_write_keeps_the_last_good_one(reference, policy_cache):
    """A file-size limit (RLIMIT_FSIZE: writes past it fail with EFBIG, as on a full disk) between the sizes
    of the step-2 and step-4 checkpoints: the step-2 checkpoint is written, the step-4 one fails."""
    ckpts = reference / "checkpoints"
    limit = ((ckpts / "step00002.ckpt").stat().st_size + (ckpts / "step00004.ckpt").stat().st_size) // 2

    run_dir = reference.parent / "full-disk"
    out = run(policy_cache, run_dir, "pruning=random", rlimits={resource.RLIMIT_FSIZE: (limit, limit)})
    assert out.returncode == 1, out.stderr[-3000:]
    line = next(x for x in out.stderr.splitlines() if x.startswith("stopped:"))
    assert f"writing checkpoint {run_dir / 'checkpoints' / 'step00004.ckpt'} failed (File too large)" in line
    assert f"the last good checkpoint is {run_dir / 'checkpoints' / 'last.ckpt'}" in line
    assert line.endswith(f"; resume with trainer.resume={run_dir}")  # the directory resumes from that one in place
    assert "Traceback" not in out.stderr and "enforce fail" not in out.stderr  # the kernel's reason, not torch's
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["last.ckpt", "step00002.ckpt"], names  # nothing partial, no temporary file left
    assert load(run_dir / "checkpoints" / "last.ckpt")["global_step"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "step00004.ckpt" in summary["error"]


# Through the real entry point: a value that needs the data read, and a file that needs opening. Plain value
# checks (trainer.checkpoint_every=-1, a missing trainer.resume, ...) are tested in-process in test_resume_parts.
@pytest.mark.parametrize(
    "override,message",
    [
        ("trainer.resume=truncated.ckpt", "trainer.resume='truncated.ckpt' cannot be read, truncated"),
        ("algo.prompts_per_step=3000", "algo.prompts_per_step=3000 is larger than the training set (2048 problems)"),
        (
            "reward.function=no_such_module_here:score",
            "reward.function=no_such_module_here:score: cannot import no_such_module_here (ModuleNotFoundError",
        ),
    ],
)
def test_bad_config_fails_in_one_line_before_any_model_loads(tmp_path, override, message):
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    (tmp_path / "truncated.ckpt").write_bytes(b"PK\x03\x04" + bytes(1000))  # a zip's first bytes, cut short
    out = run(cache, run_dir, override)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"config error: {message}" in out.stderr
    assert "Traceback" not in out.stderr
    assert not run_dir.exists(), "a rejected config left its run directory behind"
    assert not cache.exists(), "a model was built before the config was rejected"


def test_steps_that_lose_every_rollout_are_skipped_and_counted(tmp_path, policy_cache):
    """κ = 0.05 with G = 2 and no floor: some steps prune every rollout; they are skipped, not fatal."""
    run_dir = tmp_path / "run"
    out = run(
        policy_cache,
        run_dir,
        "pruning=arrol",
        "pruning.keep_ratio=0.05",
        "pruning.p_min=0.0",
        "algo.group_size=2",
        "pruning.min_keep_per_group=0",
        "pruning.cold_start_steps=0",
        "engine.detect_length=2",
        "trainer.max_steps=4",
        "data.num_heldout=2",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = history(run_dir)
    skipped = [r for r in rows if "reward/accuracy" not in r]
    assert summary["steps"] == 4 and summary["status"] == "completed"
    assert summary["skipped_steps"]["no_survivors"] == len(skipped) > 0
    assert all(r["pruning/keep_ratio"] == 0.0 for r in skipped)
    assert rows[-1]["skipped/no_survivors"] == len(skipped)
    logged = out.stdout + out.stderr  # Hydra's log handler writes to stdout
    assert "skipped (no_survivors): all 8 rollouts were pruned" in logged
    assert "pruning.min_keep_per_group=0" in logged


def test_evaluate_names_what_a_checkpoint_lacks(tmp_path):
    ckpt = tmp_path / "moved.ckpt"
    torch.save({"state_dict": {}, "arrol": {"policy_dir": str(tmp_path / "gone")}}, ckpt)
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={ckpt}",
            f"hydra.run.dir={tmp_path / 'eval'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert f"was trained from policy directory '{tmp_path / 'gone'}', which has no config.json" in out.stderr
