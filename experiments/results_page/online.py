"""The results page's sections on SmolLM2-135M trained online: 8 ARRoL vs GRPO at equal training time (Fig. 4),
10 ARRoL's survival rules vs random pruning (Table 4 online) and 11 section 8 in the balancing configuration.

Decisions:
- **Arms are paired by seed** (:func:`~arrol_pl.analysis.runs.pairs_by_seed`); the per-seed differences are
  averaged with their standard errors combined (:func:`~arrol_pl.core.metrics.mean_of_estimates`).
- **Section 10 reports whichever rules its sweep ran**, each found by its ``config.pruning`` (random pruning by its
  policy, ARRoL's arms by ``balance_target``, :func:`balance_arm`) and compared with random pruning seed by seed;
  the headline row judges the default rule when it ran (the first rule of :data:`BALANCE_ARMS` present), and the
  others are listed beside it.
- **Every comparison over seeds is judged on the larger of two uncertainties**: the evaluations' noise (section
  10: the steps') and, over several seeds, the spread of the per-seed differences (which also holds the training
  paths' noise; :class:`~arrol_pl.analysis.significance.SeedMean`), against its 95 % t interval on seeds − 1
  degrees of freedom; inside it a difference is "not distinguishable", with the effect it could have detected at
  80 % power (:mod:`arrol_pl.analysis.significance`).
- **Section 10 states a direction against the paper's Table 4 only beyond that interval**: inside it the default
  rule's difference to random pruning is not distinguishable from 0, set beside the effect it could detect and the
  paper's own differences (:func:`paper_direction`), never read as the paper's direction or its opposite.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.runs import comparable, paired_difference, pairs_by_seed, per_step_after_cold_start, sweep_runs
from arrol_pl.analysis.significance import INTERVAL, Estimate, SeedMean, seed_mean
from arrol_pl.train.records.summary import RunSummary

from .common import NOT_DISTINGUISHABLE, Claim
from .ladder import LEGACY_RULE
from .paper import PAPER_TABLE4


ONLINE_HEAD_TARGET = "online head: accuracy ≥ majority + 5 points, AUC ≥ 0.75"


def online_head_claim(run: RunSummary, title: str) -> Claim:
    """The project's target for a run's online head after the cold start: accuracy ≥ majority class + 5 points,
    AUC ≥ 0.75."""
    acc, floor, auc = (
        run.head_accuracy_after_cold_start,
        run.head_majority_after_cold_start,
        run.head_auc_after_cold_start,
    )
    ok = comparable(acc) >= comparable(floor) + 0.05 and comparable(auc) >= 0.75
    return Claim(
        "head_smollm2",
        f"{title}: accuracy {fmt(acc)} vs majority class {fmt(floor)}, AUC {fmt(auc)} after the cold start",
        targets=((ONLINE_HEAD_TARGET, ok),),
    )


def section_online(root: Path) -> tuple[list[str], list[Claim]]:
    """Online ARRoL vs GRPO with SmolLM2-135M at equal training wall time (``+exp=smollm2_online``; Fig. 4, Table 1),
    the two arms paired by ``trainer.seed``."""
    return equal_time_section(
        root / "online",
        "## 8. Online ARRoL vs GRPO on SmolLM2-135M at equal training time (paper Fig. 4, Table 1)",
        preset="smollm2_online",
        arm={"policy": "arrol"},
        arm_override="pruning=arrol",
        arm_title="ARRoL κ = 0.5",
        label="Fig. 4 on SmolLM2-135M",
        run_hint="--only online page` (3 seeds, about 90 min on 2 cores)",
        short="paper's rule",
        setting="from the same pretrained weights, in bf16, top 2 decoder blocks trained",
    )


def section_online_spread(root: Path) -> tuple[list[str], list[Claim]]:
    """Section 8 in the configuration where section 10's balance reproduces (``+exp=smollm2_online_spread``)."""
    return equal_time_section(
        root / "online_spread",
        "## 11. Online ARRoL vs GRPO on SmolLM2-135M at equal training time, in the "
        "balancing configuration (paper Fig. 4)",
        preset="smollm2_online_spread",
        arm={"policy": "arrol", "balance_target": "spread"},
        arm_override="pruning=arrol_spread",
        arm_title="ARRoL spread, κ = 0.5",
        short="spread rule",
        label="Fig. 4 on SmolLM2-135M with the spread rule",
        run_hint="--only online_spread page` (3 seeds, about 80 min on 2 cores)",
        setting="as section 8, but with section 10's pruning: the spread rule, the `stats` head "
        "input and a later detection length",
    )


def equal_time_section(
    part: Path,
    heading: str,
    *,
    preset: str,
    arm: dict[str, Any],
    arm_override: str,
    arm_title: str,
    label: str,
    run_hint: str,
    setting: str,
    name: str = "ARRoL",
    baseline: dict[str, Any] | None = None,
    whole: bool = False,
    baseline_override: str = "pruning=none",
    row: str = "time_smollm2",
    judged: str = "paper",
    target: str = "",
    short: str = "",
) -> tuple[list[str], list[Claim]]:
    """GRPO (``pruning=none``, or ``baseline``) against one arm at equal training wall time, paired by
    ``trainer.seed``: the table, the arm − GRPO held-out after per seed and over the seeds, the online-head claims and
    the Fig. 4 verdict. ``name`` is what the text calls the arm; with ``whole`` the arms are whole-config specs
    (:func:`~arrol_pl.analysis.runs.pick_config`), else pruning values.

    The comparison counts toward the headline ``row``, ``judged`` as the paper's Fig. 4 claim (``paper``), as the
    project's own ``target`` (``target``: met when ahead of GRPO beyond its 95 % t interval), or not at all
    (``context``: a baseline against GRPO); ``short`` names the comparison in the headline table."""
    lines = [heading, ""]
    pairs = pairs_by_seed(sweep_runs(part), baseline or {"policy": "none"}, arm, whole)
    if not pairs:
        return lines + [
            f"Not run (`{part.name}/` needs a `{baseline_override}` and a `{arm_override}` job of one "
            f"`trainer.seed`): `python experiments/reproduce.py {run_hint}."
        ], []
    arrol = pairs[0][2]
    budget = arrol.config["trainer"].get("max_minutes")
    rows = []
    for seed, grpo, arm_run in pairs:
        for title, s in (("GRPO", grpo), (arm_title, arm_run)):
            gain = comparable(s.heldout_accuracy_after) - comparable(s.heldout_accuracy_before)
            rows.append(
                [
                    seed,
                    title,
                    s.steps,
                    fmt(s.seconds_per_step, ".1f"),
                    f"{fmt(s.heldout_accuracy_before)} ± {fmt(s.heldout_accuracy_se_before)}",
                    f"{fmt(s.heldout_accuracy_after)} ± {fmt(s.heldout_accuracy_se_after)}",
                    f"{gain:+.3f}",
                    fmt(s.keep_ratio_mean),
                    fmt(s.head_accuracy_after_cold_start),
                    fmt(s.head_majority_after_cold_start),
                    fmt(s.head_auc_after_cold_start),
                    fmt(s.zero_advantage_fraction),
                ]
            )
    lines += [
        f"`experiments/run.py +exp={preset}`: both arms train for {budget} min of training wall time "
        f"(held-out evaluations excluded) {setting}; "
        f"B = {arrol.config['algo']['prompts_per_step']} × G = {arrol.config['algo']['group_size']}, "
        f"L_detect = {arrol.config['engine']['detect_length']} of {arrol.config['algo']['max_response_tokens']} "
        f"tokens, head input `{arrol.config.get('head', {}).get('input', 'last')}`. "
        f"Held-out: {arrol.heldout_problems} problems × {arrol.heldout_samples} samples (± the evaluation's standard "
        "error over problems). A sweep runs its jobs one after another; anything else on the machine slows the arms "
        "unevenly and biases an equal-time comparison, so this part runs alone.",
        "",
        *table_lines(
            [
                "seed",
                "arm",
                "steps",
                "s / step",
                "held-out before",
                "held-out after",
                "gain",
                "keep",
                "head acc.",
                "majority class",
                "head AUC",
                "zero-adv. groups",
            ],
            rows,
        ),
    ]
    # the larger of the evaluations' noise and the spread over seeds (which also holds the training paths' noise)
    difference = paired_difference(pairs)
    k, diff, diff_se, eval_se = difference.seeds, difference.mean, difference.se, difference.eval_se
    e = difference.estimate
    steps_ratio = sum(a.steps for _, _, a in pairs) / max(1, sum(g.steps for _, g, _ in pairs))
    per_seed = "; ".join(f"seed {seed}: {d:+.3f} ± {se:.3f}" for seed, d, se in difference.per_seed)
    spread = (
        f"; over seeds sd {difference.seed_sd:.3f}, SE {difference.seed_se:.3f}; the larger SE is used"
        if k > 1
        else "; one seed per arm"
    )
    paired = difference.by_problem
    unpaired = (
        "the two evaluations' standard errors combined as if independent, likely an overestimate since both "
        "arms evaluate the same problems"
    )
    how = (
        "paired by problem: both arms evaluate the same problems"
        if paired == k
        else f"{unpaired}; these runs predate the per-problem records that pair them"
        if not paired
        else f"paired by problem for the seeds whose runs recorded per-problem results, else {unpaired}"
    )
    lines += [
        "",
        f"{name} took {steps_ratio:.2f}× GRPO's steps in the same training time. Held-out after, {name} − GRPO "
        f"({how}): {per_seed}. Over the {k} seed(s): {diff:+.3f} ± "
        f"{diff_se:.3f} (evaluation SE {eval_se:.3f}{spread}; {e.interval()}).",
    ]
    detect = arrol.config["engine"]["detect_length"]
    claims = [
        online_head_claim(a, f"Online head on SmolLM2-135M ({arm_title} arm at L_detect = {detect}, seed {seed})")
        for seed, _, a in pairs
    ]
    ahead = e.ahead
    outcome = "reproduced" if ahead else NOT_DISTINGUISHABLE if diff >= 0 else "not reproduced"
    why = (
        ""
        if ahead
        else f": {name} {e.standing()}"
        if e.behind
        else f": {name} {'≥' if diff >= 0 else 'below'} GRPO by the point estimate only; {e.standing()}"
    )
    text = (
        f"{label}: held-out accuracy of {name} minus GRPO's after the same training time, {diff:+.3f} ± "
        f"{diff_se:.3f} over {k} seed(s)"
    )
    here = (
        f"{short or name}, L_detect = {arrol.config['engine']['detect_length']}: {name} − GRPO {diff:+.3f} ± "
        f"{diff_se:.3f} ({k} seeds)"
    )
    if judged == "paper":
        claims.append(
            Claim(
                row,
                text,
                paper=outcome,
                here=here,
                detail=why + f" (the paper: {name} ≥ GRPO; reproduced means ahead beyond {INTERVAL} over the seeds)",
            )
        )
    elif judged == "target":
        claims.append(Claim(row, text, targets=((target, ahead),), here=here, detail=why))
    else:
        claims.append(Claim(row, text + (f": {e.standing()}" if ahead else why)))
    return lines, claims


@dataclass(frozen=True)
class BalanceArm:
    """One arm of the online balance sweep (``+exp=smollm2_balance``), found by its ``config.pruning``: random
    pruning by ``policy``, ARRoL's arms by ``balance_target`` (:func:`balance_arm`)."""

    key: str
    """``random``, or the survival rule (``pruning.balance_target``)."""
    title: str
    """The tables' name of the arm."""
    name: str
    """The text's."""
    short: str
    """The online-head claims' (``spread arm``)."""
    override: str
    what: str
    """How it prunes, for the section's setup line."""


BALANCE_ARMS = (
    BalanceArm(
        "anchored",
        "ARRoL, anchored (default)",
        "the default rule",
        "anchored",
        "pruning=arrol",
        "(the default rule) keeps each group's best- and worst-scored rollouts and prunes the middle toward ρ "
        "in Lemma 4.1's direction",
    ),
    BalanceArm(
        "global",
        "Eq. 2 as written",
        "Eq. 2 as written",
        "Eq. 2",
        "pruning=arrol_eq2",
        "prunes by the paper's Eq. 2 with one δ over the calibrator's window, where ρ cancels",
    ),
    BalanceArm(
        "spread",
        "spread",
        "the spread rule",
        "spread",
        "pruning=arrol_spread",
        "keeps each group's best- and worst-scored rollouts and the rest at random (ranks of the online head's "
        "scores only)",
    ),
    BalanceArm(
        "group",
        "per-group δ",
        "the per-group rule",
        "per-group",
        "pruning=arrol_group",
        "prunes in Lemma 4.1's direction within each group",
    ),
    BalanceArm(
        "random",
        "random",
        "random pruning",
        "random",
        "pruning=random",
        "ignores the head (which still trains, so its figures are comparable)",
    ),
)
"""The arms section 10 reports, in its tables' order; the sweep runs any of them beside ``random``."""
ARMS_BY_KEY = {arm.key: arm for arm in BALANCE_ARMS}
BALANCE_MEASURES = (
    ("positive_ratio", "E[ρ̂]", ".3f"),
    ("rho_1_minus_rho", "E[ρ̂(1−ρ̂)]", ".4f"),
    ("zero_advantage_fraction", "zero-adv. groups", ".3f"),
)
"""The per-step figures of Table 4 (history tag ``balance/<key>``), their titles and the digits of their
differences."""
BALANCE_HEADING = "## 10. Online balance on SmolLM2-135M: ARRoL's survival rules vs random pruning (paper Table 4)"


def balance_arm(run: RunSummary) -> str | None:
    """The :data:`BALANCE_ARMS` key of a run: ``random``, or ARRoL's survival rule (Eq. 2 as written where the run
    recorded none, as every run did before the anchored rule became the default); None for anything else."""
    pruning = run.config.get("pruning", {})
    if pruning.get("policy") == "random":
        return "random"
    if pruning.get("policy") == "arrol":
        return pruning.get("balance_target", LEGACY_RULE)
    return None


def balance_seeds(runs: list[RunSummary]) -> dict[int, dict[str, RunSummary]]:
    """Per ``trainer.seed`` (in order), each arm's first run, for the seeds that ran random pruning and at least one
    of ARRoL's rules: the arms are compared seed by seed, each seed's arms starting from the same policy."""
    by_seed: dict[int, dict[str, RunSummary]] = {}
    for run in runs:
        key = balance_arm(run)
        if key in ARMS_BY_KEY:
            by_seed.setdefault(run.config.get("trainer", {}).get("seed", 0), {}).setdefault(key, run)
    return {seed: arms for seed, arms in sorted(by_seed.items()) if "random" in arms and len(arms) > 1}


@dataclass(frozen=True)
class RuleVsRandom:
    """One of ARRoL's rules minus random pruning over the seeds that ran both: each Table 4 figure
    (:data:`BALANCE_MEASURES`, per step after the cold start) and the held-out accuracy after (None where a run
    lacks it)."""

    arm: BalanceArm
    measures: dict[str, SeedMean]
    heldout: SeedMean | None

    @property
    def seed_ids(self) -> list[int]:
        """The seeds compared, in order (every measure has one difference per seed)."""
        return [seed for seed, _, _ in next(iter(self.measures.values())).per_seed]


def rule_vs_random(
    arm: BalanceArm, seeds: dict[int, dict[str, RunSummary]], stats: dict[tuple[int, str], dict[str, Estimate]]
) -> RuleVsRandom:
    """``arm`` minus random pruning on the seeds of ``seeds`` that ran it; ``stats``: each (seed, arm)'s per-step
    estimates."""
    paired = [seed for seed, arms in seeds.items() if arm.key in arms]
    measures = {
        key: minus_random([(seed, stats[seed, arm.key][key], stats[seed, "random"][key]) for seed in paired])
        for key, _, _ in BALANCE_MEASURES
    }
    pairs = [(seed, seeds[seed]["random"], seeds[seed][arm.key]) for seed in paired]
    recorded = all(
        r.heldout_accuracy_after is not None and r.heldout_accuracy_se_after is not None
        for _, a, b in pairs
        for r in (a, b)
    )
    return RuleVsRandom(arm, measures, paired_difference(pairs) if recorded else None)


def difference_cell(e: SeedMean, spec: str, seed: int | None = None) -> str:
    """One seed's difference ± its standard error, or (``seed`` None) the mean over the seeds ± the SE it is judged
    on."""
    if seed is None:
        return f"{e.mean:+{spec}} ± {e.se:{spec}}"
    _, value, se = next(p for p in e.per_seed if p[0] == seed)
    return f"{value:+{spec}} ± {se:{spec}}"


DIRECTION_OPENING = "The paper's Table 4 has ARRoL raise"
DIRECTION_MEASURES = BALANCE_MEASURES[:2]
"""The figures the paper's Table 4 gives (E[ρ̂] and E[ρ̂(1−ρ̂)]), whose direction the section compares."""


def paper_direction(default: dict[str, tuple[str, str]] | None, seeds: int = 0) -> str:
    """How the default rule moves E[ρ̂] and E[ρ̂(1−ρ̂)] against the paper's Table 4 (ARRoL raises both over random
    pruning), from ``default``: per measure of :data:`DIRECTION_MEASURES`, its difference to random pruning over
    ``seeds`` seeds (``-0.005 ± 0.018``) and where it stands against 0
    (:meth:`~arrol_pl.analysis.significance.Estimate.standing`). A direction is stated only beyond the 95 % t
    interval; inside it the difference is not distinguishable from 0, beside the effect the comparison could detect
    and the paper's own differences."""
    rho = ", ".join(f"{m} {v['Random'][0]:.2f} → {v['ARRoL'][0]:.2f}" for m, v in PAPER_TABLE4.items())
    bal = ", ".join(f"{v['Random'][1]:.2f} → {v['ARRoL'][1]:.2f}" for v in PAPER_TABLE4.values())
    paper = f"{DIRECTION_OPENING} E[ρ̂] over random pruning ({rho}) and E[ρ̂(1−ρ̂)] ({bal})"
    if default is None:
        return (
            f"{paper}; the default rule (`pruning=arrol`) has no run here beside random pruning, so its direction "
            "is not judged."
        )
    stated = []
    for i, (key, title, _) in enumerate(DIRECTION_MEASURES):
        cell, standing = default[key]
        deltas = " and ".join(f"{v['ARRoL'][i] - v['Random'][i]:+.2f}" for v in PAPER_TABLE4.values())
        tail = (
            ": the paper's direction"
            if standing.startswith("ahead")
            else ": against the paper's direction"
            if standing.startswith("behind")
            else f", where the paper's differences are {deltas}"
        )
        stated.append(f"{title} {cell}, {standing}{tail}")
    return f"{paper}. Here, over {seeds} seed(s), the default rule minus random pruning: " + ". ".join(stated) + "."


def direction_figures(v: RuleVsRandom) -> dict[str, tuple[str, str]]:
    """What :func:`paper_direction` reads of a rule against random pruning."""
    return {
        key: (difference_cell(v.measures[key], spec), v.measures[key].estimate.standing(spec))
        for key, _, spec in DIRECTION_MEASURES
    }


def restated_direction(body: list[str]) -> list[str]:
    """A kept section 10 with its direction sentence as :func:`paper_direction` words it now, from the default
    rule's figures the section records: its mean of the seeds in the differences' table and its standing against 0
    in the list below it (each as the section computed it). A section without them is left as it is."""
    title = ARMS_BY_KEY["anchored"].title
    row = next((line for line in body if line.startswith(f"| {title} | mean of ")), None)
    standings = next((line for line in body if line.startswith(f"- {title} − random over ")), None)
    at = next((i for i, line in enumerate(body) if line.startswith(DIRECTION_OPENING)), None)
    if row is None or standings is None or at is None:
        return body
    cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
    titles = "|".join(re.escape(t) for t in [*(t for _, t, _ in BALANCE_MEASURES), "held-out after"])
    listed = re.split(f"; (?=(?:{titles}) )", standings.split(": ", 1)[1].removesuffix("."))
    default = {}
    for i, (key, measure, _) in enumerate(DIRECTION_MEASURES):
        standing = next((s[len(measure) + 1 :] for s in listed if s.startswith(f"{measure} ")), None)
        if standing is None:
            return body
        default[key] = (cells[2 + i], standing)
    return [*body[:at], paper_direction(default, int(cells[1].split()[-1])), *body[at + 1 :]]


def with_se(value: float | None, se: float | None) -> str:
    """``value ± se``, or ``n/a`` for a figure the run did not record (no held-out set)."""
    return "n/a" if value is None else f"{fmt(value)} ± {fmt(se)}"


def section_online_balance(root: Path) -> tuple[list[str], list[Claim]]:
    """Online Table 4 on SmolLM2-135M (``+exp=smollm2_balance``): whichever of ARRoL's survival rules the sweep ran
    (:data:`BALANCE_ARMS`) against random pruning at the same κ, seed by seed and over the seeds (each rule's
    per-seed differences to random, :func:`minus_random`). The headline row judges the first rule present, the
    default when it ran; the others are listed beside it."""
    lines = [BALANCE_HEADING, ""]
    seeds = balance_seeds(sweep_runs(root / "online_balance"))
    if not seeds:
        return lines + [
            "Not run (`online_balance/` needs a `pruning=random` job and one of `pruning=arrol`, "
            "`pruning=arrol_eq2` or `pruning=arrol_spread` of the same `trainer.seed`): `python "
            "experiments/reproduce.py --only online_balance page` (5 seeds × 4 arms, about 4 h on 2 "
            "cores; `experiments/run.py +exp=smollm2_balance` with `pruning=` and `trainer.seed=` "
            "overrides runs a subset)."
        ], []
    present = [arm for arm in BALANCE_ARMS if any(arm.key in arms for arms in seeds.values())]
    rules = [arm for arm in present if arm.key != "random"]
    first = next(iter(seeds.values()))["random"]
    trainer = first.config["trainer"]
    budget = f"{trainer.get('max_steps')} steps"
    if trainer.get("max_minutes") is not None:
        budget = f"{trainer['max_minutes']} min of training" + (
            f", at most {trainer['max_steps']} steps" if trainer.get("max_steps") else ""
        )
    stats: dict[tuple[int, str], dict[str, Estimate]] = {}
    rows = []
    for seed, arms in seeds.items():
        for arm in present:
            run = arms.get(arm.key)
            if run is None:
                continue
            stats[seed, arm.key] = {
                key: per_step_after_cold_start(run, f"balance/{key}") for key, _, _ in BALANCE_MEASURES
            }
            rows.append(
                [
                    seed,
                    arm.title,
                    f"`{run.config.get('head', {}).get('input', 'last')}`",
                    run.steps,
                    fmt(run.keep_ratio_mean),
                    *(f"{e.mean:.3f} ± {e.se:.3f}" for e in stats[seed, arm.key].values()),
                    fmt(run.head_auc_after_cold_start),
                    fmt(run.head_within_auc_after_cold_start),
                    with_se(run.heldout_accuracy_before, run.heldout_accuracy_se_before),
                    with_se(run.heldout_accuracy_after, run.heldout_accuracy_se_after),
                ]
            )
    kappa = first.config["pruning"].get("keep_ratio")
    lines += [
        f"`experiments/run.py +exp=smollm2_balance`: as section 8 (bf16, top 2 decoder blocks trained), but each arm "
        f"trains {budget}, L_detect = {first.config['engine']['detect_length']}, where SmolLM2 has written its "
        f"answer, and every arm prunes at the same κ = {kappa}: "
        + "; ".join(f"`{arm.override.split('=', 1)[1]}` {arm.what}" for arm in present)
        + ". "
        "Per-step figures after the cold start (mean ± standard error over steps; the AUCs are over each step's "
        "rollouts before pruning, estimated from its survivors with each pair weighted by its inverse chance to "
        "survive: the survivors' own would read high under the rules that keep a group's ends).",
        "",
        *table_lines(
            [
                "seed",
                "arm",
                "head input",
                "steps",
                "keep",
                *(t for _, t, _ in BALANCE_MEASURES),
                "head AUC",
                "head AUC within groups",
                "held-out before",
                "held-out after",
            ],
            rows,
        ),
    ]
    versus = [rule_vs_random(arm, seeds, stats) for arm in rules]
    diff_rows = []
    for v in versus:
        for seed in [*v.seed_ids, None]:
            cells = [difference_cell(v.measures[key], spec, seed) for key, _, spec in BALANCE_MEASURES]
            cells.append("n/a" if v.heldout is None else difference_cell(v.heldout, ".3f", seed))
            diff_rows.append([v.arm.title, seed if seed is not None else f"mean of {len(v.seed_ids)}", *cells])
    lines += [
        "",
        "Each rule minus random pruning, seed by seed (the per-step figures' standard errors over steps "
        "combined; held-out after paired by problem where both runs recorded it), then over the seeds: the "
        "mean of the per-seed differences ± the larger of their standard errors combined and their spread over "
        "the seeds (within a seed the two policies drift apart as they train), judged against its 95 % t "
        "interval on seeds − 1 degrees of freedom.",
        "",
        *table_lines(["rule − random", "seed", *(t for _, t, _ in BALANCE_MEASURES), "held-out after"], diff_rows),
        "",
    ]
    for v in versus:
        standings = [f"{title} {v.measures[key].estimate.standing(spec)}" for key, title, spec in BALANCE_MEASURES]
        if v.heldout is not None:
            standings.append(f"held-out after {v.heldout.estimate.standing()}")
        lines.append(f"- {v.arm.title} − random over {len(v.seed_ids)} seed(s): " + "; ".join(standings) + ".")
    default = next((v for v in versus if v.arm.key == "anchored"), None)
    lines += [
        "",
        paper_direction(None)
        if default is None
        else paper_direction(direction_figures(default), len(default.seed_ids)),
    ]
    claims = [balance_claim(v, kappa, judged=i == 0) for i, v in enumerate(versus)]
    lead = rules[0]
    claims += [
        online_head_claim(
            arms[lead.key],
            f"Online head on SmolLM2-135M at L_detect = "
            f"{arms[lead.key].config['engine']['detect_length']} ({lead.short} arm, seed {seed})",
        )
        for seed, arms in seeds.items()
        if lead.key in arms
    ]
    return lines, claims


def balance_claim(v: RuleVsRandom, kappa: Any, judged: bool) -> Claim:
    """Table 4's claim for one rule against random pruning: fewer zero-advantage groups and more balance, each beyond
    its 95 % t interval over the seeds. ``judged``: the rule the headline row reads (a verdict on the paper's claim
    and the row's figure); another rule's comparison is listed as context."""
    r, b, z = (v.measures[k] for k in ("positive_ratio", "rho_1_minus_rho", "zero_advantage_fraction"))
    text = (
        f"Table 4 online on SmolLM2-135M ({v.arm.name} vs random pruning at κ = {kappa}, {z.seeds} seed(s)): "
        f"E[ρ̂] {r.mean:+.3f} ± {r.se:.3f}, E[ρ̂(1−ρ̂)] {b.mean:+.4f} ± {b.se:.4f}, zero-advantage groups "
        f"{z.mean:+.3f} ± {z.se:.3f}"
    )
    standing = f"zero-advantage groups {z.estimate.standing()}; E[ρ̂(1−ρ̂)] {b.estimate.standing('.4f')}"
    if not judged:
        return Claim("balance_smollm2", text, detail=f": {standing}")
    outcome = (
        "reproduced"
        if z.estimate.behind and b.estimate.ahead
        else NOT_DISTINGUISHABLE
        if z.mean <= 0 <= b.mean
        else "not reproduced"
    )
    return Claim(
        "balance_smollm2",
        text,
        paper=outcome,
        detail=f" (fewer zero-advantage groups and more balance than random pruning, each beyond {INTERVAL} "
        f"over the seeds: {standing})",
        here=f"{v.arm.name} − random online: E[ρ̂(1−ρ̂)] {b.mean:+.4f} ± {b.se:.4f}, zero-adv. groups "
        f"{z.mean:+.3f} ± {z.se:.3f} ({z.seeds} seeds)",
    )


def minus_random(per_seed: list[tuple[int, Estimate, Estimate]]) -> SeedMean:
    """A per-step figure of a rule's arm minus the random arm's over the seeds, from each seed's ``(seed, the rule's
    estimate, random's)``: per seed the difference with both standard errors combined, on the fewer steps − 1
    degrees of freedom; over the seeds on seeds − 1 (:class:`~arrol_pl.analysis.significance.SeedMean`)."""
    return seed_mean(
        [(seed, a.mean - b.mean, math.hypot(a.se, b.se)) for seed, a, b in per_seed],
        min(min(a.df, b.df) for _, a, b in per_seed),
    )
