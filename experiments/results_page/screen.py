"""The results page's section 12: choosing the groups (beyond the paper) at equal training time on SmolLM2-135M:
each arm against GRPO, the screened arms against DAPO with refill, and the screen's own figures (informative groups
reaching the update, its cost, its audited precision against a random drop's and an oracle's).

Every held-out comparison pairs the arms by seed and is judged on its 95 % t interval over the seeds
(:class:`~arrol_pl.analysis.runs.PairedDifference`, :mod:`arrol_pl.analysis.significance`); "not behind DAPO"
states the effect the comparison could have detected, since a wide interval is easily not behind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.runs import comparable, paired_difference, pairs_by_seed, pick_config, sweep_runs
from arrol_pl.analysis.significance import INTERVAL
from arrol_pl.core.screen_audit import AuditCounts
from arrol_pl.train.records.summary import RunSummary

from .common import Claim
from .online import equal_time_section


def _arm(algo: str, policy: str, stages: str = "none", **algo_values: Any) -> dict[str, Any]:
    """A whole-config spec of one arm of the screening comparison."""
    return {"algo": {"name": algo, **algo_values}, "pruning": {"policy": policy, "screen": {"stages": stages}}}


SCREEN_BASELINE = _arm("grpo", "none")
SCREEN_ARMS = (  # (title, spec, override)
    (
        "DAPO with refill",
        {"algo": {"name": "dapo", "dynamic_sampling_refill": True}, "pruning": {"policy": "none"}},
        "arm=dapo",
    ),
    ("ARRoL", _arm("grpo", "arrol"), "arm=arrol"),
    ("ARRoL + prompt screen", _arm("grpo", "arrol", "prompt"), "arm=arrol_screen_prompt"),
    # the pilot arms: run when named (arm=arrol_screen,grpo_screen), reported when present
    ("ARRoL + detect screen", _arm("grpo", "arrol", "detect"), "arm=arrol_screen"),
    ("GRPO + prompt screen", _arm("grpo", "none", "prompt"), "arm=grpo_screen"),
)
SCREEN_PILOTS = ("ARRoL + detect screen", "GRPO + prompt screen")
SCREEN_GOALS = {"informative": 1.5, "cost": 0.25, "progress": 0.5}
"""Group screening's own targets: informative groups at the update ≥ 1.5× GRPO's share, the screen's cost ≤ 25 %
of the step, the audit at least halfway from random to the oracle."""
AHEAD_OF_GRPO = f"ahead of GRPO beyond {INTERVAL} over the seeds"
NOT_BEHIND_DAPO = f"not behind DAPO with refill beyond {INTERVAL} over the seeds"
INFORMATIVE = "≥ 1.5× GRPO's informative groups at ≤ 0.25 of the step"
AUDIT = "audit at least halfway from random to the oracle"


def section_screen(root: Path) -> tuple[list[str], list[Claim]]:
    """Choosing the groups (beyond the paper) at equal training wall time on SmolLM2-135M (``+exp=smollm2_screen``):
    each arm against GRPO, paired by seed; the screened arms against DAPO with refill; then the screen's own figures:
    informative groups reaching the update, the screen's cost and its audited precision against random's and an
    oracle's."""
    part = root / "screen"
    heading = "## 12. Choosing the groups at equal training time on SmolLM2-135M (beyond the paper)"
    hint = "--only screen page` (5 seeds × 4 arms, about 5 h on 2 cores; a subset of seeds can run at a time)"
    runs = sweep_runs(part)
    if not runs:
        return [heading, "", f"Not run (`screen/` holds no runs): `python experiments/reproduce.py {hint}."], []
    lines = [
        heading,
        "",
        "Spend the step on groups that can teach (`pruning.screen` and `algo.dynamic_sampling_refill`; "
        'docs/algorithm.md, "Choosing the groups"): oversample the prompts and keep the B groups least likely to come '
        "out all-correct or all-wrong, from the hidden state of each prompt's last token (`prompt`) or from the "
        "quality head at L_detect (`detect`, aborted inside the engine); or, as DAPO, generate further batches until B "
        "groups with a learning signal are in hand. A random share of the screened groups runs to completion "
        "whatever is decided: the audit. The ARRoL + screening arm screens at the prompt: in the pilot arms (ARRoL "
        "with the detect-stage screen, GRPO with the prompt-stage screen; their sections follow when their runs "
        "are present) the prompt stage cost less and passed on more informative groups. Time to GRPO's final "
        "accuracy is not measured here (the preset evaluates before and after training only).",
        "",
    ]
    claims: list[Claim] = []
    rows: list[list[Any]] = []
    for title, spec, override in SCREEN_ARMS:
        if title in SCREEN_PILOTS and pick_config(runs, spec) is None:
            continue
        body, found = equal_time_section(
            part,
            f"### {title} vs GRPO",
            preset="smollm2_screen",
            arm=spec,
            arm_override=override,
            arm_title=title,
            label=f"Fig. 4 on SmolLM2-135M, {title}",
            run_hint=hint,
            setting="in section 8's setting",
            name=title,
            baseline=SCREEN_BASELINE,
            whole=True,
            baseline_override="arm=grpo",
            **(
                {"judged": "paper", "short": "paper's rule, screening sweep"}
                if title == "ARRoL"
                else {"judged": "context", "row": "screen"}
                if title.startswith("DAPO")
                else {"judged": "target", "row": "screen", "target": AHEAD_OF_GRPO}
            ),
        )
        lines += body + [""]
        claims += [
            replace(c, here="") if title in SCREEN_PILOTS else c  # the pilots are listed, not headlined
            for c in found
            if not c.text.startswith("Online head")
        ]
        rows += screen_rows(runs, title, spec, claims)
    dapo = SCREEN_ARMS[0]
    for title, spec, _ in SCREEN_ARMS[2:]:
        pairs = pairs_by_seed(runs, dapo[1], spec, whole=True)
        if pairs:
            d = paired_difference(pairs)
            claims.append(
                Claim(
                    "screen",
                    f"{title} against DAPO with refill at equal training time: held-out after "
                    f"{d.mean:+.3f} ± {d.se:.3f} over {d.seeds} seed(s)",
                    targets=((NOT_BEHIND_DAPO, not d.estimate.behind),),
                    detail=f": {d.estimate.standing()}",
                )
            )
    lines += [
        "### The screen's own figures",
        "",
        "Informative groups: the share of the step's groups whose survivors' rewards differ (1 − the "
        "zero-advantage share), after the cold start. Screen cost: the prompt stage's seconds plus the "
        "generation time spent on the groups the detect stage dropped (by their share of the tokens), over the "
        "step's seconds. The audit's counts are pooled over the active steps; the oracle drops the same share "
        "but only zero-advantage groups while any are left.",
        "",
        *table_lines(
            [
                "seed",
                "arm",
                "informative groups",
                "vs GRPO",
                "screen cost (share of step)",
                "stage",
                "audited",
                "zero-adv.: screened out / random / oracle",
            ],
            rows,
        ),
    ]
    return lines, claims


def screen_rows(runs: Sequence[RunSummary], title: str, spec: dict[str, Any], claims: list[Claim]) -> list[list[Any]]:
    """One arm's rows of the screen table, per seed and audited stage; appends the arm's informative-share claim
    and, per stage, its audit claim (pooled over the seeds) to ``claims``."""
    pairs = pairs_by_seed(runs, SCREEN_BASELINE, spec, whole=True)
    screened = spec["pruning"].get("screen", {}).get("stages", "none") != "none"
    if not pairs or not screened:
        return []
    rows, ratios, costs, pooled = [], [], [], {}
    for seed, grpo, run in pairs:
        informative = 1 - comparable(run.zero_advantage_fraction)
        ratio = informative / max(1e-9, 1 - comparable(grpo.zero_advantage_fraction))
        cost = (run.screen or {}).get("cost_share")  # None: a run from before the screen's cost was recorded
        ratios.append(ratio)
        if cost is not None:
            costs.append(cost)
        for stage, audit in sorted((run.screen or {}).items()):
            if not isinstance(audit, dict):
                continue
            counts = AuditCounts.from_mapping(audit)
            pooled[stage] = pooled.get(stage, AuditCounts()) + counts
            p = counts.precisions()
            rows.append(
                [
                    seed,
                    title,
                    f"{informative:.3f}",
                    f"{ratio:.2f}×",
                    fmt(cost),
                    stage,
                    counts.audited,
                    f"{fmt(p['screen'])} / {fmt(p['random'])} / {fmt(p['oracle'])}",
                ]
            )
    ratio = sum(ratios) / len(ratios)
    cost = sum(costs) / len(costs) if costs else None
    claims.append(
        Claim(
            "screen",
            f"Group screening, {title}: informative groups at the update {ratio:.2f}× GRPO's share, the "
            f"screen costing {fmt(cost)} of the step"
            + (f" ({len(costs)} of {len(pairs)} runs recorded it)" if len(costs) < len(pairs) else "")
            + f", over {len(pairs)} seed(s)",
            targets=(
                (
                    INFORMATIVE,
                    ratio >= SCREEN_GOALS["informative"] and cost is not None and cost <= SCREEN_GOALS["cost"],
                ),
            ),
            here="" if title in SCREEN_PILOTS else f"{title}: informative groups {ratio:.2f}× GRPO's",
        )
    )
    for stage, counts in pooled.items():
        p = counts.precisions()
        claims.append(
            Claim(
                "screen",
                f"Screen audit, {title}, {stage} stage: of the audited groups it dropped {fmt(p['screen'])} had "
                f"zero advantage, against {fmt(p['random'])} for a random drop and {fmt(p['oracle'])} for an oracle "
                f"dropping the same share ({counts.audited} audited groups over the seeds; progress "
                f"{fmt(p['progress'], '.2f')})",
                targets=((AUDIT, p["progress"] >= SCREEN_GOALS["progress"]),),
            )
        )
    return rows
