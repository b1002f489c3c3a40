"""Human-readable summaries of runs and sweeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arrol_pl.train.summary import RunSummary


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def screen_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The group screen's cost and, per stage, its audit: zero-advantage share of the dropped groups against a
    random drop's and an oracle's."""
    if not s.screen:
        return []
    rows = [("screen cost (share of the step)", _fmt(s.screen.get("cost_share")))]
    for stage in ("prompt", "detect"):
        a = s.screen.get(stage)
        if a:
            rows.append((f"{stage} screen: zero-adv. dropped / random / oracle",
                         f"{_fmt(a['screen'])} / {_fmt(a['random'])} / {_fmt(a['oracle'])} ({a['audited']} audited)"))
    return rows


def gain_text(s: RunSummary) -> str:
    """The held-out gain with its standard error and whether it clears two of them."""
    g = s.heldout_gain()
    if g is None:
        return "n/a"
    paired = "paired by problem" if s.gain_is_paired else "unpaired"
    beyond = "beyond" if s.learned() else "within"
    return f"{g[0]:+.3f} ± {_fmt(g[1])} ({paired}): {beyond} two standard errors"


def print_summary(s: RunSummary, out_dir: Path) -> None:
    rows = [
        ("held-out accuracy (avg@4, T=1)", f"{_fmt(s.heldout_accuracy_before)} → {_fmt(s.heldout_accuracy_after)}"),
        ("held-out gain (± its standard error)", gain_text(s)),
        ("held-out accuracy (greedy)", f"{_fmt(s.heldout_greedy_accuracy_before)} → {_fmt(s.heldout_greedy_accuracy_after)}"),
        ("train accuracy (first step → last 10)", f"{_fmt(s.train_accuracy_first)} → {_fmt(s.train_accuracy_last10)}"),
        ("keep ratio after cold start (target)", f"{_fmt(s.keep_ratio_mean)} ({_fmt(s.keep_ratio_target, '.2f')})"),
        ("quality-head accuracy after cold start", _fmt(s.head_accuracy_after_cold_start)),
        ("quality-head AUC after cold start", _fmt(s.head_auc_after_cold_start)),
        ("zero-advantage groups after cold start", _fmt(s.zero_advantage_fraction)),
        *screen_rows(s),
        *([("refill: batches per step, steps short of B",
            f"{_fmt(s.refill.get('rounds'), '.2f')}, {_fmt(s.refill.get('short'), '.2f')}")] if s.refill else []),
        ("seconds per step (after cold start)", _fmt(s.seconds_per_step, ".2f")),
        ("wall seconds (whole run)", _fmt(s.wall_seconds, ".1f")),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\n{s.name}: {s.steps} steps")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in s.seconds_per_phase.items() if v is not None)
    print(f"  {'seconds per phase':<{width}}  {phases}")
    print(f"  outputs: {out_dir} (summary.json, tb/, checkpoints/, export/)")
