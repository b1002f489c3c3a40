"""The results page's section 13: when does pruning pay (``+exp=pruning_pays``, beyond the paper)? On the long-chain
task, where most of a rollout lies past L_detect, every arm trains for the same training time: GRPO G = 8, GRPO
G = 4 (the cost-matched control: it trains as many rollouts per prompt as κ = 0.5 keeps and generates no more),
random pruning, the paper's rule reading the learned head, DeepConf's prefix confidence or a process checker, and
the rule reading an oracle of set AUC (the ladder), whose clock is credited with the decode time its pruning would
have saved.

Decisions:
- **An arm is a job's overrides without ``trainer.seed``** and without what every job of the sweep shares (such as
  ``+exp=pruning_pays``; an ``arm=`` override always stays): ``arm=oracle pruning.oracle_auc=0.7``. Its runs are
  paired with GRPO G = 8's (``arm=grpo``) by ``trainer.seed``, their evaluations by problem
  (:func:`~arrol_pl.analysis.runs.paired_difference`).
- **An arm's AUC is the realised online AUC within groups of the score its decisions read**
  (``scorer_within_auc_after_cold_start``, the mean over seeds; the head's own, ``head_within_auc_after_cold_start``,
  where a head-scored run did not record the scorer's), over each group's rollouts before pruning: exact for the
  oracle, which decodes every rollout, else estimated from the survivors. The survivors' own AUC reads the order of
  what the rule kept (the default rule's survivors read 0.74 at a set 0.70), so the ladder would not span its set
  AUCs. Pruning orders the rollouts of one group, so what counts is how often a group's right rollouts score above its
  wrong ones, not how well the score tells easy prompts from hard, which lifts the pooled AUC. An oracle without that
  record stands at its set AUC: its score is the outcome plus noise independent of the prompt, so within groups it
  equals the set AUC in expectation. Any other arm whose runs do not all record it stands at its pooled AUC
  (``scorer_auc_after_cold_start``), marked "pooled" in the table, the text and the figure, never mixed with the
  within-group ones of the same arm. Random pruning reads no score: it stands at 0.5, whatever the head it ignores
  scored.
- **The break-even AUC** is where the oracle ladder's difference to GRPO G = 8 crosses 0 going up, interpolated
  linearly between the two ladder points around it; of several such crossings the highest (pruning pays at every
  ladder point above it). It is located only when a ladder point at or above it is ahead of GRPO G = 8 beyond its
  95 % t interval over the seeds (seeds − 1 degrees of freedom; :mod:`arrol_pl.analysis.significance`): means
  around 0 cross it by chance. "The oracle ladder" is the default survival rule's (what the bare ``arm=oracle``
  runs); an oracle pruning by another rule (``pruning.balance_target=global``, Eq. 2 as written, the rule of every
  run that recorded none) is a ladder of its own, with its own break-even: the rule decides which rollouts a
  perfect score prunes. The text states the span the ladder covers, from its data.
- **Every comparison is judged on its 95 % t interval**, and one inside it is "not distinguishable", with the
  effect it could have detected at 80 % power (:mod:`arrol_pl.analysis.significance`); the paper's Fig. 4 claim is
  reproduced when the arm is ahead of GRPO G = 8 beyond that interval.
- **Time to GRPO's final accuracy is a share of the time GRPO itself first reached it**, seed by seed
  (:func:`~arrol_pl.core.metrics.reach_share`), not of GRPO's whole run: GRPO against itself scores 1.0.
- **Random pruning is context**: it is the paper's baseline (Table 4), not ARRoL, so its comparisons are stated
  without a verdict on the paper's claim or a target of the project's.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.runs import PairedDifference, sweep_runs
from arrol_pl.analysis.significance import INTERVAL, detectable_span
from arrol_pl.analysis.wallclock import plot_wallclock
from arrol_pl.core.metrics import mean_sd_se
from arrol_pl.core.pruning import DEFAULT_BALANCE_TARGET
from arrol_pl.train.records.summary import RunSummary

from .common import NOT_DISTINGUISHABLE, Claim
from .probe_ladder import probe_ladder_part
from .ladder import at_or_above, break_even, distinguished, headline_text, ladder_name, plot_break_even, slope_text
from .study_arms import (
    BASELINE,
    CONTROL,
    POOLED,
    SCORERS,
    Arm,
    AucReading,
    credited_share,
    curve,
    median_share,
    named,
    reach_shares,
    share_text,
    study_arms,
    versus,
)

HEADING = (
    "## 13. When does pruning pay? Scorers at L_detect, the oracle ladder and the cost-matched control "
    "(beyond the paper)"
)
COMMAND = "python experiments/reproduce.py --only pruning_pays page"
ROW = "time_tiny"
"""The headline row the section's claims count toward: Fig. 4 on the tiny policy."""
REACH_SHARE = 0.6
"""The project's goal for the oracle at AUC 1.0: GRPO's final accuracy in at most this share of the time GRPO took
to reach it."""
LADDER_SPACING = 0.1
"""Ladder points this close around the crossing locate the break-even AUC to ±0.05."""
AHEAD_OF_CONTROL = f"ahead of GRPO G = 4, the cost-matched control, beyond {INTERVAL} over the seeds"
ORACLE_GOAL = (
    f"oracle at AUC 1.0 ahead of GRPO G = 8 beyond {INTERVAL} over the seeds and at GRPO's final "
    f"accuracy in ≤ {REACH_SHARE}× the time GRPO took to reach it"
)
LOCATED = "break-even AUC located to ±0.05"
LADDER = (
    "python experiments/run.py +exp=pruning_pays arm=oracle pruning.oracle_auc=0.6,0.7,0.8,0.9 "
    "trainer.seed=0,1,2 hydra.sweep.dir=<the same directory>"
)


def auc_cell(arm: Arm) -> str:
    """The table's scorer AUC (``n/a``: the arm reads no score and prunes nothing)."""
    reading = arm.auc_reading()
    return "n/a" if reading is None else reading.text()


def difference_cell(d: PairedDifference | None) -> str:
    """The table's paired difference: mean ± SE over the seeds, and how the evaluations were paired."""
    if d is None:
        return "n/a"
    how = (
        f"per-problem SE {d.eval_se:.3f}"
        if d.by_problem == d.seeds
        else f"evaluation SE {d.eval_se:.3f}, paired by problem on {d.by_problem} of {d.seeds}"
    )
    return f"{d.mean:+.3f} ± {d.se:.3f} ({d.seeds} seed{'s' if d.seeds != 1 else ''}; {how})"


def mean_of(values: Sequence[float | None]) -> float | None:
    """The mean of the values measured (None: none was)."""
    kept = [v for v in values if v is not None]
    return statistics.mean(kept) if kept else None


def setting(runs: Sequence[RunSummary], arms: Sequence[Arm], config: dict) -> str:
    """The section's opening: the study's setting (from GRPO G = 8's config) and how to read the table."""
    algo, trainer, engine = (config.get(k, {}) for k in ("algo", "trainer", "engine"))
    return (
        f"`experiments/run.py +exp=pruning_pays` ({len(runs)} runs, {len(arms)} arms): the long-chain task "
        f"(`data=arithmetic_long`), B = {algo.get('prompts_per_step')} × G = {algo.get('group_size')}, responses "
        f"up to {algo.get('max_response_tokens')} tokens, L_detect = {engine.get('detect_length')}, at most "
        f"{engine.get('max_num_seqs')} rollouts decoded at once. Every arm trains for {trainer.get('max_minutes')} "
        "min of training time (held-out evaluations excluded). An oracle's rollouts run to the end so that it can "
        "read their outcome; its clock is credited with the decode time aborting its pruned rollouts at L_detect "
        f"would have saved (`time/wall_credited`). Held-out: {runs[0].heldout_problems} problems × "
        f"{runs[0].heldout_samples} samples every {trainer.get('eval_every')} steps, the same problems in every "
        "run. Held-out after and the gain over before are mean ± sd over the seeds (SE: of the mean); the "
        "difference to GRPO G = 8 pairs each seed with GRPO's of the same seed and is ± the larger of the "
        "evaluations' SE (paired by problem where both runs recorded per-problem results, pooled over the seeds) "
        "and the seeds' SE; it is judged on its 95 % t interval over the seeds (seeds − 1 degrees of freedom). "
        "Scorer AUC within groups: the realised online AUC of the score the decisions read over the (right, "
        "wrong) pairs of one group, the order pruning acts on, over each group's rollouts before pruning (exact "
        "for the oracle, which decodes them all; else estimated from the survivors, each pair weighted by its "
        "inverse chance to survive) after the cold start (mean over the seeds; random pruning reads none: 0.5). "
        "Marked pooled: the arm's runs predate that record, and their AUC over all survivors stands in (it also "
        "counts telling easy prompts from hard); marked set: an oracle's set AUC, which its realised AUC within "
        "groups equals in expectation."
    )


def section_pruning_pays(root: Path, figures: Path, page_dir: Path) -> tuple[list[str], list[Claim]]:
    """When does pruning pay (``+exp=pruning_pays``): every arm against GRPO G = 8 at equal training time, paired by
    seed and by problem; the held-out curves; the break-even AUC of the oracle ladder, with the real scorers and the
    cost-matched control beside it; the time each arm takes to GRPO's final accuracy; the verdicts."""
    runs = [r for r in sweep_runs(root / "pruning_pays") if r.heldout_accuracy_after is not None]
    if not runs:
        return [
            HEADING,
            "",
            f"The study was not run (`pruning_pays/` holds no runs): `{COMMAND}` (several hours; "
            "the oracle ladder and the other scorers go into the same sweep directory: "
            "conf/exp/pruning_pays.yaml).",
        ], []
    arms = study_arms(runs)
    base, control = named(arms, BASELINE), named(arms, CONTROL)
    c = next(iter((base or arms[0]).runs.values())).config
    lines = [HEADING, "", setting(runs, arms, c), ""]
    diffs = {a.label: d for a in arms if (d := versus(a, base)) is not None}
    rows = []
    for a in arms:
        rs = list(a.runs.values())
        rows.append(
            [
                f"`{a.label}`",
                len(rs),
                fmt(mean_sd_se([r.heldout_accuracy_after for r in rs])),
                fmt(
                    mean_sd_se(
                        [
                            r.heldout_accuracy_after - r.heldout_accuracy_before
                            for r in rs
                            if r.heldout_accuracy_before is not None
                        ]
                    )
                ),
                "—" if a is base else difference_cell(diffs.get(a.label)),
                auc_cell(a),
                fmt(mean_of([r.keep_ratio_mean for r in rs]), ".2f"),
                fmt(mean_of([r.positive_ratio_mean for r in rs]), ".3f"),
                fmt(mean_of([r.zero_advantage_fraction for r in rs]), ".2f"),
                "—" if a.oracle_auc is None else fmt(mean_of([credited_share(r) for r in rs]), ".2f"),
            ]
        )
    lines += table_lines(
        [
            "arm",
            "seeds",
            "held-out after",
            "gain over before",
            "− GRPO G = 8 at equal time",
            "scorer AUC within groups",
            "keep",
            "trained positive ratio",
            "zero-advantage groups",
            "credited share of the training time",
        ],
        rows,
    )
    lines += [
        "",
        "Trained positive ratio: the share of correct rollouts among those the update trains on; "
        "zero-advantage groups: the share of trained groups whose rollouts all share one reward (both after "
        "the cold start, means over the seeds).",
    ]
    drawn = {
        a.label: [Path(r.run_dir) for r in a.runs.values() if len(curve(r)) > 1]
        for a in arms
        if a.oracle_auc in (None, 1.0)
    }  # the ladder's lower points are the break-even figure's
    drawn = {label: dirs for label, dirs in drawn.items() if dirs}
    if drawn:
        target = plot_wallclock(drawn, figures / "pruning_pays_wallclock.png", "heldout/accuracy")
        lines += [
            "",
            "### Held-out accuracy against training seconds",
            "",
            "Each arm's mean over its seeds, ± one standard deviation as a band, up to its shortest seed's end "
            "(an oracle's seconds are its credited clock). Of each oracle ladder only AUC 1.0 is drawn: its "
            "other points are in the break-even figure.",
            "",
            f"![held-out accuracy vs training seconds, each arm's seeds as a band]({target.relative_to(page_dir)})",
        ]
    more, claims = break_even_part(arms, base, control, diffs, figures, page_dir)
    lines += more + reach_part(arms, base) + probe_ladder_part(root, arms)
    claims = fig4_claims(arms, diffs, c.get("engine", {}).get("detect_length")) + control_claims(arms, control) + claims
    return lines + ["", "### Verdicts", "", *(f"- {claim.line()}" for claim in claims)], claims


def oracle_ladders(
    arms: Sequence[Arm], diffs: dict[str, PairedDifference]
) -> dict[str, list[tuple[float, PairedDifference]]]:
    """Per survival rule (the default rule's first), its oracle arms as ``(AUC within groups, difference to GRPO
    G = 8)``, from the lowest AUC up."""
    ladders: dict[str, list[tuple[float, PairedDifference]]] = {}
    for a in sorted(
        (a for a in arms if a.oracle_auc is not None and a.label in diffs and a.auc() is not None),
        key=lambda a: (not a.default_rule, a.rule, a.auc()),
    ):
        ladders.setdefault(a.rule, []).append((a.auc(), diffs[a.label]))
    return ladders


def scorer_points(
    arms: Sequence[Arm], diffs: dict[str, PairedDifference]
) -> list[tuple[str, AucReading, PairedDifference]]:
    """The marked points of the break-even figure: each real scorer's title, where it stands on the axis (its AUC
    within groups, or what stands in for it) and its difference to GRPO G = 8."""
    marked = [a for name in SCORERS if (a := named(arms, name)) is not None]
    return [
        (a.title, a.auc_reading(), diffs[a.label]) for a in marked if a.label in diffs and a.auc_reading() is not None
    ]


def point_label(title: str, reading: AucReading) -> str:
    """A marked point's legend: its title, and "pooled AUC" where that stands in for the one within groups."""
    return f"{title} (pooled AUC)" if reading.basis == POOLED else title


def break_even_part(
    arms: Sequence[Arm],
    base: Arm | None,
    control: Arm | None,
    diffs: dict[str, PairedDifference],
    figures: Path,
    page_dir: Path,
) -> tuple[list[str], list[Claim]]:
    """The break-even figure and text, and the project's goals: the oracle at AUC 1.0 against GRPO G = 8, the
    break-even AUC located (the headline's figure)."""
    if base is None:
        return ["", "No break-even: `arm=grpo` (GRPO G = 8, what every arm is measured against) has no runs."], []
    ladders, points = oracle_ladders(arms, diffs), scorer_points(arms, diffs)
    low = diffs.get(control.label) if control else None
    found = {rule: break_even([(x, d.mean) for x, d in ladder]) for rule, ladder in ladders.items()}
    crossings = {rule: f[0] if f else None for rule, f in found.items()}
    lines = ["", "### Break-even: the scorer's AUC within groups at which pruning pays", ""]
    if ladders or points:
        target = plot_break_even(
            ladders,
            [(point_label(t, r), r.value, d) for t, r, d in points],
            low,
            crossings,
            figures / "pruning_pays_break_even.png",
        )
        lines += [
            f"![held-out accuracy minus GRPO G = 8's against the scorer's AUC within groups]"
            f"({target.relative_to(page_dir)})",
            "",
        ]
    if DEFAULT_BALANCE_TARGET not in ladders:
        lines.append(f"The oracle ladder has 0 point(s), too few to locate a break-even: `{LADDER}`.")
    lines += [ladder_line(rule, ladder, found[rule]) for rule, ladder in ladders.items()]
    sit = [f"{title} at AUC {r.text()} ({d.mean:+.3f} ± {d.se:.3f})" for title, r, d in points]
    if low is not None:
        sit.append(f"GRPO G = 4, the cost-matched control, {low.mean:+.3f} ± {low.se:.3f} (dashed)")
    if sit:
        lines.append("Beside it: " + "; ".join(sit) + ".")
    claims = oracle_goal_claims(arms, base, diffs) + located_claims(ladders, found)
    head = named(arms, "arrol")
    reading = head.auc_reading() if head else None
    if claims:
        claims[-1] = replace(
            claims[-1],
            here=headline_text(ladders, crossings, "" if reading is None else f"learned head at {reading.text('.2f')}"),
        )
    return lines, claims


def ladder_line(
    rule: str, ladder: Sequence[tuple[float, PairedDifference]], found: tuple[float, float, float] | None
) -> str:
    """What the text says of one survival rule's ladder: the AUC span it covers and where it breaks even."""
    name = ladder_name(rule)
    name = name[0].upper() + name[1:]
    if len(ladder) < 2:
        return f"{name} has {len(ladder)} point(s), too few to locate a break-even" + (
            f": `{LADDER}`." if rule == DEFAULT_BALANCE_TARGET else "."
        )
    lowest = ladder[0][0]
    span = (
        f"{name} spans AUC {lowest:.3f}–{ladder[-1][0]:.3f} within groups"
        + (
            ""
            if lowest <= 0.5
            else f", not down to chance (0.5): a scorer below {lowest:.3f} falls beside no point of it"
        )
        + ". "
    )
    if found is None:
        return (
            span
            + "Its difference to GRPO G = 8 does not cross 0 going up within it: "
            + ", ".join(f"{x:.3f}: {d.mean:+.3f}" for x, d in ladder)
            + slope_text(ladder)
            + "."
        )
    x, lo, hi = found
    at = dict(ladder)
    located = (
        "."
        if distinguished(ladder, x)
        else f"; no point at or above it is ahead of GRPO G = 8 beyond {INTERVAL} (they could detect "
        f"{detectable_span(at_or_above(ladder, x))} at 80 % power), so the crossing is not distinguishable "
        "from one by chance."
    )
    return (
        span + f"Its difference to GRPO G = 8 crosses 0 at AUC {x:.3f}, interpolated between its points at AUC "
        f"{lo:.3f} ({at[lo].mean:+.3f}) and {hi:.3f} ({at[hi].mean:+.3f})" + located
    )


def oracle_goal_claims(arms: Sequence[Arm], base: Arm, diffs: dict[str, PairedDifference]) -> list[Claim]:
    """The project's goal for each oracle at AUC 1.0: ahead of GRPO G = 8 and at GRPO's final accuracy sooner."""
    claims = []
    for oracle in (a for a in arms if a.oracle_auc == 1.0 and a.label in diffs):
        d, shares = diffs[oracle.label], reach_shares(oracle, base)
        share = median_share(shares)
        per_seed = ", ".join(f"seed {s}: {share_text(x)}" for s, x in shares)
        claims.append(
            Claim(
                ROW,
                f"{oracle.title[0].upper()}{oracle.title[1:]} (`{oracle.label}`) against GRPO G = 8: "
                f"{d.mean:+.3f} ± {d.se:.3f} at equal training time over {d.seeds} seed(s), "
                f"{d.estimate.standing()}; GRPO's final held-out accuracy reached at a median "
                f"{'n/a' if share is None else share_text(share)} of the time GRPO took to reach it"
                + (f" ({per_seed})" if shares else ""),
                targets=((ORACLE_GOAL, d.estimate.ahead and share is not None and share <= REACH_SHARE),),
            )
        )
    return claims


def located_claims(
    ladders: dict[str, list[tuple[float, PairedDifference]]], found: dict[str, tuple[float, float, float] | None]
) -> list[Claim]:
    """Per survival rule with a ladder: the project's goal of locating its break-even AUC to ±0.05."""
    claims = []
    for rule, ladder in ladders.items():
        if len(ladder) < 2:
            continue
        name = ladder_name(rule)
        if found[rule]:
            x, lo, hi = found[rule]
            text = (
                f"Break-even of {name}: its held-out accuracy minus GRPO G = 8's crosses 0 at scorer AUC {x:.3f} "
                f"within groups, between its points at AUC {lo:.3f} and {hi:.3f}"
            )
            met = hi - lo <= LADDER_SPACING + 1e-9 and distinguished(ladder, x)
        else:
            text = (
                f"Break-even of {name}: its held-out accuracy minus GRPO G = 8's does not cross 0 going up "
                f"within the ladder (AUC {ladder[0][0]:.3f}–{ladder[-1][0]:.3f} within groups)" + slope_text(ladder)
            )
            met = False
        claims.append(
            Claim(
                ROW,
                text,
                targets=((LOCATED, met),),
                detail=f" (met when the ladder points around the "
                f"crossing are at most {LADDER_SPACING} apart and a point at or above it is ahead beyond "
                f"{INTERVAL} over the seeds)",
            )
        )
    return claims


def reach_part(arms: Sequence[Arm], base: Arm | None) -> list[str]:
    """The table of when each arm first reaches GRPO G = 8's final held-out accuracy of the same seed."""
    rows = []
    for a in arms:
        shares = reach_shares(a, base) if base is not None and a is not base else []
        if shares:
            rows.append(
                [
                    f"`{a.label}`",
                    ", ".join(f"{s}: {share_text(x)}" for s, x in shares),
                    share_text(median_share(shares)),
                ]
            )
    if not rows:
        return []
    return [
        "",
        "### Time to GRPO's final accuracy",
        "",
        "Per seed, the training seconds at which the arm's held-out curve first reaches GRPO G = 8's final "
        "held-out accuracy of the same seed, as a share of the training seconds at which GRPO's own curve first "
        "reached it (1.00: as soon as GRPO; never: not within the arm's budget, counted as infinitely late in the "
        "median; n/a: GRPO ended no higher than it began, left out of the median).",
        "",
        *table_lines(["arm", "share of GRPO's time to it, per seed", "median"], rows),
    ]


def fig4_claims(arms: Sequence[Arm], diffs: dict[str, PairedDifference], detect: int | None) -> list[Claim]:
    """The paper's Fig. 4 claim (ARRoL ahead of GRPO at equal training time) per scorer, random pruning as
    context."""
    claims = []
    for a in arms:
        d = diffs.get(a.label)
        if d is None or (a.name not in SCORERS and a.oracle_auc != 1.0):
            continue
        text = (
            f"Fig. 4 on the long-chain task at L_detect = {detect}, {a.title} (`{a.label}`): held-out accuracy "
            f"minus GRPO G = 8's after the same training time, {d.mean:+.3f} ± {d.se:.3f} over {d.seeds} seed(s)"
        )
        e = d.estimate
        if a.name == "random":
            claims.append(Claim(ROW, f"{text}: {e.standing()}"))
            continue
        outcome = "reproduced" if e.ahead else "not reproduced" if e.behind else NOT_DISTINGUISHABLE
        claims.append(
            Claim(
                ROW,
                text,
                paper=outcome,
                detail=f": {e.standing()} (the paper: ARRoL ≥ GRPO; reproduced "
                f"means ahead beyond {INTERVAL} over the seeds)",
            )
        )
    return claims


def control_claims(arms: Sequence[Arm], control: Arm | None) -> list[Claim]:
    """Per pruning arm: does it beat GRPO G = 4, the cost-matched control, at equal training time."""
    claims = []
    for a in arms:
        d = versus(a, control) if a.pruned else None
        if d is None:
            continue
        text = (
            f"{a.title[0].upper()}{a.title[1:]} (`{a.label}`) against GRPO G = 4, the cost-matched control, at "
            f"equal training time: {d.mean:+.3f} ± {d.se:.3f} over {d.seeds} seed(s)"
        )
        e = d.estimate
        claims.append(
            Claim(ROW, f"{text}: {e.standing()}")
            if a.name == "random"
            else Claim(ROW, text, targets=((AHEAD_OF_CONTROL, e.ahead),), detail=f": {e.standing()}")
        )
    return claims
