"""The probe's Markdown tables, from what ``grad_probe.json`` holds: every subset's measures, and the paired
differences to a baseline subset (random κG, fresh κG) with the mark of a difference beyond t₀.₉₇₅·SE."""

from __future__ import annotations

from typing import Any

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.core.metrics import t_quantile

MEASURES = (("cosine", "cosine to reference"), ("margin_sgd", "Δ margin, SGD step"),
            ("margin_adamw", "Δ margin, AdamW step"))
"""The measures of a subset's update (key in the JSON, column title)."""
RULE_TITLES = {"global": "Eq. 2 (global δ)", "group": "per-group target", "spread": "spread (ranks only)"}
SCORER_TITLES = {"head": "learned head"}


def subset_title(summary: dict[str, Any], key: str) -> str:
    """A subset's name in the tables: ``all 8``, ``random 4``, ``per-group target (default) · oracle AUC 0.9``, …"""
    s = summary["settings"]
    fixed = {"all": f"all {s['group_size']}", "random": f"random {s['fresh_size']} (survival κ)",
             "fresh": f"fresh {s['fresh_size']} (other rollouts)",
             "reference": f"reference ({s['reference_rollouts']})"}
    if key in fixed:
        return fixed[key]
    rule, scorer = key.split("/")
    default = " (default)" if rule == summary["default_rule"] else ""
    scorer_title = SCORER_TITLES.get(scorer) or f"oracle AUC {scorer.removeprefix('oracle_')}"
    return f"{RULE_TITLES.get(rule, rule)}{default} · {scorer_title}"


def estimate(value: dict[str, float] | None, spec: str) -> str:
    """``mean ± se`` of a ``{"mean", "se"}`` entry (n/a where undefined)."""
    if value is None or value.get("mean") is None:
        return "n/a"
    return f"{fmt(value['mean'], '+' + spec)} ± {fmt(value['se'], spec)}"


def margin_spec(summary: dict[str, Any]) -> str:
    """One format for every margin change of a run: three significant digits of its largest."""
    largest = max((abs(v["margin_sgd"]["mean"] or 0.0) for v in summary["subsets"].values()), default=0.0)
    digits = 3 if largest == 0 else max(0, 2 - int(f"{largest:e}".split("e")[1]))
    return f".{digits}f"


def subset_table(summary: dict[str, Any]) -> str:
    """One row per subset: cosine to the reference gradient and the margin changes (± SE over batches), the kept
    share, the kept positive ratio and the zero-advantage share."""
    spec = margin_spec(summary)
    rows = []
    for key, s in summary["subsets"].items():
        rows.append([subset_title(summary, key), estimate(s["cosine"], ".3f"), estimate(s["margin_sgd"], spec),
                     estimate(s["margin_adamw"], spec), fmt(s["kept_share"]["mean"], ".2f"),
                     fmt(s["positive_ratio"]["mean"], ".2f"), fmt(s["zero_advantage"]["mean"], ".2f")])
    lines = table_lines(["subset", *(title + " ± SE" for _, title in MEASURES), "kept share",
                         "kept positive ratio", "zero-advantage share"], rows)
    aligned, batches = summary["subsets"]["reference"]["cosine"]["n"], summary["settings"]["batches"]
    if aligned < batches:
        lines.append(f"\nThe cosines, and their paired differences, are over {aligned} of the {batches} batches: in "
                     "the others every reference group had one outcome, so there was no reference gradient to align "
                     "with.")
    return "\n".join(lines)


def beyond_noise(diff: dict[str, float]) -> bool:
    """Whether a paired difference exceeds t₀.₉₇₅(df)·SE in size."""
    mean, se = diff.get("mean"), diff.get("se")
    return mean is not None and se is not None and abs(mean) > t_quantile(0.975, diff["df"]) * se


def difference_table(summary: dict[str, Any], baseline: str) -> str:
    """Each subset minus ``baseline`` (a subset key), paired by batch: mean ± SE per measure, ``*`` where beyond
    t₀.₉₇₅(df)·SE."""
    spec = margin_spec(summary)
    rows = []
    for key, diffs in summary["differences"][baseline].items():
        cells = [estimate(diffs[m], ".3f" if m == "cosine" else spec) + (" *" if beyond_noise(diffs[m]) else "")
                 for m, _ in MEASURES]
        rows.append([subset_title(summary, key), *cells])
    df = summary["settings"]["batches"] - 1
    return "\n".join(table_lines([f"subset − {subset_title(summary, baseline)} (paired by batch, df {df}: * beyond "
                                  f"t = {t_quantile(0.975, df):.2f} SE)", *(title for _, title in MEASURES)], rows))
