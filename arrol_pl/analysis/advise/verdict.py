"""The advice itself, from what was measured: per κ probed, the default rule reading the quality head against the
control that costs the same generation (G' rollouts without pruning, :mod:`arrol_pl.analysis.grad_probe.subsets`),
then one verdict.

Decisions:
- **The cost-matched control decides.** Pruning G rollouts to κ spends the generation of G' full ones; if G'
  rollouts without pruning give an update at least as aligned with the reference gradient, pruning buys nothing
  that dropping to G' rollouts would not. The measure is the cosine to the reference gradient, paired by batch.
- **Several κ, one family.** Each κ's comparison is judged on a Bonferroni-corrected two-sided 95 % t interval
  (α = 0.05 / the number of κ, batches − 1 degrees of freedom), and its null is stated with the smallest difference
  detectable at 80 % power at that α.
- **The verdict.** *Prune* at the κ with the largest modelled saving among those ahead of their G' beyond the
  interval. *Don't prune* when none is ahead and either the run's own κ is behind beyond its interval, or the head
  cannot rank a group's rollouts at L_detect: the 95 % interval of its AUC within groups (groups resampled) lies
  below the discrimination gate's threshold (``pruning.gate_auc``, 0.6 when unset). Such a head keeps a subset close
  to a random one, which trains like the count-matched κG, while G' > κG rollouts without pruning cost the same.
  *Don't* means: train G' rollouts per prompt without pruning, which costs what pruning would. Otherwise
  *undecided*, with the batches that would detect a difference of the size measured at the run's κ.
- **Words no stronger than the statistics**: a comparison inside its interval is "not detectable at ±MDE (80 %
  power)", never "no difference".
"""

from __future__ import annotations

import math
from typing import Any

from arrol_pl.analysis.formatting import table_lines
from arrol_pl.analysis.grad_probe.subsets import kappa_key
from arrol_pl.core.metrics import min_detectable_effect, t_quantile

ALPHA = 0.05
POWER = 0.8


def judged(diff: dict[str, Any], comparisons: int) -> dict[str, Any]:
    """A paired difference judged on its Bonferroni-corrected interval: ``standing`` ahead / behind / undetected,
    the interval's half-width and the detectable difference."""
    mean, se, df = diff.get("mean"), diff.get("se"), diff.get("df", 0)
    if mean is None or se is None or df < 1:
        return {"mean": mean, "se": se, "df": df, "standing": "undefined", "margin": None, "detectable": None}
    alpha = ALPHA / comparisons
    margin = t_quantile(1 - alpha / 2, df) * se
    standing = "ahead" if mean > margin else "behind" if mean < -margin else "undetected"
    return {
        "mean": mean,
        "se": se,
        "df": df,
        "standing": standing,
        "margin": margin,
        "detectable": min_detectable_effect(se, df, power=POWER, alpha=alpha),
    }


def candidates(
    probe: dict[str, Any], kappas: list[float], run_kappa: float, saving: dict[float, dict]
) -> list[dict[str, Any]]:
    """Per κ: the default rule reading the head against G' unpruned and random κG (cosine), the perfect oracle
    against G', G', and the modelled saving."""
    rule, out = probe["default_rule"], []
    for kappa in kappas:
        key = kappa_key(f"{rule}/head", kappa, run_kappa)
        oracle = kappa_key(f"{rule}/oracle_1", kappa, run_kappa)
        d = probe["differences"]
        out.append(
            {
                "keep_ratio": kappa,
                "rule": rule,
                "cost_matched": probe["costs"]["by_kappa"][f"{kappa:g}"]["cost_matched"],
                "vs_cost_matched": judged(d["fresh_cost"][key]["cosine"], len(kappas)),
                "vs_random": judged(d["random"][key]["cosine"], len(kappas)),
                "vs_count_matched": judged(d["fresh_count"][key]["cosine"], len(kappas)),
                "oracle_vs_cost_matched": (
                    judged(d["fresh_cost"][oracle]["cosine"], len(kappas)) if oracle in d["fresh_cost"] else None
                ),
                "saving": saving[kappa],
            }
        )
    return out


def batches_to_detect(judgement: dict[str, Any], batches: int) -> int | None:
    """Batches at which a difference of the size measured would be detected at 80 % power (None: a zero or
    undefined one)."""
    mean, detectable = judgement["mean"], judgement["detectable"]
    if not mean or detectable is None:
        return None
    return math.ceil(batches * (detectable / abs(mean)) ** 2)


GATE_AUC = 0.6
"""The AUC within groups below which a head is taken not to rank a group's rollouts when ``pruning.gate_auc`` is
unset (the default experiment's gate)."""


def decide(
    rows: list[dict[str, Any]],
    run_kappa: float,
    detect_length: int,
    batches: int,
    aucs: list[dict[str, Any]],
    gate_auc: float | None = None,
) -> dict[str, Any]:
    """The verdict (module docstring): ``prune``, ``dont`` or ``undecided``, with what it recommends and why."""
    gate = gate_auc if gate_auc is not None else GATE_AUC
    run = next(r for r in rows if r["keep_ratio"] == run_kappa)
    ahead = [r for r in rows if r["vs_cost_matched"]["standing"] == "ahead"]
    best_auc = max((a for a in aucs if a["within_auc"] is not None), key=lambda a: a["within_auc"], default=None)
    at = next((a for a in aucs if a["detect_length"] == detect_length), None)
    auc_here, interval = (at["within_auc"], at["within_interval"]) if at else (None, None)
    why = [
        f"the head's AUC within groups at L_detect = {detect_length}: {_fmt(auc_here, '.2f')}"
        + (
            f" (95 % interval {interval[0]:.2f}–{interval[1]:.2f}, groups resampled)"
            if interval and interval[1] == interval[1]
            else ""
        )
    ]
    if (
        best_auc
        and best_auc["detect_length"] != detect_length
        and auc_here is not None
        and (best_auc["within_auc"] >= max(gate, auc_here + 0.03))
    ):
        why.append(
            f"it ranks better at L = {best_auc['detect_length']} ({best_auc['within_auc']:.2f}): rerun with "
            f"engine.detect_length={best_auc['detect_length']}"
        )
    if ahead:
        pick = max(ahead, key=lambda r: r["saving"]["machine"].get("seconds", r["saving"]["machine"]["steps"]))
        v = pick["vs_cost_matched"]
        why.append(
            f"at κ = {pick['keep_ratio']:g} its update beats G' = {pick['cost_matched']:.1f} rollouts without "
            f"pruning by {v['mean']:+.3f} cosine, beyond ±{v['margin']:.3f}"
        )
        return {
            "verdict": "prune",
            "keep_ratio": pick["keep_ratio"],
            "detect_length": detect_length,
            "rule": pick["rule"],
            "saving": pick["saving"],
            "why": why,
        }
    v, g = run["vs_cost_matched"], run["cost_matched"]
    cannot_rank = bool(interval) and interval[1] == interval[1] and interval[1] < gate
    if v["standing"] == "behind" or cannot_rank:
        if cannot_rank:
            why.append(
                f"the interval lies below {gate:g}, the AUC the discrimination gate asks for: the head cannot "
                f"rank a group's rollouts, so its survivors train like a random κG, while G' = {g:.1f} "
                "rollouts cost what pruning does"
            )
        why.append(
            f"at κ = {run_kappa:g} pruning against G' = {g:.1f} rollouts without pruning: "
            f"{_fmt(v['mean'], '+.3f')} cosine, {_standing(v)}; no κ probed is ahead of its G'"
        )
        oracle = run["oracle_vs_cost_matched"]
        if oracle is not None:
            why.append(f"a perfect scorer against G': {_fmt(oracle['mean'], '+.3f')} cosine ({_standing(oracle)})")
        return {"verdict": "dont", "group_size": max(2, round(g)), "cost_matched": g, "why": why}
    needed = batches_to_detect(v, batches)
    why.append(
        f"at κ = {run_kappa:g} pruning against G' = {run['cost_matched']:.1f}: {_fmt(v['mean'], '+.3f')} "
        f"cosine, {_standing(v)}"
    )
    return {"verdict": "undecided", "batches_needed": needed, "why": why}


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _standing(j: dict[str, Any]) -> str:
    """How a judged difference reads: beyond its interval, or not detectable at its 80 %-power size."""
    if j["standing"] in ("ahead", "behind"):
        return f"{j['standing']} beyond ±{j['margin']:.3f}"
    if j["standing"] == "undefined":
        return "undefined"
    if j["se"] == 0:
        return "the same on every batch" if j["mean"] == 0 else "constant over the batches"
    return f"not detectable at ±{j['detectable']:.3f} (80 % power)"


def verdict_line(decision: dict[str, Any]) -> str:
    """The advice in one line."""
    if decision["verdict"] == "prune":
        m, g = decision["saving"]["machine"], decision["saving"]["gpu"]
        here = f"{m['seconds']:.2f}× generation here" if "seconds" in m else f"{m['steps']:.2f}× engine steps here"
        return (
            f"Prune: κ = {decision['keep_ratio']:g}, L_detect = {decision['detect_length']}, rule "
            f"{decision['rule']}; expected {here}, {g['steps']:.2f}–{g['tokens']:.2f}× on the GPU setting, "
            f"{m['trained']:.2f}× fewer trained tokens."
        )
    if decision["verdict"] == "dont":
        return (
            f"Don't prune: train G = {decision['group_size']} rollouts per prompt without pruning "
            f"(G' = {decision['cost_matched']:.2f} costs what pruning would)."
        )
    more = decision["batches_needed"]
    return "Undecided: " + (
        f"about {more} batches (advise.batches={more}) would detect a difference of the size measured."
        if more
        else "the difference measured is zero or undefined."
    )


def tables(rows: list[dict[str, Any]], aucs: list[dict[str, Any]]) -> list[str]:
    """The AUC table by detection length and the table of κ probed."""

    def interval(a: dict[str, Any]) -> str:
        i = a.get("within_interval")
        return "n/a" if not i or i[0] != i[0] else f"{i[0]:.3f}–{i[1]:.3f}"

    lines = table_lines(
        ["L_detect", "head AUC within groups (all rollouts)", "95 % interval", "pooled AUC", "share reaching L"],
        [
            [
                str(a["detect_length"]),
                _fmt(a["within_auc"], ".3f"),
                interval(a),
                _fmt(a["auc"], ".3f"),
                f"{a['eligible_share']:.0%}",
            ]
            for a in aucs
        ],
    )
    body = []
    for r in rows:
        v, m, g = r["vs_cost_matched"], r["saving"]["machine"], r["saving"]["gpu"]
        body.append(
            [
                f"{r['keep_ratio']:g}",
                r["rule"],
                f"{r['cost_matched']:.2f}",
                f"{_fmt(v['mean'], '+.3f')} ± {_fmt(v['se'], '.3f')}",
                _standing(v),
                f"{_fmt(r['vs_random']['mean'], '+.3f')} ({_standing(r['vs_random'])})",
                f"{m['seconds']:.2f}×" if "seconds" in m else "n/a",
                f"{g['steps']:.2f}–{g['tokens']:.2f}×",
                f"{m['trained']:.2f}×",
            ]
        )
    return [
        *lines,
        "",
        *table_lines(
            [
                "κ",
                "rule",
                "G' (cost-matched)",
                "cosine − G' ± SE",
                "judged (Bonferroni, 95 %)",
                "cosine − random κG",
                "generation here",
                "generation, GPU setting (steps–tokens)",
                "fewer trained tokens",
            ],
            body,
        ),
    ]
