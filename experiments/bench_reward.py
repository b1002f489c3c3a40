"""Throughput of the math-verify reward: a batch of completions scored in-process, with 1 worker and
with one worker per core.

Two batches of ``--batch`` completions (each ~``--pad`` characters of reasoning before the box):
- ``unique``: every (answer, gold) pair distinct — integers, fractions vs decimals, roots, tuples,
  intervals, sets, expressions, a quarter wrong and some without a box;
- ``grpo``: groups of ``--group`` rollouts per prompt sharing a few distinct answers, as in a GRPO step
  (identical pairs are scored once).

Prints a table (completions/s, wall and CPU ms per completion, median of ``--repeats``) and one JSON
line. CPU ms (this process plus the workers, from /proc) stays meaningful on a shared machine where
wall time does not; the load average at start is printed with it.

    python experiments/bench_reward.py --batch 1024 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time

from arrol_pl.tasks.reward import MathReward, RewardConfig

FILLER = "We simplify step by step and check the arithmetic carefully. "


def _pair(rng: random.Random, k: int) -> tuple[str, str]:
    """A (gold, equivalent answer) pair of kind ``k`` with random numbers."""
    a, b = rng.randint(2, 999), rng.randint(2, 97)
    kind = k % 8
    if kind == 0:
        return str(a), str(a)
    if kind == 1:
        return f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{2 * a}}}{{{2 * b}}}"
    if kind == 2:
        return f"{a / 8:g}", f"\\frac{{{a}}}{{8}}"
    if kind == 3:
        return f"{b}\\sqrt{{2}}", f"\\sqrt{{{2 * b * b}}}"
    if kind == 4:
        return f"({a}, {b})", f"\\left( {a}, {b} \\right)"
    if kind == 5:
        return f"[{b}, {a + 100})", f"[{b},{a + 100})"
    if kind == 6:
        return f"\\{{{b}, {a}\\}}", f"\\{{{a},{b}\\}}"
    return f"{a}x + {b}", f"{b} + {a}x"


def _completion(rng: random.Random, answer: str | None, pad: int) -> str:
    text = (FILLER * (pad // len(FILLER) + 1))[:pad]
    return text if answer is None else f"{text}\nThe final answer is \\boxed{{{answer}}}."


def unique_batch(n: int, pad: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    completions, golds = [], []
    for i in range(n):
        gold, answer = _pair(rng, i)
        if i % 4 == 3:
            answer = _pair(rng, i)[1]  # a different random answer of the same kind: (almost surely) wrong
        if i % 16 == 15:
            answer = None
        completions.append(_completion(rng, answer, pad))
        golds.append(gold)
    return completions, golds


def grpo_batch(n: int, group: int, pad: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    completions, golds = [], []
    for g in range(n // group):
        gold, right = _pair(rng, g)
        wrong = [_pair(rng, g)[1] for _ in range(3)]
        for _ in range(group):
            answer = right if rng.random() < 0.5 else rng.choice(wrong + [None])
            completions.append(_completion(rng, answer, pad))
            golds.append(gold)
    return completions, golds


def _cpu_seconds(pids: list[int]) -> float:
    """This process's CPU time plus the workers' (Linux /proc; utime + stime)."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def measure(workers: int, batches: dict, repeats: int) -> dict:
    """``batches``: name → a list of ``repeats + 1`` (completions, golds) batches, all different, so
    the workers' gold-parse cache only helps within a batch, as in training."""
    config = RewardConfig(num_workers=workers)
    with MathReward(config) as reward:
        t0 = time.perf_counter()
        reward.start()
        startup = time.perf_counter() - t0
        out = {"workers": workers, "startup_s": round(startup, 3)}
        for name, runs in batches.items():
            reward.score(*runs[0])  # warm-up: imports, sympy's caches
            times, cpu = [], []
            for completions, golds in runs[1:]:
                pids = reward.worker_pids
                c0 = _cpu_seconds(pids)
                result = reward.score(completions, golds)
                times.append(result.seconds)
                cpu.append(_cpu_seconds(pids) - c0)
            median = statistics.median(times)
            out[name] = {
                "seconds": round(median, 4),
                "completions_per_s": round(len(completions) / median, 1),
                "ms_per_completion": round(1000 * median / len(completions), 3),
                "cpu_ms_per_completion": round(1000 * statistics.median(cpu) / len(completions), 3),
                "accuracy": round(result.accuracy, 4),
                "failed": result.n_failed,
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--pad", type=int, default=2000, help="characters of reasoning before the boxed answer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="*", help="worker counts (default: 0, 1 and all cores)")
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    worker_counts = args.workers if args.workers else sorted({0, 1, cores})
    batches = {
        "unique": [unique_batch(args.batch, args.pad, seed) for seed in range(args.repeats + 1)],
        "grpo": [grpo_batch(args.batch, args.group, args.pad, seed) for seed in range(args.repeats + 1)],
    }
    rows = [measure(w, batches, args.repeats) for w in worker_counts]

    load = os.getloadavg()[0]
    print(f"math-verify reward, batch {args.batch}, {cores} cores (load average {load:.1f}), median of {args.repeats}")
    print(
        f"{'workers':>8} {'batch':>7} {'completions/s':>14} {'ms/completion':>14} {'cpu ms/compl.':>14} "
        f"{'batch s':>8} {'accuracy':>9} {'failed':>7}"
    )
    for row in rows:
        label = "in-proc" if row["workers"] == 0 else str(row["workers"])
        for name in batches:
            r = row[name]
            print(
                f"{label:>8} {name:>7} {r['completions_per_s']:>14.1f} {r['ms_per_completion']:>14.3f} "
                f"{r['cpu_ms_per_completion']:>14.3f} "
                f"{r['seconds']:>8.3f} {r['accuracy']:>9.3f} {r['failed']:>7d}"
            )
    record = {
        "bench": "reward",
        "batch": args.batch,
        "group": args.group,
        "pad_chars": args.pad,
        "repeats": args.repeats,
        "cores": cores,
        "load_average": round(load, 2),
        "python": platform.python_version(),
        "results": rows,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
