"""The results page's section on the gradient probe (beyond the paper): on identical rollouts, what choosing which of
a group's rollouts to train on does to the policy update (``arrol grad-probe``), one table per policy, then the
headline: the default survival rule reading a perfect oracle (and the learned head) against random κG.

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
from arrol_pl.analysis.grad_probe.tables import (MEASURES, beyond_noise, estimate, margin_spec, subset_table,
                                                 subset_title)
from arrol_pl.core.metrics import t_quantile

from .common import Claim, load_json

HEADING = "## 14. Does choosing the survivors improve the update? The gradient probe (beyond the paper)"
RUN_HINT = ("`python experiments/reproduce.py --only grad_probe page` (the tiny policy and SmolLM2, about 35 min on 2 "
            "cores)")
"""How to run the probes: ``reproduce.py``'s ``grad_probe`` part holds both commands."""
HEADLINE_SCORERS = ("oracle_1", "head")
"""The scorers the headline reads with the default rule: a perfect oracle (what choosing can do at best), the head."""


def probes(root: Path) -> dict[str, dict[str, Any]]:
    """Each policy's ``grad_probe.json`` under ``root / "grad_probe"``, by policy (directory) name."""
    part = root / "grad_probe"
    found = sorted(part.glob("*/grad_probe.json")) if part.is_dir() else []
    return {path.parent.name: load_json(path) for path in found}


def setup_line(result: dict[str, Any]) -> str:
    """What one probe measured on: policy, batches, rollouts, the scorers' AUCs, the held-out margin."""
    s, m = result["settings"], result["margin"]
    aucs = ", ".join(f"{name.replace('_', ' ')} {q['auc']:.2f} / {q['within_auc']:.2f}"
                     for name, q in result["scorers"].items() if q["auc"] is not None and q["within_auc"] is not None)
    return (f"`{result['command']}`: {s['batches']} batches × {s['prompts_per_batch']} prompts, each with "
            f"G = {s['group_size']} + κG = {s['fresh_size']} + R = {s['reference_rollouts']} rollouts (accuracy "
            f"{result['rollouts']['batches']['accuracy']:.2f}), L_detect = {s['detect_length']}; the scorers' AUC "
            f"pooled / within groups on the batches' groups: {aucs}; the margin read on {m['rollouts']} rollouts of "
            f"{m['problems']} held-out problems with both outcomes; SGD lr {s['sgd_lr']:g}, AdamW lr "
            f"{s['adamw_lr']:g}.")


def headline_rows(policy: str, result: dict[str, Any]) -> list[list[str]]:
    """Per headline subset and measure: its difference to random κG ± SE, the t₀.₉₇₅·SE it must exceed, the verdict."""
    spec = margin_spec(result)
    rows = []
    for scorer in HEADLINE_SCORERS:
        key = f"{result['default_rule']}/{scorer}"
        diffs = result["differences"]["random"].get(key)
        if diffs is None:
            continue
        for measure, title in MEASURES:
            d, digits = diffs[measure], spec if measure.startswith("margin") else ".3f"
            bound = "n/a" if d["se"] is None else format(t_quantile(0.975, d["df"]) * d["se"], digits)
            rows.append([policy, subset_title(result, key), title, estimate(d, digits), bound,
                         "**beyond noise**" if beyond_noise(d) else "within noise"])
    return rows


def section_grad_probe(root: Path) -> tuple[list[str], list[Claim]]:
    """The section: how to read the probe, a table per policy, and the headline against random κG."""
    found = probes(root)
    if not found:
        return [HEADING, "", f"Not run (`grad_probe/` holds no `grad_probe.json`): {RUN_HINT}."], []
    lines = [HEADING, "",
             "Does choosing which of a group's rollouts to train on improve the update at all? On identical rollouts "
             "and at the policy that sampled them, the GRPO gradient of each subset of a prompt's group (ratio 1, no "
             "KL, advantages over the subset's own rewards, summed over a batch of prompts) is compared with a "
             "reference gradient over R further rollouts of the same prompts, shared with no subset (the cosine), and "
             "one step of it is scored by the change in the held-out margin: the mean per-token log-prob of right "
             "answers minus that of wrong answers to the same held-out problem, after a plain SGD step and after "
             "AdamW's first update (≈ lr·sign(g)). The survivors are the trainer's own decisions (floor of 2, "
             "rollouts that finished before L_detect kept); random κG prunes with survival κ, fresh κG is the "
             "cost-matched control (as many rollouts, none of the group's). Means ± SE are over batches; every "
             "comparison is paired by batch.", ""]
    for policy, result in found.items():
        lines += [f"### {policy}", "", setup_line(result), "", subset_table(result), ""]
    lines += ["### Headline: the default rule against random κG", "",
              *table_lines(["policy", "subset", "measure", "difference to random κG ± SE", "t₀.₉₇₅·SE", "verdict"],
                           [row for policy, result in found.items() for row in headline_rows(policy, result)])]
    return lines, []
