"""``experiments/run.py trainer.devices=2`` on CPU: two ranks under torchrun, FSDP2 over
gloo, a vLLM engine per rank joined to their world, 3 training steps of the tiny policy with the held-out
evaluation split over both ranks (before, after step 2 and at the end), then a resume of the last step from the
step-2 checkpoint on two ranks again. The policy is not warm-started (the warm start takes
minutes on a shared 2-core machine): rewards are mostly 0, which changes nothing checked here.

A third run has one rank killed (``kill -9``) once its first checkpoint is written: what the console shows after
torchrun (two lines naming the rank, its signal, the checkpoint and the resume command; no traceback), and what the
run directory keeps."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_python
from test_run_smoke import ROOT, run_script

from arrol_pl.train.run.rank_errors import CLOSING_ENV

pytestmark = pytest.mark.slow

RANKS = (
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.strategy=fsdp",
    "pruning=arrol",
    "trainer.eval_every=2",
    "trainer.eval_chunk=3",
)
"""The 8 held-out problems in 3 chunks: 2 on rank 0, 1 on rank 1."""

TIMEOUT = 1200
"""Seconds per run: about 45 s alone on 2 cores, 8 min beside two other test suites (load average 20)."""


def history(run_dir):
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def deterministic(row):
    return {k: v for k, v in row.items() if not k.startswith("time/")}


def test_two_ranks_train_with_one_pruning_state_and_resume(tmp_path):
    out = run_script(tmp_path, *RANKS, "trainer.max_steps=3", f"hydra.run.dir={tmp_path / 'run'}", timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-4000:]
    rows = history(tmp_path / "run")
    assert len(rows) == 3
    for row in rows:
        # both ranks' calibrator, head and replay window are bitwise identical after every step
        assert row["ranks/pruning_state_identical"] == 1.0
        # global metrics: the survivors of both ranks (B × G = 16 rollouts) all train under GRPO
        assert row["policy/trained_rollouts"] == pytest.approx(row["pruning/keep_ratio"] * 16)
        assert 0 < row["tokens/kept"] <= row["tokens/generated"]
    assert any(row["pruning/keep_ratio"] < 1 for row in rows[1:]), "nothing was pruned after the cold start"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["status"] == "completed"
    # every rank evaluated its chunks; rank 0 wrote the gathered result, every problem in the set's order
    assert "heldout/accuracy" in rows[1] and "heldout/accuracy" in rows[2]
    assert summary["heldout_problems"] == 8
    for when in ("before", "after"):
        per_problem = summary[f"heldout_per_problem_{when}"]
        assert len(per_problem) == 8
        assert summary[f"heldout_accuracy_{when}"] == pytest.approx(sum(per_problem) / 8)
    assert rows[2]["heldout/accuracy"] == summary["heldout_accuracy_after"]

    # one checkpoint file per save, written by rank 0, with the full (gathered) policy
    ckpt_path = tmp_path / "run" / "checkpoints" / "step00002.ckpt"
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    from safetensors.torch import load_file

    exported = load_file(tmp_path / "run" / "export" / "model.safetensors")
    for name, tensor in exported.items():
        assert ckpt["state_dict"][f"policy.{name}"].shape == tensor.shape, name

    out = run_script(
        tmp_path,
        *RANKS,
        "trainer.max_steps=3",
        f"trainer.resume={ckpt_path}",
        f"hydra.run.dir={tmp_path / 'resumed'}",
        timeout=TIMEOUT,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    resumed = history(tmp_path / "resumed")
    assert [deterministic(r) for r in resumed] == [deterministic(r) for r in rows]

    # Rank 0 alone loaded the policy; rank 1 built it on the meta device and got its shards from rank 0. The
    # untrained policy never answers, so every advantage and gradient is 0 and AdamW (no weight decay) leaves
    # the weights as loaded: the export, gathered from both ranks' shards, is the checkpoint one rank loads.
    assert all(row["reward/mean"] == 0 and row["policy/grad_norm"] == 0 for row in rows)
    loaded = load_file(f"{summary['policy_dir']}/model.safetensors")
    assert exported.keys() == loaded.keys()
    for name, tensor in loaded.items():
        assert torch.equal(exported[name], tensor), name


def run_processes(run_dir: Path) -> dict[int, bytes]:
    """The processes ``arrol train`` started for ``run_dir`` (torchrun's wrapper, the ranks and what they start: each
    has the wrapper's closing marker, inside the run directory, in its environment), with their environments."""
    marker = f"\0{CLOSING_ENV}={run_dir}{os.sep}".encode()
    found = {}
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = b"\0" + environ.read_bytes()
        except OSError:
            continue
        if marker in env:
            found[int(environ.parent.name)] = env
    return found


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def rank_process(run_dir: Path, rank: int) -> int | None:
    """The process torchrun's wrapper started for ``rank`` (not one the rank started). Where the tests' warm
    interpreter runs the rank, that is its stand-in for ``python`` (tests/warm_stand_in.py): a kill of it kills the
    rank, and it ends only once the rank has."""
    ours = run_processes(run_dir)
    mark = f"\0RANK={rank}\0".encode()
    ranks = [pid for pid, env in ours.items() if mark in env and mark not in ours.get(parent(pid), b"")]
    return next((pid for pid in ranks if warm_python.is_stand_in(pid)), ranks[0] if ranks else None)


def end_launcher(proc, run_dir: Path) -> None:
    """Kill a launcher still running, its torchrun wrapper and the ranks, which run in sessions of their own."""
    if proc.poll() is None:
        for pid in run_processes(run_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()


def test_a_killed_rank_is_named_in_two_lines_with_its_checkpoint_and_the_resume_command(tmp_path):
    run_dir = tmp_path / "killed"
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "model.warm_start.steps=0",
        f"model.cache_dir={tmp_path / 'cache'}",
        "data.num_heldout=8",
        "algo.prompts_per_step=4",
        "algo.group_size=4",
        "pruning.cold_start_steps=1",
        "trainer.checkpoint_every=1",
        "trainer.max_steps=100",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.strategy=fsdp",
        "trainer.eval_every=0",
        f"hydra.run.dir={run_dir}",
    ]
    proc = warm_python.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, killed = time.monotonic() + TIMEOUT, None
    try:
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            if (run_dir / "checkpoints" / "last.ckpt").is_file():  # written whole (renamed into place)
                killed = rank_process(run_dir, 1)
                if killed is not None:
                    os.kill(killed, signal.SIGKILL)
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        end_launcher(proc, run_dir)
    assert killed is not None, err[-4000:]
    assert proc.returncode == 128 + signal.SIGKILL, err[-4000:]

    # after torchrun: two lines, and nothing else about the death (no traceback, no torchrun report, no SIGTERM)
    lines = (out + err).replace("\r", "\n").splitlines()
    said = [line for line in lines if re.search(r"Traceback|Error|SIGKILL|SIGTERM|exitcode|rank \d|resume", line)]
    assert len(said) == 2 and err.rstrip().splitlines()[-2:] == said, said
    assert re.fullmatch(
        r"stopped: rank 1 of 2 was killed by SIGKILL after step \d+; the other rank stopped with it", said[0]
    ), said[0]
    last = run_dir / "checkpoints" / "last.ckpt"
    assert said[1] == f"the last checkpoint is {last}: resume with trainer.resume={run_dir}"

    # nothing finished is lost: the history of every finished step, the checkpoint it resumes from, a summary
    rows = history(run_dir)
    assert rows and [r["step"] for r in rows] == list(range(len(rows)))
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert 1 <= ckpt["global_step"] <= len(rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == said[0].removeprefix("stopped: ")
    assert summary["steps"] == len(rows)
    # the command resumes that checkpoint in place; torchrun's log is kept beside the run
    from arrol_pl.train.records.rundir import resolve_resume

    assert resolve_resume(str(run_dir), "arrol-grpo", tmp_path / "other", pinned=False)[:2] == (last, run_dir)
    assert "(SIGKILL)" in (run_dir / "ranks.log").read_text()


def test_ctrl_c_stops_both_ranks_through_torchrun_and_leaves_none_running(tmp_path):
    """A Ctrl-C reaches ``arrol train`` alone (torchrun runs in a session of its own); it hands the signal to
    torchrun once, which stops both ranks on it: each finishes its step and rank 0 saves, says so in one line and
    the launcher exits 130 once they have, with no rank left running."""
    run_dir = tmp_path / "interrupted"
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "model.warm_start.steps=0",
        f"model.cache_dir={tmp_path / 'cache'}",
        "data.num_heldout=8",
        "algo.prompts_per_step=4",
        "algo.group_size=4",
        "trainer.checkpoint_every=1",
        "trainer.max_steps=100",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.strategy=fsdp",
        "trainer.eval_every=0",
        f"hydra.run.dir={run_dir}",
    ]
    proc = warm_python.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, ranks = time.monotonic() + TIMEOUT, []
    try:
        while (
            proc.poll() is None
            and time.monotonic() < deadline
            and not (run_dir / "checkpoints" / "last.ckpt").is_file()
        ):
            time.sleep(0.2)
        ranks = [rank_process(run_dir, r) for r in (0, 1)]
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        end_launcher(proc, run_dir)
    assert None not in ranks, err[-4000:]
    assert proc.returncode == 128 + signal.SIGINT, err[-4000:]
    assert not [pid for pid in ranks if Path(f"/proc/{pid}").exists()], "a rank outlived the launcher"
    said = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert said == [
        f"interrupted: SIGINT: stopped after {len(history(run_dir))} steps; resume with "
        f"trainer.resume={run_dir} (outputs: {run_dir})"
    ], err[-2000:]
    assert "Traceback" not in err and out.count("SIGINT received") == 1
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
