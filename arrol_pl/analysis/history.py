"""Phase decomposition of training steps (paper Table 5): medians per phase, ratios, and what holds back.

Pure functions on the per-step history rows a run writes (``history.jsonl``), so the benchmark
script, the results page and the tests share one reading of them.

Decisions:
- Medians over the measured steps (warm-up excluded): the machines are shared and noisy.
- The paper's phases map onto the trainer's timers: generation; log-prob = the policy's old log-probs
  plus the reference model's (``old_logprob`` + ``ref_logprob``, one no-grad forward each per step, as
  verl); update = forward + backward + optimizer steps over every PPO mini-batch and epoch; the rest
  (reward, head, sync and the loop around them) is reported beside them and is part of end to end.
- A phase's *limit* is the work it has to do less of: generated tokens for generation, trained tokens
  for log-prob and update. The *holding back* phase is the one whose seconds exceed most what they
  would be if that phase ran at the end-to-end goal.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from pathlib import Path
from typing import Any, Iterable, Sequence

from arrol_pl.analysis.formatting import table_lines

PHASES: dict[str, tuple[str, ...]] = {
    "generation": ("time/generation",),
    "reward": ("time/reward",),
    "log-prob": ("time/old_logprob", "time/ref_logprob"),
    "update": ("time/update", "time/optimizer"),
    "head": ("time/head",),
    "sync": ("time/sync",),
}
"""Reported phase → the trainer timers it sums."""

TOKENS = {
    "generated_tokens": "tokens/generated",
    "trained_tokens": "policy/trained_tokens",
    "keep_ratio": "pruning/keep_ratio",
    "accuracy": "reward/accuracy",
}
"""Per-step counters reported beside the phases."""

LIMITS = {"generation": "generated_tokens", "log-prob": "trained_tokens", "update": "trained_tokens"}
"""The work each phase scales with."""


def read_history(path: Path) -> list[dict[str, float]]:
    """Rows of a run's ``history.jsonl``."""
    path = Path(path)
    if path.suffix != ".jsonl":
        path = path / "history.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: pass a run directory written by run_experiment")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


BEFORE = {"heldout/accuracy": "heldout_accuracy_before", "heldout/greedy_accuracy": "heldout_greedy_accuracy_before"}
"""Held-out tags → the summary key of their value before training (a curve's point at 0 s)."""


def history_curve(run_dir: Path, tag: str) -> list[tuple[float, float]]:
    """``(training seconds, value)`` of ``tag`` at every step that has it (x = ``time/wall``, held-out
    evaluations excluded; the oracle scorer's ``time/wall_credited``), led by the value before training at 0 s for
    held-out tags; KeyError if no step has it."""
    rows = read_history(run_dir)
    points = [(h.get("time/wall_credited", h["time/wall"]), h[tag]) for h in rows if tag in h]
    if not points:
        raise KeyError(f"{Path(run_dir) / 'history.jsonl'} has no {tag!r}; it has {sorted(rows[-1]) if rows else []}")
    summary = Path(run_dir) / "summary.json"
    before = json.loads(summary.read_text()).get(BEFORE.get(tag, "")) if summary.exists() else None
    return ([(0.0, before)] if before is not None else []) + points


def curve_band(
    curves: Sequence[Sequence[tuple[float, float]]], points: int = 50
) -> tuple[list[float], list[float], list[float]]:
    """Several runs' ``(seconds, value)`` curves (one arm, different seeds) on one time grid: ``(grid, mean, sd)``.
    Each curve is interpolated linearly between its points; the grid runs from 0 to the end of the shortest curve,
    so every point averages all of them. ``sd`` is the sample standard deviation over the curves (0 for one)."""
    curves = [sorted(c) for c in curves if c]
    if not curves:
        raise ValueError("no curve to average")
    end = min(c[-1][0] for c in curves)
    grid = [end * i / (points - 1) for i in range(points)] if points > 1 and end > 0 else [0.0]

    def at(curve: Sequence[tuple[float, float]], t: float) -> float:
        if t <= curve[0][0]:
            return curve[0][1]
        for (t0, v0), (t1, v1) in zip(curve, curve[1:]):
            if t <= t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return curve[-1][1]

    values = [[at(c, t) for c in curves] for t in grid]
    mean = [sum(v) / len(v) for v in values]
    sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
    return grid, mean, sd


def _median(values: Iterable[float]) -> float:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(kept) if kept else 0.0


def step_medians(history: Sequence[dict[str, float]], warmup: int) -> dict[str, float]:
    """Median seconds per phase, end to end and ``other``, and median counters, over ``history[warmup:]``."""
    rows = list(history[warmup:])
    if not rows:
        raise ValueError(f"no measured steps: {len(history)} steps with warmup={warmup}")
    out = {phase: _median(sum(r.get(k, 0.0) for k in keys) for r in rows) for phase, keys in PHASES.items()}
    out["step"] = _median(r["time/step"] for r in rows)
    out["other"] = max(out["step"] - sum(out[p] for p in PHASES), 0.0)
    out.update({name: _median(r.get(key, float("nan")) for r in rows) for name, key in TOKENS.items()})
    out["steps"] = float(len(rows))
    return out


def ratios(baseline: dict[str, float], arm: dict[str, float]) -> dict[str, float]:
    """baseline / arm for every phase, end to end and every counter (speedups; token reductions)."""
    out = {}
    for key in (*PHASES, "step", *LIMITS.values()):
        out[key] = baseline[key] / arm[key] if arm.get(key) else float("nan")
    return out


def diagnose(baseline: dict[str, float], arm: dict[str, float], goal: float) -> dict[str, Any]:
    """Whether ``arm`` reaches ``goal``× end to end and, if not, which phase holds it back.

    Each phase's excess is ``arm[phase] - baseline[phase] / goal``: its seconds beyond the goal's share.
    """
    r = ratios(baseline, arm)
    excess = {p: arm[p] - baseline[p] / goal for p in (*PHASES, "other")}
    worst = max(excess, key=excess.get)
    limit_key = LIMITS.get(worst)
    return {
        "end_to_end": r["step"],
        "goal": goal,
        "met": r["step"] >= goal,
        "holding_back": worst,
        "holding_back_excess_seconds": excess[worst],
        "holding_back_ratio": r[worst] if worst in r else float("nan"),
        "holding_back_limit": r[limit_key] if limit_key else 1.0,
        "holding_back_share": arm[worst] / arm["step"] if arm["step"] else float("nan"),
        "generation_gap": r["generation"] / r["generated_tokens"] - 1 if r["generated_tokens"] else float("nan"),
    }


def diagnosis_text(d: dict[str, Any], arm_name: str) -> str:
    """One sentence for ``diagnose``'s result."""
    head = f"{arm_name}: end to end {d['end_to_end']:.2f}× (goal {d['goal']:.2f}×)"
    if d["met"]:
        return head + ": met."
    return (
        f"{head}: short; {d['holding_back']} holds it back ({d['holding_back_share']:.0%} of the step, "
        f"{d['holding_back_ratio']:.2f}× where its work shrinks {d['holding_back_limit']:.2f}×; "
        f"+{d['holding_back_excess_seconds']:.2f} s/step over the goal's share)."
    )


def phase_verdict(baseline: dict[str, float], arm: dict[str, float], phase: str, goal: float) -> dict[str, Any]:
    """Whether ``phase`` (one that scales with tokens: :data:`LIMITS`) reaches ``goal``× and, if not, why.

    A phase's seconds are modelled as ``fixed + per_token · tokens`` through the two arms' points; ``fixed``
    is the part that no pruning removes (optimizer steps, per-batch launch and Python overhead).
    """
    r = ratios(baseline, arm)
    tokens = LIMITS[phase]
    t_base, t_arm, n_base, n_arm = baseline[phase], arm[phase], baseline[tokens], arm[tokens]
    fixed = (t_arm * n_base - t_base * n_arm) / (n_base - n_arm) if n_base != n_arm else float("nan")
    return {
        "phase": phase,
        "ratio": r[phase],
        "goal": goal,
        "met": r[phase] >= goal,
        "limit": r[tokens],
        "fixed_seconds": fixed,
        "seconds": t_arm,
    }


def phase_verdict_text(v: dict[str, Any], arm_name: str) -> str:
    """One sentence for ``phase_verdict``'s result."""
    head = f"{arm_name}: {v['phase']} {v['ratio']:.2f}× (goal {v['goal']:.2f}×)"
    if v["met"]:
        return head + ": met."
    if v["limit"] < v["goal"]:
        return (
            f"{head}: short; its work shrinks only {v['limit']:.2f}× "
            "(the pruned arm trains on that many times fewer tokens)."
        )
    return (
        f"{head}: short; its work shrinks {v['limit']:.2f}×, but about {v['fixed_seconds']:.3f} s of its "
        f"{v['seconds']:.3f} s/step does not scale with tokens (optimizer steps, per-batch overhead)."
    )


def markdown_table(arms: Sequence[tuple[str, dict[str, float]]], baseline: dict[str, float]) -> str:
    """Seconds per phase (median) with the speedup vs ``baseline`` in brackets, and the token counts."""
    cols = [*PHASES, "other", "step"]
    rows = []
    for name, m in arms:
        cells = []
        for c in cols:
            ratio = baseline[c] / m[c] if m[c] else float("nan")
            plain = m is baseline or c == "other" or not math.isfinite(ratio)
            cells.append(f"{m[c]:.3f}" + ("" if plain else f" ({ratio:.2f}×)"))
        tok = [f"{m['generated_tokens']:.0f}", f"{m['trained_tokens']:.0f}"]
        if m is not baseline:
            tok = [
                f"{m['generated_tokens']:.0f} ({baseline['generated_tokens'] / m['generated_tokens']:.2f}×)",
                f"{m['trained_tokens']:.0f} ({baseline['trained_tokens'] / m['trained_tokens']:.2f}×)",
            ]
        rows.append([name, *cells, *tok, f"{m['keep_ratio']:.2f}"])
    titles = ["arm", *(c if c != "step" else "end to end" for c in cols), "generated tokens", "trained tokens", "keep"]
    return "\n".join(table_lines(titles, rows))


def machine_info() -> dict[str, Any]:
    """CPU model, cores, accelerator and library versions, for the results page."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    try:
        from arrol_pl.engine.adapter.startup import installed_vllm

        info["vllm"] = installed_vllm()[1]
    except ImportError:
        info["vllm"] = None
    return info
