"""The results page's section on the gradient probe (beyond the paper): on identical rollouts, what choosing which of
a group's rollouts to train on does to the policy update (``arrol grad-probe``), one table per policy, then the
headline: the default survival rule reading a perfect oracle (and the learned head) against the cost-matched control
(G' without pruning) and random κG.

Decisions:
- **One probe per policy**: ``<root>/grad_probe/<policy>/grad_probe.json``, in name order; none is "Not run".
- **Judged on the 95 % t interval**: a paired difference is beyond noise when its size exceeds t₀.₉₇₅(df)·SE, df the
  batches less one (:func:`~arrol_pl.analysis.grad_probe.tables.beyond_noise`).
- **No claims**: the question is the project's, not a claim of the paper's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arrol_pl.analysis.formatting import table_lines
from arrol_pl.analysis.grad_probe.tables import (
    beyond_noise,
    detectable,
    difference_table,
    estimate,
    fresh_controls,
    measures,
    spec_of,
    subset_table,
    subset_title,
)
from arrol_pl.core.metrics import t_quantile

from .common import Claim, load_json

HEADING = "## 14. Does choosing the survivors improve the update? The gradient probe (beyond the paper)"
RUN_HINT = (
    "`python experiments/reproduce.py --only grad_probe page` (the tiny policy and SmolLM2, about 50 min on 2 cores)"
)
"""How to run the probes: ``reproduce.py``'s ``grad_probe`` part holds both commands."""
HEADLINE_SCORERS = ("oracle_1", "head")
"""The scorers the headline reads with the default rule: a perfect oracle (what choosing can do at best), the head."""
HEADLINE_BASELINES = (("fresh_cost", "G' unpruned (cost-matched)"), ("random", "random κG"))
"""What the headline compares the default rule with: the control that costs the same generation first."""


def probes(root: Path) -> dict[str, dict[str, Any]]:
    """Each policy's ``grad_probe.json`` under ``root / "grad_probe"``, by policy (directory) name."""
    part = root / "grad_probe"
    found = sorted(part.glob("*/grad_probe.json")) if part.is_dir() else []
    return {path.parent.name: load_json(path) for path in found}


def setup_line(result: dict[str, Any]) -> str:
    """What one probe measured on: policy, batches, rollouts, the scorers' AUCs, the costs, the held-out margin."""
    s, m, c = result["settings"], result["margin"], result["costs"]
    aucs = ", ".join(
        f"{name.replace('_', ' ')} {q['auc']:.2f} / {q['within_auc']:.2f}"
        for name, q in result["scorers"].items()
        if q["auc"] is not None and q["within_auc"] is not None
    )
    costs = "; ".join(
        f"κ = {k}: κG = {v['count_matched']}, G' = {v['cost_matched']:.2f}" for k, v in c["by_kappa"].items()
    )
    controls = f"{s['group_size']} for the controls + " if fresh_controls(s) else ""
    margin = (
        ""
        if m is None
        else f"; the margin read on {m['rollouts']} rollouts of {m['problems']} held-out "
        f"problems with both outcomes; unit SGD step {s['sgd_step']:g}, AdamW lr {s['adamw_lr']:g}"
    )
    return (
        f"`{result['command']}`: {s['measured_batches']} batches × {s['prompts_per_batch']} prompts, each with "
        f"G = {s['group_size']} + {controls}R = {s['reference_rollouts']} rollouts (accuracy "
        f"{result['rollouts']['batches']['accuracy']:.2f}), L_detect = {s['detect_length']} against a mean "
        f"length of {c['mean_length']:.1f} tokens ({costs}); the scorers' AUC pooled / within groups on all the "
        f"batches' group rollouts: {aucs}{margin}."
    )


def verdict_text(d: dict[str, float], digits: str) -> str:
    """Beyond the 95 % t interval (ahead or behind), else not detectable at the batches' 80 %-power effect."""
    if beyond_noise(d):
        return f"**{'ahead' if d['mean'] > 0 else 'behind'}** beyond its interval"
    mde = detectable(d)
    return "n/a" if mde is None else f"not detectable at ±{format(mde, digits)} (80 % power)"


def headline_rows(policy: str, result: dict[str, Any]) -> list[list[str]]:
    """Per headline subset, baseline and measure: the difference ± SE, the t₀.₉₇₅·SE it must exceed, the verdict."""
    rows = []
    for scorer in HEADLINE_SCORERS:
        key = f"{result['default_rule']}/{scorer}"
        for baseline, title in HEADLINE_BASELINES:
            diffs = result["differences"][baseline].get(key)
            if diffs is None:
                continue
            for measure, name in measures(result):
                d, digits = diffs[measure], spec_of(result, measure)
                bound = "n/a" if d["se"] is None else format(t_quantile(0.975, max(d["df"], 1)) * d["se"], digits)
                rows.append(
                    [
                        policy,
                        subset_title(result, key),
                        title,
                        name,
                        estimate(d, digits),
                        bound,
                        verdict_text(d, digits),
                    ]
                )
    return rows


def section_grad_probe(root: Path) -> tuple[list[str], list[Claim]]:
    """The section: how to read the probe, a table per policy, and the headline against the cost-matched control
    and random κG."""
    found = probes(root)
    if not found:
        return [HEADING, "", f"Not run (`grad_probe/` holds no `grad_probe.json`): {RUN_HINT}."], []
    lines = [
        HEADING,
        "",
        "Does choosing which of a group's rollouts to train on improve the update at all, and by more than "
        "spending the same generation on fewer, unpruned rollouts? On identical rollouts and at the policy that "
        "sampled them, the GRPO gradient of each subset of a prompt's group (ratio 1, no KL, advantages over the "
        "subset's own rewards, summed over a batch of prompts) is compared with a reference gradient over R "
        "further rollouts of the same prompts, shared with no subset (the cosine), and one step of it is scored "
        "by the change in the held-out margin: the mean per-token log-prob of right answers minus that of wrong "
        "answers to the same held-out problem, after a plain SGD step of fixed length along the unit gradient "
        "and after AdamW's first update (≈ lr·sign(g)). The survivors are the trainer's own decisions (floor of "
        "2, rollouts that finished before L_detect kept); random κG prunes with survival κ. Two controls train "
        "without pruning, on the first rollouts of the same group (sampled alike, so distributed as rollouts "
        "sampled for the control alone, and paired with the rules on the same draws; a probe recorded with "
        "`controls=fresh` gave them G of their own): the cost-matched G' decodes as many tokens as pruning does "
        "(survivors whole, pruned rollouts up to L_detect), the count-matched κG trains on as many rollouts as "
        "κ keeps. Means ± SE are over batches; every comparison is paired by batch; a difference inside its "
        "95 % t interval is stated with the smallest difference the batches detect at 80 % power.",
        "",
    ]
    for policy, result in found.items():
        lines += [
            f"### {policy}",
            "",
            setup_line(result),
            "",
            subset_table(result),
            "",
            difference_table(result, "fresh_cost"),
            "",
        ]
    lines += [
        "### Headline: the default rule against the cost-matched control and random κG",
        "",
        *table_lines(
            ["policy", "subset", "against", "measure", "difference ± SE", "t₀.₉₇₅·SE", "verdict"],
            [row for policy, result in found.items() for row in headline_rows(policy, result)],
        ),
    ]
    return lines, []
