"""The probe's Markdown tables, from what ``grad_probe.json`` holds: every subset's measures, and the paired
differences to a baseline (random κG, the count-matched κG and the cost-matched G' without pruning) with the mark
of a difference beyond t₀.₉₇₅·SE and the smallest difference the batches could detect at 80 % power."""

from __future__ import annotations

from typing import Any

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.core.metrics import min_detectable_effect, t_quantile

MEASURES = (
    ("cosine", "cosine to reference"),
    ("margin_unit", "Δ margin, unit SGD step"),
    ("margin_adamw", "Δ margin, AdamW step"),
)
"""The measures of a subset's update (key in the JSON, column title); the margins only where the probe measured
them."""
RULE_TITLES = {
    "global": "Eq. 2 (global δ)",
    "group": "per-group target",
    "spread": "spread (ranks only)",
    "anchored": "anchored",
}
SCORER_TITLES = {"head": "learned head"}


def measures(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The :data:`MEASURES` this probe recorded."""
    first = next(iter(summary["subsets"].values()))
    return [(key, title) for key, title in MEASURES if key in first]


def fresh_controls(settings: dict[str, Any]) -> bool:
    """Whether a probe's record gave its controls rollouts of their own (``controls=fresh``; a record from before the
    setting always did)."""
    return settings.get("controls", "fresh") == "fresh"


def kappa_of(summary: dict[str, Any], key: str) -> float:
    """The κ a subset was chosen at (``@<κ>`` in its key, else the probe's ``keep_ratio``)."""
    return float(key.split("@")[1]) if "@" in key else summary["settings"]["keep_ratio"]


def subset_title(summary: dict[str, Any], key: str) -> str:
    """A subset's name in the tables: ``all 8``, ``random 4 (survival κ)``, ``G' = 5.3 unpruned (cost-matched)``,
    ``anchored (default) · oracle AUC 0.9``, with ``, κ = 0.25`` where the probe read several κ."""
    s = summary["settings"]
    base, _, at = key.partition("@")
    kappa = kappa_of(summary, key)
    several = bool(s.get("extra_keep_ratios"))
    cost = summary["costs"]["by_kappa"][f"{kappa:g}"]
    fixed = {
        "all": f"all {s['group_size']}",
        "random": f"random {cost['count_matched']} (survival κ)",
        "fresh_count": f"κG = {cost['count_matched']} unpruned (count-matched)",
        "fresh_cost": f"G' = {cost['cost_matched']:.1f} unpruned (cost-matched)",
        "reference": f"reference ({s['reference_rollouts']})",
    }
    if base in fixed:
        title = fixed[base]
    else:
        rule, scorer = base.split("/")
        default = " (default)" if rule == summary["default_rule"] else ""
        scorer_title = SCORER_TITLES.get(scorer) or f"oracle AUC {scorer.removeprefix('oracle_')}"
        title = f"{RULE_TITLES.get(rule, rule)}{default} · {scorer_title}"
    return title + (f", κ = {kappa:g}" if several and base not in ("all", "reference") else "")


def estimate(value: dict[str, float] | None, spec: str) -> str:
    """``mean ± se`` of a ``{"mean", "se"}`` entry (n/a where undefined)."""
    if value is None or value.get("mean") is None:
        return "n/a"
    return f"{fmt(value['mean'], '+' + spec)} ± {fmt(value['se'], spec)}"


def margin_spec(summary: dict[str, Any]) -> str:
    """One format for every margin change of a run: three significant digits of its largest."""
    largest = max(
        (abs((v.get("margin_unit") or {}).get("mean") or 0.0) for v in summary["subsets"].values()), default=0.0
    )
    digits = 3 if largest == 0 else max(0, 2 - int(f"{largest:e}".split("e")[1]))
    return f".{digits}f"


def spec_of(summary: dict[str, Any], measure: str) -> str:
    return margin_spec(summary) if measure.startswith("margin") else ".3f"


def subset_table(summary: dict[str, Any]) -> str:
    """One row per subset: cosine to the reference gradient and the margin changes (± SE over batches), what it
    decoded (rollouts of mean length per prompt), the kept share, the kept positive ratio and the zero-advantage
    share."""
    shown = measures(summary)
    rows = []
    for key, s in summary["subsets"].items():
        rows.append(
            [
                subset_title(summary, key),
                *(estimate(s[m], spec_of(summary, m)) for m, _ in shown),
                fmt(s["cost"]["mean"], ".2f"),
                fmt(s["kept_share"]["mean"], ".2f"),
                fmt(s["positive_ratio"]["mean"], ".2f"),
                fmt(s["zero_advantage"]["mean"], ".2f"),
            ]
        )
    lines = table_lines(
        [
            "subset",
            *(title + " ± SE" for _, title in shown),
            "decoded (rollouts)",
            "kept share",
            "kept positive ratio",
            "zero-advantage share",
        ],
        rows,
    )
    aligned, batches = summary["subsets"]["reference"]["cosine"]["n"], summary["settings"]["measured_batches"]
    if aligned < batches:
        lines.append(
            f"\nThe cosines, and their paired differences, are over {aligned} of the {batches} batches: in "
            "the others every reference group had one outcome, so there was no reference gradient to align "
            "with."
        )
    return "\n".join(lines)


def beyond_noise(diff: dict[str, float]) -> bool:
    """Whether a paired difference exceeds t₀.₉₇₅(df)·SE in size."""
    mean, se = diff.get("mean"), diff.get("se")
    return mean is not None and se is not None and diff["df"] >= 1 and abs(mean) > t_quantile(0.975, diff["df"]) * se


def detectable(diff: dict[str, float]) -> float | None:
    """The smallest difference the batches detect at 80 % power and two-sided α = 0.05 (None: no standard error)."""
    se = diff.get("se")
    return None if se is None or diff["df"] < 1 else min_detectable_effect(se, diff["df"])


def difference_table(summary: dict[str, Any], baseline: str) -> str:
    """Each subset minus ``baseline`` (:data:`~.run.BASELINES`) at its own κ, paired by batch: mean ± SE per measure,
    ``*`` where beyond t₀.₉₇₅(df)·SE, and the cosine's minimum detectable difference."""
    shown = measures(summary)
    rows = []
    for key, diffs in summary["differences"][baseline].items():
        cells = [estimate(diffs[m], spec_of(summary, m)) + (" *" if beyond_noise(diffs[m]) else "") for m, _ in shown]
        mde = detectable(diffs["cosine"])
        rows.append([subset_title(summary, key), *cells, "n/a" if mde is None else f"±{mde:.3f}"])
    df = summary["subsets"]["all"]["cosine"]["n"] - 1
    titles = {
        "random": "random κG",
        "fresh_count": "κG unpruned (count-matched)",
        "fresh_cost": "G' unpruned (cost-matched)",
    }
    head = (
        f"subset − {titles[baseline]} at its κ (paired by batch, df {df}: * beyond t = "
        f"{t_quantile(0.975, max(df, 1)):.2f} SE)"
    )
    return "\n".join(table_lines([head, *(title for _, title in shown), "cosine: detectable at 80 % power"], rows))
