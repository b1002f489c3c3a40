"""Reading an oracle ladder of section 13 (:mod:`arrol_pl.analysis.results.pruning_pays`): the points
``(AUC, difference to GRPO G = 8)`` of one survival rule, where they cross 0 going up (the break-even AUC), whether
that crossing is more than noise, how the difference moves with the AUC (the slope within seeds), the break-even
figure and the headline's words."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.runs import PairedDifference
from arrol_pl.analysis.wallclock import new_figure, save_figure
from arrol_pl.core.metrics import within_block_slope

SLOPE_STEP = 0.1
"""The AUC step the ladder's slope is stated per."""


def break_even(points: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Where ``(AUC, difference)`` points cross 0 going up: ``(the AUC at 0, the AUC below, the AUC above)``,
    interpolated linearly between the two points around the highest such crossing; None when they do not cross."""
    ordered = sorted(points)
    found = None
    for (x0, d0), (x1, d1) in zip(ordered, ordered[1:]):
        if d0 <= 0 <= d1 and d0 < d1:
            found = (x0 - d0 * (x1 - x0) / (d1 - d0), x0, x1)
    return found


def distinguished(ladder: Sequence[tuple[float, PairedDifference]], crossing: float) -> bool:
    """Whether a ladder's crossing is more than noise: a point at or above it is ahead of GRPO G = 8 by more than
    two standard errors (noisy means around 0 cross 0 somewhere by chance)."""
    return any(x >= crossing and d.mean > 2 * d.se for x, d in ladder)


def ladder_slope(ladder: Sequence[tuple[float, PairedDifference]]) -> tuple[float, float] | None:
    """How the ladder's difference to GRPO G = 8 moves per 0.1 of AUC, ± its standard error: the slope over every
    seed's difference at every ladder point, within seeds (each seed's differences share its GRPO run)."""
    fit = within_block_slope([(seed, x, diff) for x, d in ladder for seed, diff, _ in d.per_seed])
    return None if fit is None else (fit[0] * SLOPE_STEP, fit[1] * SLOPE_STEP)


def slope_text(ladder: Sequence[tuple[float, PairedDifference]]) -> str:
    """The ladder's slope as the page states it ("" where it cannot be fitted)."""
    fit = ladder_slope(ladder)
    if fit is None:
        return ""
    slope, se = fit
    return (f"; per {SLOPE_STEP} of AUC the difference moves by {slope:+.3f} ± {se:.3f} (within seeds: "
            + ("flat within two standard errors)" if abs(slope) <= 2 * se else
               "rising by more than two standard errors)" if slope > 0 else "falling by more than two standard errors)"))


def plot_break_even(ladders: dict[str, Sequence[tuple[float, PairedDifference]]], points: Sequence[tuple[str, float,
                    PairedDifference]], control: PairedDifference | None, crossings: dict[str, float | None],
                    out: Path) -> Path:
    """The break-even figure: each arm's difference to GRPO G = 8 (± 1 SE) against its AUC, an oracle ladder per
    survival rule as a line, the other scorers as points, GRPO G = 8 at 0 and GRPO G = 4 dashed."""
    fig, ax = new_figure()
    for rule, ladder in ladders.items():
        ax.errorbar([x for x, _ in ladder], [d.mean for _, d in ladder], yerr=[d.se for _, d in ladder], marker="o",
                    capsize=3, label=f"oracle ladder, {rule_name(rule)}")
    for (title, x, d), marker in zip(points, "sD^vP"):
        ax.errorbar([x], [d.mean], yerr=[d.se], marker=marker, linestyle="none", capsize=3, label=title)
    ax.axhline(0.0, color="black", linewidth=0.8, label="GRPO G = 8")
    if control is not None:
        ax.axhline(control.mean, color="grey", linestyle="--", label="GRPO G = 4 (cost-matched)")
    for rule, crossing in crossings.items():
        if crossing is not None:
            ax.axvline(crossing, color="grey", linestyle=":", label=f"break-even AUC {crossing:.2f} ({rule_name(rule)})")
    return save_figure(fig, ax, out, "the scorer's realised online AUC after the cold start",
                       "held-out accuracy − GRPO G = 8's at equal time")


def rule_name(rule: str) -> str:
    """A survival rule (``pruning.balance_target``) as the page names it: Eq. 2 for the paper's global rule."""
    return "Eq. 2" if rule == "global" else f"{rule} survival"


def ladder_name(rule: str) -> str:
    """How the text names the oracle ladder of a survival rule."""
    return "the oracle ladder" if rule == "global" else f"the oracle ladder under {rule_name(rule)}"


def headline_text(ladders: dict[str, Sequence[tuple[float, PairedDifference]]],
                  crossings: dict[str, float | None], head_auc: float | None) -> str:
    """What the opening table shows of the study: per survival rule, where its oracle ladder breaks even."""
    parts = []
    for rule, ladder in ladders.items() or [("global", [])]:
        crossing, name = crossings.get(rule), rule_name(rule)
        if len(ladder) < 2:
            parts.append(f"{name} not run")
            continue
        span = f"{ladder[0][0]:.2f}–{ladder[-1][0]:.2f}"
        if crossing is not None:
            parts.append(f"{name} ≈ {crossing:.2f}" + ("" if distinguished(ladder, crossing) else ", within noise"))
        elif all(d.mean > 2 * d.se for _, d in ladder):
            parts.append(f"{name} below {ladder[0][0]:.2f} (ahead across {span})")
        else:
            noise = all(abs(d.mean) <= 2 * d.se for _, d in ladder)
            parts.append(f"{name} none in {span}" + (", within noise" if noise else ""))
    return "Break-even AUC, oracle ladder: " + "; ".join(parts) + (
        f"; learned head at {head_auc:.2f}" if head_auc is not None else "")
