"""Several ranks without an engine: two real processes (gloo on CPU; NCCL on two GPUs when there
are) run ``rank_worker.py`` on one fixed step's rollouts, this process runs the same on one rank.

- The update under FSDP2 with a global loss normaliser equals the one-rank update (2 mini-batches × 2
  epochs, SGD, ranks with different micro-batch counts); a per-rank normaliser, run beside it, must differ.
- One pruning state: after gathering the survivors, both ranks hold the one-rank calibrator, head and δ,
  and the balance and head metrics are the one-rank (global) ones.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from tiny_qwen3 import tiny_qwen3

from arrol_pl.train.step.rank_sync import RankSync

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def load_worker():
    spec = importlib.util.spec_from_file_location("rank_worker", HERE / "rank_worker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_TAKEN = "EADDRINUSE"
"""What rank 0's store reports when the free port it was handed was taken before it could listen (another test's
process opened a socket in between): the group is started again on another port."""


def launch(
    args: list[str],
    world_size: int,
    timeout: float,
    env: dict[str, str] | None = None,
    check: bool = True,
    attempts: int = 3,
) -> list[tuple[int, str]]:
    """Run ``python args…`` as ``world_size`` ranks of one process group on this machine; returns each rank's exit
    status and output. A group that outlives ``timeout`` seconds (a collective waiting for a rank) fails the test,
    all ranks killed; with ``check``, so does a rank that fails. A group whose port was taken before rank 0 could
    listen on it (:data:`PORT_TAKEN`) starts again on another, up to ``attempts`` times."""
    for _ in range(attempts):
        results = launch_once(args, world_size, timeout, env)
        if not any(code != 0 and PORT_TAKEN in out for code, out in results):
            break
    for r, (code, out) in enumerate(results):
        assert code == 0 or not check, f"rank {r} exited {code}:\n{out[-3000:]}"
    return results


def launch_once(args: list[str], world_size: int, timeout: float, env: dict[str, str] | None) -> list[tuple[int, str]]:
    """One start of :func:`launch`'s group on a free port. Rank 0 failing ends the group at once: the other ranks
    would wait for its store until ``timeout``."""
    import warm_python  # not at the top: the ranks' scripts import this module without tests/ on their path

    port = str(free_port())
    base = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "WORLD_SIZE": str(world_size),
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
    with tempfile.TemporaryDirectory() as logs:
        if args[0] == "-c":  # the source as a script, which the tests' warm interpreter runs (tests/warm_python.py)
            script = Path(logs) / "rank.py"
            script.write_text(args[1])
            args = [str(script), *args[2:]]
        files = [open(Path(logs) / f"rank{r}.log", "w+") for r in range(world_size)]
        procs = [
            warm_python.Popen(
                [sys.executable, *args],
                env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                stdout=f,
                stderr=subprocess.STDOUT,
                text=True,
                runtime_env=warm_python.LAUNCHED_ENV,
            )
            for r, f in enumerate(files)
        ]
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and procs[0].poll() in (None, 0):
            if time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                    p.wait()
                tails = "\n".join(f"rank {r}:\n{read(f)[-2000:]}" for r, f in enumerate(files))
                pytest.fail(
                    f"{world_size} ranks of {args[0]} did not finish in {timeout} s (a collective hung)\n{tails}"
                )
            time.sleep(0.05)
        for p in procs:  # rank 0 failed: the others cannot go on without it
            if p.poll() is None:
                p.kill()
            p.wait()
        return [(p.returncode, read(f)) for p, f in zip(procs, files)]


def read(file) -> str:
    file.seek(0)
    text = file.read()
    file.close()
    return text


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def check_pruning_state(out: Path, worker) -> None:
    one = worker.pruning_state(RankSync(0, 1))
    for r in range(2):
        rank = torch.load(f"{out}.rank{r}", weights_only=True)
        assert torch.equal(rank["groups"], one["groups"])  # gathered in global prompt order
        for key, value in one["calibrator"].items():
            assert torch.equal(torch.as_tensor(rank["calibrator"][key]), torch.as_tensor(value)), key
        for key, value in one["head"].items():
            torch.testing.assert_close(rank["head"][key], value, rtol=0, atol=1e-6)
        assert rank["delta"] == pytest.approx(one["delta"], abs=1e-9)
        assert rank["metrics"].keys() == one["metrics"].keys()
        for key, value in one["metrics"].items():
            assert rank["metrics"][key] == pytest.approx(value, abs=1e-6), key


def check_ranks(tmp_path: Path, backend: str, env: dict[str, str] | None = None) -> None:
    worker = load_worker()
    out = tmp_path / "two_ranks.pt"
    launch([str(HERE / "rank_worker.py"), str(out), backend], 2, timeout=90, env=env)
    check_pruning_state(out, worker)
    two = torch.load(out, weights_only=True)
    one, one_norms = worker.update(
        RankSync(0, 1), torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    )
    start = {k: v.detach() for k, v in tiny_qwen3().state_dict().items()}

    assert len(one_norms) == len(two["norms"]) == 4  # 2 mini-batches × 2 epochs on every rank
    assert max_diff(one, start) > 1e-2  # the update moved the weights well beyond the tolerance
    assert max_diff(two["weights"], one) <= 1e-5
    torch.testing.assert_close(torch.tensor(two["norms"]), torch.tensor(one_norms), rtol=1e-5, atol=1e-6)
    # Normalising each rank by its own tokens (gradients then averaged) is a different update.
    assert max_diff(two["per_rank_weights"], one) > 1e-3


@pytest.mark.subprocess
def test_two_ranks_share_one_pruning_state_and_make_the_one_rank_update_gloo(tmp_path):
    check_ranks(tmp_path, "gloo")


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="NCCL needs two CUDA devices (one process per GPU)",
)
def test_two_ranks_share_one_pruning_state_and_make_the_one_rank_update_nccl(tmp_path):
    check_ranks(tmp_path, "nccl")


LEAVE_WORLD = """
import sys
import torch.distributed as dist
from arrol_pl.train.run.world import leave_world

leave_world()  # no group yet: nothing to do
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
assert dist.is_initialized()
leave_world()
assert not dist.is_initialized(), "the group survived leave_world"
leave_world()  # already gone: still fine at exit
print("left")
"""


@pytest.mark.subprocess
def test_leave_world_destroys_the_group_once_and_is_a_no_op_without_one(tmp_path):
    # In its own process: this one may hold the shared engine's world, which must outlive the test.
    out = subprocess.run(
        [sys.executable, "-c", LEAVE_WORLD, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0 and out.stdout.strip() == "left", out.stderr[-3000:]
