"""Soak benchmark: the default experiment for many steps, watched for growth that a short run cannot show.

    python experiments/soak.py                              # 3000 steps of `make run`'s experiment
    python experiments/soak.py --steps 30 --every 3 -- trainer.checkpoint_every=5 data.num_heldout=8

Runs ``experiments/run.py`` (``conf/config.yaml`` + the Hydra overrides after ``--``) with
``trainer.max_steps=--steps`` in a subprocess, and every ``--every`` steps (counted in its ``history.jsonl``,
which a run appends to as each step ends) samples the training process's resident memory (RSS; also of its
process tree: engine and reward workers), its open file descriptors (``/proc/<pid>/fd``), the run directory's
size and ``checkpoints/last.ckpt``'s size. At the end it prints each one's least-squares slope over the steps
after the first 10 % (the warm-up: caches, allocator pools, the replay window and calibrator filling) and the
goals:

- RSS grows by at most 5 % from the 10 % mark to the end (the fitted line's rise over its value there);
- the checkpoint's size does not grow with the step count (at most 1 % over the same span);
- no file-descriptor growth (the fitted line rises by less than one descriptor).

The run directory itself grows with the step count (``history.jsonl``, TensorBoard events): its slope is
printed, not judged; with ``trainer.keep_checkpoints`` the checkpoints do not add to it. Writes
``soak.json`` (every sample and the verdicts) beside the run directory under ``--out``; exits 1 when a goal
is missed or the run fails.

Decisions:
- **A subprocess, sampled from outside.** The run is the real entry point, unchanged; sampling from
  another process costs the run nothing and sees what a scheduler would (RSS, descriptors, disk).
- **Steps from the history file.** The run already writes a row per finished step; counting them needs no
  hook in the trainer. Samples land within ``--poll`` seconds of the step boundary.
- **psutil when installed** (the process tree's RSS); otherwise ``/proc/<pid>/status`` of the main process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RSS_GROWTH = 0.05
"""RSS may rise by this share of its value at the 10 % mark over the rest of the run."""
CHECKPOINT_GROWTH = 0.01
"""The checkpoint may grow by this share over the same span (bounded buffers settle after the warm-up)."""
WARMUP = 0.1
"""Share of the steps left out of the slopes."""

try:
    import psutil
except ImportError:
    psutil = None
GONE = (ProcessLookupError, FileNotFoundError) + ((psutil.NoSuchProcess,) if psutil else ())
"""What sampling a process that has just ended raises."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3000, help="training steps (trainer.max_steps)")
    p.add_argument("--every", type=int, default=None, help="steps between samples (default: steps / 100)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between looks at the run")
    p.add_argument("--out", type=Path, default=None, help="output dir (default outputs/soak/<time>)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run configuration")
    args = p.parse_args(argv)
    args.every = args.every or max(1, args.steps // 100)
    if args.steps < 10 or args.every < 1 or args.poll <= 0:
        p.error(f"need --steps >= 10, --every >= 1 and --poll > 0, got {args.steps}, {args.every}, {args.poll}")
    return args


def rss(pid: int) -> tuple[int, int]:
    """Resident bytes of ``pid`` and of it with all its descendants (the same figure without psutil)."""
    if psutil is None:
        status = Path(f"/proc/{pid}/status").read_text()
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return kib * 1024, kib * 1024
    proc = psutil.Process(pid)
    own = proc.memory_info().rss
    tree = own
    for child in proc.children(recursive=True):
        try:
            tree += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return own, tree


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (0 if missing)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*") if path.is_dir() else []:
        try:
            total += p.stat().st_size if p.is_file() else 0
        except FileNotFoundError:  # a checkpoint replaced or deleted while we walk
            pass
    return total


class StepCounter:
    """Finished steps: newlines in a ``history.jsonl`` that only grows while the run trains."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.steps = path, 0, 0

    def __call__(self) -> int:
        if self.path.exists() and self.path.stat().st_size > self.offset:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            self.offset += len(chunk)
            self.steps += chunk.count(b"\n")
        return self.steps


def sample(pid: int, run_dir: Path, step: int, start: float) -> dict[str, float]:
    own, tree = rss(pid)
    return {
        "step": step,
        "seconds": time.monotonic() - start,
        "rss": own,
        "rss_tree": tree,
        "fds": open_files(pid),
        "run_dir": size(run_dir),
        "checkpoints": size(run_dir / "checkpoints"),
        "last_ckpt": size(run_dir / "checkpoints" / "last.ckpt"),
    }


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y on x (0 for fewer than two distinct x)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def verdicts(samples: list[dict[str, float]], steps: int) -> dict[str, dict]:
    """Per figure: slope per 1000 steps after the warm-up, the fitted rise over that span, and the goal if any."""
    start = WARMUP * steps
    late = [s for s in samples if s["step"] >= start]
    if len(late) < 2:
        raise SystemExit(f"soak: {len(late)} samples after the first {WARMUP:.0%} of {steps} steps; lower --every")
    span = late[-1]["step"] - late[0]["step"]
    out = {}
    for key, goal in (
        ("rss", RSS_GROWTH),
        ("rss_tree", None),
        ("fds", None),
        ("last_ckpt", CHECKPOINT_GROWTH),
        ("checkpoints", None),
        ("run_dir", None),
    ):
        points = [(s["step"], float(s[key])) for s in late if key != "last_ckpt" or s[key]]
        if len(points) < 2:
            out[key] = {"slope_per_1000": None, "rise": None, "at_start": None, "ok": None}
            continue
        b = slope(points)
        mean_x, mean_y = (sum(p[i] for p in points) / len(points) for i in (0, 1))
        at_start = mean_y + b * (late[0]["step"] - mean_x)
        rise = b * span
        ok = None
        if goal is not None:
            ok = rise <= goal * at_start
        elif key == "fds":
            ok = rise < 1.0
        out[key] = {"slope_per_1000": 1000 * b, "rise": rise, "at_start": at_start, "ok": ok}
    return out


def report(result: dict[str, dict], steps: int) -> str:
    names = {
        "rss": ("RSS, training process", "MiB", 2**20),
        "rss_tree": ("RSS, with its workers", "MiB", 2**20),
        "fds": ("open file descriptors", "", 1),
        "last_ckpt": ("last.ckpt size", "MiB", 2**20),
        "checkpoints": ("checkpoints/ size", "MiB", 2**20),
        "run_dir": ("run directory size", "MiB", 2**20),
    }
    goals = {"rss": f"rise <= {RSS_GROWTH:.0%}", "last_ckpt": f"rise <= {CHECKPOINT_GROWTH:.0%}", "fds": "rise < 1"}
    lines = [f"after the first {WARMUP:.0%} of {steps} steps (slope per 1000 steps; rise over the rest of the run):"]
    for key, (name, unit, scale) in names.items():
        r = result[key]
        if r["slope_per_1000"] is None:
            lines.append(f"  {name:24s} not measured")
            continue
        share = f" ({r['rise'] / r['at_start']:+.2%})" if r["at_start"] else ""
        verdict = "" if r["ok"] is None else f"  goal {goals[key]}: {'met' if r['ok'] else 'MISSED'}"
        lines.append(
            f"  {name:24s} {r['at_start'] / scale:10.2f} {unit:3s} slope {r['slope_per_1000'] / scale:+9.3f} "
            f"rise {r['rise'] / scale:+9.3f}{share}{verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or ROOT / "outputs" / "soak" / time.strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = out / "run"
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        *args.overrides,
        f"trainer.max_steps={args.steps}",
        f"hydra.run.dir={run_dir}",
    ]
    print("soak:", " ".join(command[1:]), flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    log = open(out / "run.out", "w")
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    counter, samples, next_step = StepCounter(run_dir / "history.jsonl"), [], 0
    try:
        while proc.poll() is None:
            steps = counter()
            if steps >= next_step and steps < args.steps:
                try:
                    samples.append(sample(proc.pid, run_dir, steps, start))
                except GONE:  # ended between poll() and the sample
                    break
                s = samples[-1]
                print(
                    f"step {steps:6d}  rss {s['rss'] / 2**20:8.1f} MiB  tree {s['rss_tree'] / 2**20:8.1f} MiB  "
                    f"fds {s['fds']:4d}  run dir {s['run_dir'] / 2**20:8.2f} MiB",
                    flush=True,
                )
                next_step = (steps // args.every + 1) * args.every
            time.sleep(args.poll)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    finally:
        log.close()
    if proc.returncode != 0:
        print(f"soak: the run exited with {proc.returncode}; its output is in {out / 'run.out'}", file=sys.stderr)
        return 1
    result = verdicts(samples, args.steps)
    print(report(result, args.steps))
    (out / "soak.json").write_text(
        json.dumps({"command": command, "steps": args.steps, "samples": samples, "verdicts": result}, indent=1)
    )
    missed = [k for k, r in result.items() if r["ok"] is False]
    print(f"soak: {'goals missed: ' + ', '.join(missed) if missed else 'every goal met'} ({out / 'soak.json'})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
