"""Section 13's check of the advice against training (beyond the paper): does ``arrol advise``, run on the study's own
setting (``+exp=pruning_pays``, its record under ``pruning_pays_advice/``), judge the scorers as the equal-time
training runs of the sweep do?

Decisions:
- **Like against like.** The probe's cosine of the default rule reading a scorer minus that of the cost-matched G'
  (the run without pruning that decodes what pruning does) is set beside the training runs' held-out accuracy minus
  GRPO G = 4's at equal training time (the sweep's run without pruning of about that cost: G = 4 decodes a little
  less than G'). Random pruning likewise. The units differ (a cosine, an accuracy), so only what each side decides
  is compared: its sign, whether its 95 % t interval excludes 0, and the order of the oracle ladder.
- **Agreement, in three words.** A row *agrees* when both sides stand the same way beyond their intervals (ahead,
  behind, or neither distinguishable from 0); *signs agree* when their standings differ but their means share a
  sign; *disagrees* otherwise (opposite signs, one side beyond its interval). Two nulls agree without testing
  anything: the text counts them apart.
- **Random pruning's row** pairs its batches with the cost-matched G''s, as the probe pairs every rule (the probe
  records no difference of one baseline to another).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from arrol_pl.analysis.formatting import table_lines
from arrol_pl.analysis.grad_probe.measures import paired_difference
from arrol_pl.analysis.grad_probe.tables import beyond_noise, detectable
from arrol_pl.analysis.runs import PairedDifference

from .common import load_json
from .study_arms import CONTROL, Arm, named, versus

ADVICE = "pruning_pays_advice"
"""Where the sweep's results directory holds the advice on its setting (``advice.json``, ``grad_probe.json``)."""
COMMAND = "python experiments/reproduce.py --only pruning_pays page"
"""Runs the sweep, then the advice on its setting (``reproduce.py``'s ``PRUNING_PAYS_ADVICE``)."""


def cosine_versus_cost_matched(probe: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The probe's paired difference of subset ``key``'s cosine minus the cost-matched G''s (None: not probed); a
    baseline's own (random κG) paired from the batches' values, as the probe pairs every other."""
    recorded = probe["differences"]["fresh_cost"].get(key, {}).get("cosine")
    subsets = probe.get("subsets", {})
    if recorded is not None or key not in subsets or "fresh_cost" not in subsets:
        return recorded
    return paired_difference(subsets[key]["per_batch"]["cosine"], subsets["fresh_cost"]["per_batch"]["cosine"])


def probe_standing(d: dict[str, Any]) -> str:
    """ahead / behind beyond the probe's 95 % t interval, else undetected."""
    return ("ahead" if d["mean"] > 0 else "behind") if beyond_noise(d) else "undetected"


def training_standing(d: PairedDifference) -> str:
    """ahead / behind beyond the seeds' 95 % t interval, else undetected."""
    return "ahead" if d.estimate.ahead else "behind" if d.estimate.behind else "undetected"


def agreement(probe: dict[str, Any], probe_side: str, train: PairedDifference, train_side: str) -> str:
    """How the two sides' decisions compare (module docstring)."""
    if probe_side == train_side:
        return "agree" + (" (both nulls)" if probe_side == "undetected" else "")
    return "signs agree" if probe["mean"] * train.mean > 0 else "**disagrees**"


def side_cell(mean: float, se: float, standing: str, mde: float | None, digits: str = ".3f") -> str:
    """A side's difference ± SE and what its interval decides."""
    said = (
        f"**{standing}**"
        if standing != "undetected"
        else "not distinguishable" + ("" if mde is None else f" (could detect ±{mde:{digits}})")
    )
    return f"{mean:+{digits}} ± {se:{digits}}: {said}"


def rows_of(advice_probe: dict[str, Any], arms: Sequence[Arm]) -> list[tuple[str, float | None, Arm]]:
    """The scorers both sides measured: (probe subset key, the probe's AUC within groups, the training arm)."""
    rule, scorers = advice_probe["default_rule"], advice_probe["scorers"]
    out = []
    for name, quality in scorers.items():
        if name.startswith("oracle_"):
            auc = float(name.removeprefix("oracle_"))
            arm = next((a for a in arms if a.oracle_auc == auc and a.default_rule), None)
        else:
            arm = named(arms, "arrol")
        if arm is not None:
            out.append((f"{rule}/{name}", quality.get("within_auc"), arm))
    out.sort(key=lambda row: -(row[2].oracle_auc or 0))
    if (random := named(arms, "random")) is not None:
        out.append(("random", None, random))
    return out


def probe_ladder_part(root: Path, arms: Sequence[Arm]) -> list[str]:
    """The subsection: the advice's verdict on the study's setting, then per scorer the probe against the training
    runs, the oracle ladder's order on both sides and where they disagree."""
    advice, probe = load_json(root / ADVICE / "advice.json"), load_json(root / ADVICE / "grad_probe.json")
    lines = ["", "### The advice against the training runs", ""]
    control = named(arms, CONTROL)
    if advice is None or probe is None or control is None:
        return lines + [f"Not run (`{ADVICE}/` holds no advice, or the sweep has no `arm={CONTROL}`): `{COMMAND}`."]
    g = probe["costs"]["by_kappa"][f"{probe['settings']['keep_ratio']:g}"]["cost_matched"]
    lines.append(
        f"`{advice['command']}` on the study's setting ({probe['settings']['measured_batches']} batches): "
        f'"{advice["verdict_line"]}" The probe\'s cosine to the reference gradient of the default rule '
        f"reading each scorer minus that of G' = {g:.2f} rollouts without pruning (what pruning decodes), "
        f"beside the training runs' held-out accuracy minus GRPO G = {CONTROL.removeprefix('grpo_g')}'s at "
        "equal training time; each judged on its own 95 % t interval (over batches; over seeds)."
    )
    measured = [
        (arm, auc, p, t)
        for key, auc, arm in rows_of(probe, arms)
        if (p := cosine_versus_cost_matched(probe, key)) is not None
        and p.get("mean") is not None
        and (t := versus(arm, control)) is not None
    ]
    table, verdicts = [], []
    for arm, auc, p, t in measured:
        ps, ts = probe_standing(p), training_standing(t)
        verdicts.append((arm, agreement(p, ps, t, ts)))
        table.append(
            [
                f"`{arm.label}`",
                "n/a" if auc is None else f"{auc:.3f}",
                side_cell(p["mean"], p["se"], ps, detectable(p)),
                side_cell(t.mean, t.se, ts, t.estimate.detectable),
                verdicts[-1][1],
            ]
        )
    lines += [
        "",
        *table_lines(
            [
                "arm",
                "probe's scorer AUC within groups",
                "probe: cosine − G' ± SE",
                f"training: held-out − GRPO G = {CONTROL.removeprefix('grpo_g')} at equal time ± SE",
                "the two",
            ],
            table,
        ),
    ]
    lines.append("")
    lines.append(ladder_order(measured) + " " + summary(verdicts))
    return lines


def ladder_order(measured: Sequence[tuple[Arm, float | None, dict[str, Any], PairedDifference]]) -> str:
    """The oracle ladder's order, highest first, by the probe's mean and by the training runs' mean (``measured``:
    the rows both sides measured, as :func:`probe_ladder_part` pairs them)."""
    points = [(f"{arm.oracle_auc:g}", p["mean"], t.mean) for arm, _, p, t in measured if arm.oracle_auc is not None]
    if len(points) < 2:
        return "The oracle ladder has fewer than two points on both sides."
    by_probe = " > ".join(name for name, _, _ in sorted(points, key=lambda p: -p[1]))
    by_training = " > ".join(name for name, _, _ in sorted(points, key=lambda p: -p[2]))
    same = "the same order" if by_probe == by_training else "different orders"
    return (
        f"The oracle ladder by set AUC, best first: the probe {by_probe}, training {by_training} ({same}; by the "
        "means alone, whether or not they are beyond their intervals)."
    )


def summary(verdicts: Sequence[tuple[Arm, str]]) -> str:
    """Where the two sides stand differently, and how many agreements are two nulls."""

    def listed(word: str) -> str:
        arms = [f"`{arm.label}`" for arm, said in verdicts if said == word]
        return ", ".join(arms) if arms else "none"

    nulls = sum(said == "agree (both nulls)" for _, said in verdicts)
    decided = sum(said == "agree" for _, said in verdicts)
    return (
        f"Opposite signs, one side beyond its interval: {listed('**disagrees**')}. The same sign, one side beyond "
        f"its interval and the other not: {listed('signs agree')}. Of {len(verdicts)} rows, {decided} agree on a "
        f"difference both sides distinguish and {nulls} only in that neither side distinguishes one."
    )
