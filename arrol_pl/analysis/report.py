"""Human-readable summaries of runs and sweeps."""

from __future__ import annotations

from pathlib import Path

from arrol_pl.analysis.formatting import fmt
from arrol_pl.train.records.summary import RunSummary


def screen_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The group screen's cost and, per stage, its audit: zero-advantage share of the dropped groups against a
    random drop's and an oracle's."""
    if not s.screen:
        return []
    rows = [("screen cost (share of the step)", fmt(s.screen.get("cost_share")))]
    for stage in ("prompt", "detect"):
        a = s.screen.get(stage)
        if a:
            rows.append(
                (
                    f"{stage} screen: zero-adv. dropped / random / oracle",
                    f"{fmt(a['screen'])} / {fmt(a['random'])} / {fmt(a['oracle'])} ({a['audited']} audited)",
                )
            )
    return rows


def gain_text(s: RunSummary) -> str:
    """The held-out gain with its standard error and whether it clears two of them."""
    g = s.heldout_gain()
    if g is None:
        return "n/a"
    paired = "paired by problem" if s.gain_is_paired else "unpaired"
    verdict = (
        "rose beyond two standard errors"
        if s.learned()
        else "fell beyond two standard errors"
        if g[0] < -2 * g[1]
        else "within two standard errors"
    )
    return f"{g[0]:+.3f} ± {fmt(g[1])} ({paired}): {verdict}"


def measured(key: str, text: str, *values: object) -> list[tuple[str, str]]:
    """``[(key, text)]`` when one of ``values`` was measured, else no row (never a row of ``n/a`` alone)."""
    return [(key, text)] if any(v is not None for v in values) else []


def after_cold_start_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The figures over the steps after the cold start; one row saying there are none when the run never left it
    (its summary holds None for them, not the cold start's figures)."""
    cold = s.config.get("pruning", {}).get("cold_start_steps", 0)
    if 0 < cold >= s.steps:
        ran = f"{s.steps} of its {plural(cold, 'step')} ran"
        return [("after the cold start", f"no steps after the cold start ({ran})")] if s.steps else []  # 0: the title
    return [
        *measured(
            "keep ratio after cold start (target)",
            f"{fmt(s.keep_ratio_mean)} ({fmt(s.keep_ratio_target, '.2f')})",
            s.keep_ratio_mean,
        ),
        *(
            measured(
                "steps the gate let prune after cold start",
                fmt(s.pruning_active_fraction, ".2f"),
                s.pruning_active_fraction,
            )
            if s.config.get("pruning", {}).get("gate_auc") is not None
            else []
        ),
        *measured(
            "quality-head accuracy after cold start",
            fmt(s.head_accuracy_after_cold_start),
            s.head_accuracy_after_cold_start,
        ),
        *measured(
            "quality-head AUC after cold start (within groups)",
            f"{fmt(s.head_auc_after_cold_start)} ({fmt(s.head_within_auc_after_cold_start)})",
            s.head_auc_after_cold_start,
            s.head_within_auc_after_cold_start,
        ),
        *measured("zero-advantage groups after cold start", fmt(s.zero_advantage_fraction), s.zero_advantage_fraction),
        *screen_rows(s),
        *(
            [
                (
                    "refill: batches per step, steps short of B",
                    f"{fmt(s.refill.get('rounds'), '.2f')}, {fmt(s.refill.get('short'), '.2f')}",
                )
            ]
            if s.refill
            else []
        ),
        *measured("seconds per step (after cold start)", fmt(s.seconds_per_step, ".2f"), s.seconds_per_step),
    ]


def plural(n: int, word: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def train_accuracy_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The training accuracy of the first step against the mean of the last ten (or of every step, in a shorter
    run); none without a step."""
    if s.steps <= 1:
        return measured("train accuracy (the one step)", fmt(s.train_accuracy_first), s.train_accuracy_first)
    last = "the last 10" if s.steps > 10 else f"all {s.steps} steps"
    return measured(
        f"train accuracy (first step → {last})",
        f"{fmt(s.train_accuracy_first)} → {fmt(s.train_accuracy_last10)}",
        s.train_accuracy_first,
    )


def seconds_row(s: RunSummary) -> tuple[str, str]:
    """The whole run's training seconds (every session of a resumed run) beside this command's wall seconds."""
    if s.training_seconds is None:
        return "wall seconds (this command)", fmt(s.wall_seconds, ".1f")
    return (
        "seconds: training over the whole run / this command",
        f"{fmt(s.training_seconds, '.1f')} / {fmt(s.wall_seconds, '.1f')}",
    )


def heldout_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The held-out figures, when the run evaluated a held-out set (none without one)."""
    if s.heldout_accuracy_before is None and s.heldout_accuracy_after is None:
        return []
    return [
        (
            f"held-out accuracy (avg@{s.heldout_samples}, T=1)",
            f"{fmt(s.heldout_accuracy_before)} → {fmt(s.heldout_accuracy_after)}",
        ),
        *measured("held-out gain (± its standard error)", gain_text(s), s.heldout_gain()),
        *measured(
            "held-out accuracy (greedy)",
            f"{fmt(s.heldout_greedy_accuracy_before)} → {fmt(s.heldout_greedy_accuracy_after)}",
            s.heldout_greedy_accuracy_before,
            s.heldout_greedy_accuracy_after,
        ),
    ]


def print_summary(s: RunSummary, out_dir: Path) -> None:
    rows = [
        *heldout_rows(s),
        *train_accuracy_rows(s),
        *after_cold_start_rows(s),
        seconds_row(s),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\n{s.name}: {plural(s.steps, 'step')}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in s.seconds_per_phase.items() if v is not None)
    if phases:
        print(f"  {'seconds per phase':<{width}}  {phases}")
    print(f"  outputs: {out_dir} (summary.json, tb/, checkpoints/, export/)")
    if s.checkpoint:
        print(f"  train further: trainer.resume={out_dir} trainer.max_steps=<more> (in place)")
