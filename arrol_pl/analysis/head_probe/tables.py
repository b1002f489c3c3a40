"""The probe's Markdown tables: per detection length, head inputs side by side, the pruning replay and the votes."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.head_probe.lengths import LengthResult
from arrol_pl.analysis.head_probe.replay import VOTE_RULES


def votes_table(votes: dict[str, dict[str, float]]) -> str:
    """Markdown: each rule's vote accuracy (± standard error) and its paired difference to majority and DeepConf."""
    k, n = int(votes["problems"]["k"]), int(votes["problems"]["n"])
    rows = []
    titles = (*VOTE_RULES.items(), ("avg", "mean sample accuracy (avg@k)"), ("pass", "any sample correct (pass@k)"))
    for rule, title in titles:
        v = votes[rule]
        cells = [title, f"{v['accuracy']:.3f} ± {v['accuracy_se']:.3f}"]
        for base in ("majority", "deepconf"):
            cells.append(
                "" if rule == base or f"vs_{base}" not in v else f"{v[f'vs_{base}']:+.3f} ± {v[f'vs_{base}_se']:.3f}"
            )
        rows.append(cells)
    return (
        "\n".join(table_lines([f"rule (k = {k}, {n} test problems)", "accuracy", "vs majority", "vs DeepConf"], rows))
        + "\n"
    )


METRIC_COLUMNS = (
    ("pos. rate", "positive_rate"),
    ("head ρ", "head_spearman"),
    ("head AUC", "head_auc"),
    ("head AUC within groups", "head_within_auc"),
    ("head acc.", "head_accuracy"),
    ("majority acc.", "majority_accuracy"),
    ("head ECE", "head_ece"),
    ("DeepConf ρ", "deepconf_spearman"),
    ("DeepConf AUC", "deepconf_auc"),
    ("DeepConf AUC within groups", "deepconf_within_auc"),
)
"""Column title → :class:`LengthResult` field, after the L and n columns of :func:`markdown_table`. The AUC within
groups is what pruning acts on (and what the break-even curve of the results page reads); n/a without groups."""


def markdown_table(results: Sequence[LengthResult]) -> str:
    """One row per detection length: the head against DeepConf (Spearman with correctness, AUC), accuracy, ECE."""
    rows = []
    for r in results:
        length = str(r.detect_length)
        if r.fraction is not None:
            length += f" ({Fraction(r.fraction).limit_denominator(1024)})"
        rows.append(
            [length, f"{r.n_train}/{r.n_test}", *(fmt(getattr(r, key), finite=True) for _, key in METRIC_COLUMNS)]
        )
    return "\n".join(table_lines(["L", "n train/test", *(title for title, _ in METRIC_COLUMNS)], rows))


def inputs_table(by_kind: dict[str, Sequence[LengthResult]]) -> str:
    """Head inputs side by side: per input and L, the head's Spearman, AUC and within-group AUC, DeepConf's beside."""
    rows = [
        [
            kind,
            r.detect_length,
            *(
                fmt(v, finite=True)
                for v in (
                    r.head_spearman,
                    r.head_auc,
                    r.head_within_auc,
                    r.deepconf_spearman,
                    r.deepconf_auc,
                    r.deepconf_within_auc,
                )
            ),
        ]
        for kind, results in by_kind.items()
        for r in results
    ]
    return "\n".join(
        table_lines(
            [
                "input",
                "L",
                "head ρ",
                "head AUC",
                "head AUC within groups",
                "DeepConf ρ",
                "DeepConf AUC",
                "DeepConf AUC within groups",
            ],
            rows,
        )
    )


BALANCE_TITLES = {
    "arrol_anchored": "ARRoL, anchored (default)",
    "arrol_global": "ARRoL, global δ (Eq. 2)",
    "arrol_group": "ARRoL, per-group target",
    "arrol_spread": "ARRoL, spread (ranks only)",
    "random": "random",
    "none": "no pruning",
}


def balance_table(results: Sequence[LengthResult]) -> str:
    """:func:`~arrol_pl.analysis.head_probe.replay.replay_balance` per L: E[ρ̂], E[ρ̂(1−ρ̂)], zero-advantage groups and
    keep ratio (± standard error over groups), and ARRoL's paired difference to random in zero-advantage groups."""
    rows = []
    for r in results:
        for arm, title in BALANCE_TITLES.items():
            b = r.balance.get(arm)
            if b is None:
                continue
            vs = (
                f"{b['zero_adv_vs_random']:+.3f} ± {b['zero_adv_vs_random_se']:.3f}"
                if "zero_adv_vs_random" in b
                else ""
            )
            rows.append(
                [
                    r.detect_length,
                    title,
                    *(
                        f"{fmt(b[k], finite=True)} ± {fmt(b[k + '_se'], finite=True)}"
                        for k in ("rho", "balance", "zero_adv", "keep")
                    ),
                    vs,
                ]
            )
    return "\n".join(
        table_lines(["L", "rule", "E[ρ̂]", "E[ρ̂(1−ρ̂)]", "zero-advantage groups", "keep", "zero-adv. vs random"], rows)
    )
