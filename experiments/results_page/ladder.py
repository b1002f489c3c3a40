"""Reading an oracle ladder of section 13 (:mod:`.pruning_pays`): the points
``(AUC within groups, difference to GRPO G = 8)`` of one survival rule, where they cross 0 going up (the break-even
AUC), whether that crossing is more than noise, how the difference moves with the AUC (the slope within seeds), the
break-even figure and the headline's words.

Decisions:
- **The x-axis is the AUC within groups**: pruning orders the rollouts of one group, so a scorer stands where it
  ranks a group's right rollouts above its wrong ones, not where it tells easy prompts from hard (the pooled AUC).
  A point whose runs predate that record stands at its pooled AUC and says so in its label.
- **A crossing is located only when a point at or above it is ahead of GRPO G = 8 beyond its 95 % t interval**
  over the seeds (:mod:`arrol_pl.analysis.significance`): noisy means around 0 cross 0 somewhere by chance. Where
  no point is, the text gives the effects the points could have detected (80 % power), not "within noise".
- **The slope is judged the same way**, on its residual degrees of freedom within seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.runs import PairedDifference
from arrol_pl.analysis.significance import INTERVAL, Estimate, detectable_span
from arrol_pl.analysis.wallclock import new_figure, save_figure
from arrol_pl.core.metrics import within_block_slope
from arrol_pl.core.pruning import DEFAULT_BALANCE_TARGET

LEGACY_RULE = "global"
"""The survival rule of a run that recorded none: Eq. 2, every run's before the anchored rule became the default."""


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
    """Whether a ladder's crossing is more than noise: a point at or above it is ahead of GRPO G = 8 beyond its 95 %
    t interval over the seeds (noisy means around 0 cross 0 somewhere by chance)."""
    return any(x >= crossing and d.estimate.ahead for x, d in ladder)


def at_or_above(ladder: Sequence[tuple[float, PairedDifference]], crossing: float) -> list[Estimate]:
    """The differences of the ladder's points at or above ``crossing``: those that could locate it."""
    return [d.estimate for x, d in ladder if x >= crossing]


def ladder_slope(ladder: Sequence[tuple[float, PairedDifference]]) -> Estimate | None:
    """How the ladder's difference to GRPO G = 8 moves per 0.1 of AUC, with its standard error and degrees of
    freedom: the slope over every seed's difference at every ladder point, within seeds (each seed's differences
    share its GRPO run)."""
    fit = within_block_slope([(seed, x, diff) for x, d in ladder for seed, diff, _ in d.per_seed])
    return None if fit is None else Estimate(fit[0] * SLOPE_STEP, fit[1] * SLOPE_STEP, fit[2])


def slope_text(ladder: Sequence[tuple[float, PairedDifference]]) -> str:
    """The ladder's slope as the page states it ("" where it cannot be fitted)."""
    slope = ladder_slope(ladder)
    if slope is None:
        return ""
    judged = (
        f"{'rising' if slope.ahead else 'falling'} beyond {INTERVAL}"
        if slope.ahead or slope.behind
        else f"not distinguishable from flat; the ladder {slope.undetected()}"
    )
    return (
        f"; per {SLOPE_STEP} of AUC the difference moves by {slope.mean:+.3f} ± {slope.se:.3f} (within seeds, "
        f"{slope.interval()}: {judged})"
    )


def plot_break_even(
    ladders: dict[str, Sequence[tuple[float, PairedDifference]]],
    points: Sequence[tuple[str, float, PairedDifference]],
    control: PairedDifference | None,
    crossings: dict[str, float | None],
    out: Path,
) -> Path:
    """The break-even figure: each arm's difference to GRPO G = 8 (± 1 SE) against its AUC within groups, an oracle
    ladder per survival rule as a line, the other scorers as points (``points``: label, AUC, difference; a label
    says where the AUC is pooled), GRPO G = 8 at 0 and GRPO G = 4 dashed."""
    fig, ax = new_figure()
    for rule, ladder in ladders.items():
        ax.errorbar(
            [x for x, _ in ladder],
            [d.mean for _, d in ladder],
            yerr=[d.se for _, d in ladder],
            marker="o",
            capsize=3,
            label=f"oracle ladder, {rule_name(rule)}",
        )
    for (title, x, d), marker in zip(points, "sD^vP"):
        ax.errorbar([x], [d.mean], yerr=[d.se], marker=marker, linestyle="none", capsize=3, label=title)
    ax.axhline(0.0, color="black", linewidth=0.8, label="GRPO G = 8")
    if control is not None:
        ax.axhline(control.mean, color="grey", linestyle="--", label="GRPO G = 4 (cost-matched)")
    for rule, crossing in crossings.items():
        if crossing is not None:
            ax.axvline(
                crossing, color="grey", linestyle=":", label=f"break-even AUC {crossing:.2f} ({rule_name(rule)})"
            )
    return save_figure(
        fig,
        ax,
        out,
        "the scorer's realised online AUC within groups after the cold start",
        "held-out accuracy − GRPO G = 8's at equal time",
    )


def rule_name(rule: str) -> str:
    """A survival rule (``pruning.balance_target``) as the page names it: Eq. 2 for the paper's formula as written."""
    return "Eq. 2" if rule == "global" else f"{rule} survival"


def ladder_name(rule: str) -> str:
    """How the text names the oracle ladder of a survival rule: the default rule's (what the bare ``arm=oracle``
    runs) is "the oracle ladder"."""
    return "the oracle ladder" if rule == DEFAULT_BALANCE_TARGET else f"the oracle ladder under {rule_name(rule)}"


def headline_text(
    ladders: dict[str, Sequence[tuple[float, PairedDifference]]], crossings: dict[str, float | None], head: str
) -> str:
    """What the opening table shows of the study: per survival rule, where its oracle ladder breaks even; ``head``:
    where the learned head stands ("": not run)."""
    parts = []
    for rule, ladder in ladders.items() or [(DEFAULT_BALANCE_TARGET, [])]:
        crossing, name = crossings.get(rule), rule_name(rule)
        if len(ladder) < 2:
            parts.append(f"{name} not run")
            continue
        span = f"{ladder[0][0]:.2f}–{ladder[-1][0]:.2f}"
        if crossing is not None:
            parts.append(
                f"{name} ≈ {crossing:.2f}"
                + (
                    ""
                    if distinguished(ladder, crossing)
                    else f", not distinguishable (could detect {detectable_span(at_or_above(ladder, crossing))})"
                )
            )
        elif all(d.estimate.ahead for _, d in ladder):
            parts.append(f"{name} below {ladder[0][0]:.2f} (ahead across {span})")
        else:
            estimates = [d.estimate for _, d in ladder]
            unjudged = not any(e.ahead or e.behind for e in estimates)
            parts.append(
                f"{name} none in {span}"
                + (
                    f", no point distinguishable from GRPO G = 8 (could detect {detectable_span(estimates)})"
                    if unjudged
                    else ""
                )
            )
    return "Break-even AUC within groups, oracle ladder: " + "; ".join(parts) + (f"; {head}" if head else "")
