"""The whole gradient probe of ``arrol grad-probe``: rollouts and scorers (:mod:`.rollouts`), the subsets chosen on
every batch's groups (:mod:`.choice`), every subset's gradient and measures per batch; then ``grad_probe.json`` and
the printed tables.

Decisions:
- **Three sets of prompts, disjoint.** Training problems drawn with the seed: the first ``head_prompts`` (G
  rollouts each) fit the scorers' calibrators and the head; the next ``batches × prompts_per_batch`` (G + R
  rollouts each: the group and the reference; G more for the controls with ``controls=fresh``) give the gradients.
  The first ``data.num_heldout`` held-out problems (``heldout_samples`` rollouts each) measure the margin.
- **One policy, unchanged.** Every gradient is taken at the policy that sampled the rollouts; a measured step is
  undone before the next (:func:`~arrol_pl.analysis.grad_probe.gradients.after_step`), and AdamW's weight decay is the
  trainer's (``algo.weight_decay``, 0 by default: the step is the gradient's alone).
- **The subsets are chosen once**, over all the batches' groups, before any gradient: each batch then reads its rows.
- **The margin compares directions.** The plain SGD step moves every subset's policy the same distance
  (``sgd_step``) along its unit gradient, so a subset whose gradient is merely larger does not look better; AdamW's
  first update (≈ lr·sign(g)) is scale-free already.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from arrol_pl.analysis.grad_probe.choice import Choices, Chosen, choose
from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.grad_probe.gradients import after_step, mean_log_probs, subset_gradient
from arrol_pl.analysis.grad_probe.measures import cosine, likelihood_margin, paired_difference, summary
from arrol_pl.analysis.grad_probe.rollouts import Rollouts, policy_directory, sample_rollouts, scorer_quality
from arrol_pl.analysis.grad_probe.subsets import CONTROLS, Parts, balance, decoded_tokens, is_control, subset_rows
from arrol_pl.analysis.grad_probe.tables import difference_table, fresh_controls, subset_table
from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.prompts import PromptFormat
from arrol_pl.train.config.sections import AlgoConfig

BASELINES = ("random", *CONTROLS)
"""The subsets every other is compared with, paired by batch, at the other's κ: random pruning (survival κ), the
count-matched κG and the cost-matched G' without pruning (:mod:`.subsets`)."""
MARGINS = ("margin_unit", "margin_adamw")
"""The held-out margin's changes after a step (measured with ``margin=true``)."""


@dataclass(kw_only=True)
class GradProbeJob:
    """One probe run, resolved: the configuration, the problems loaded and drawn, where it writes."""

    config: GradProbeConfig
    out: Path
    command: str
    """The command line recorded in ``grad_probe.json``."""
    head_problems: list[Problem]
    """Training problems that fit the head and the calibrators."""
    batch_problems: list[Problem]
    """Training problems of the batches, ``batches × prompts_per_batch`` in batch order."""
    heldout_problems: list[Problem]
    prompt_format: PromptFormat
    data: str
    """The ``data=`` preset (recorded)."""


def baseline_of(key: str, kind: str) -> str:
    """The subset of ``kind`` (:data:`BASELINES`) that ``key`` is compared with: the one at its own κ."""
    return kind + (key[key.index("@") :] if "@" in key else "")


class HeldoutMargin:
    """The held-out likelihood margin (:func:`~.measures.likelihood_margin`) of ``model``, read on the held-out
    rollouts of problems that got both outcomes; ``base`` is the policy's own."""

    def __init__(self, model, heldout: Rollouts, temperature: float) -> None:
        self.model, self.temperature = model, temperature
        self.rows: list[int] = []
        for g in torch.unique(heldout.problem).tolist():
            members = torch.nonzero(heldout.problem == g, as_tuple=True)[0].tolist()
            if 0 < float(heldout.correct[members].sum()) < len(members):
                self.rows += members
        self.prompt_ids = [heldout.prompt_ids[i] for i in self.rows]
        self.response_ids = [heldout.response_ids[i] for i in self.rows]
        self.correct, self.problem = heldout.correct[self.rows], heldout.problem[self.rows]
        self.base = self() if self.rows else math.nan

    def __call__(self) -> float:
        logps = mean_log_probs(self.model, self.prompt_ids, self.response_ids, self.problem.tolist(), self.temperature)
        return likelihood_margin(logps, self.correct, self.problem)

    def change(self, params, grad: torch.Tensor, optimizer) -> float:
        """The margin's change after one step of ``optimizer`` on ``grad`` (NaN without a mixed problem)."""
        return after_step(params, grad, optimizer, self) - self.base if self.rows else math.nan

    def record(self) -> dict[str, Any]:
        return {"base": self.base, "problems": len(set(self.problem.tolist())), "rollouts": len(self.rows)}


def unit(grad: torch.Tensor) -> torch.Tensor:
    """``grad`` scaled to norm 1 (a zero gradient stays zero: no step)."""
    norm = grad.double().norm()
    return grad / float(norm) if norm > 0 else grad


def measure_batch(
    cfg: GradProbeConfig,
    model,
    params,
    probe: Rollouts,
    parts: Parts,
    chosen: Chosen,
    lengths: torch.Tensor,
    correct: torch.Tensor,
    batch: list[int],
    margin: HeldoutMargin | None,
    mean_length: float,
) -> dict[str, dict[str, float]]:
    """Every subset's measures on one batch of prompts (indices into the rows of ``chosen``, ``lengths`` and
    ``correct: (P, samples)``): cosine to the reference gradient, gradient norm, what it kept and decoded (``cost``:
    tokens per prompt over ``mean_length``), and with a ``margin`` the margin after a unit SGD step and after
    AdamW's first."""
    steps = {
        "margin_unit": (partial(torch.optim.SGD, lr=cfg.sgd_step), unit),
        "margin_adamw": (
            partial(torch.optim.AdamW, lr=cfg.adamw_lr, weight_decay=AlgoConfig.weight_decay),
            lambda g: g,
        ),
    }
    eligible = probe.eligible.view(lengths.shape)
    grads = {}
    for key, (part, keep) in chosen.subsets.items():
        rows = subset_rows(parts, batch, part, keep[batch])
        grads[key] = subset_gradient(
            model,
            params,
            [probe.prompt_ids[i] for i in rows],
            [probe.response_ids[i] for i in rows],
            probe.rewards[rows],
            probe.problem[rows].tolist(),
            cfg.temperature,
            cfg.loss_agg_mode,
            cfg.max_tokens,
        )
    # a batch whose every reference group has one outcome has no gradient to align with: its cosines are undefined
    aligned = bool(grads["reference"].norm() > 0)
    out = {}
    for key, (part, keep) in chosen.subsets.items():
        if part == parts.group and not is_control(key):  # a pruned group's rollouts ran to L_detect
            tokens = decoded_tokens(lengths[batch][:, part], keep[batch], eligible[batch][:, part], cfg.detect_length)
        else:  # a run without pruning samples only the rollouts the control keeps
            tokens = (lengths[batch][:, part] * keep[batch]).double().sum(1)
        out[key] = {
            "cosine": cosine(grads[key], grads["reference"]) if aligned else math.nan,
            "grad_norm": float(grads[key].double().norm()),
            "cost": float(tokens.mean()) / mean_length,
            **(
                {name: margin.change(params, step(grads[key]), optimizer) for name, (optimizer, step) in steps.items()}
                if margin is not None
                else {}
            ),
            **balance(keep[batch], correct[batch][:, part], cfg.group_size),
        }
    return out


def run_grad_probe(job: GradProbeJob) -> dict[str, Any]:
    """Generate, fit the scorers, measure every subset on every batch, write ``grad_probe.json`` under ``job.out``
    and print the tables; returns what the JSON holds."""
    cfg = job.config
    parts = cfg.parts
    policy = policy_directory(cfg)
    job.out.mkdir(parents=True, exist_ok=True)
    sets = (job.head_problems, job.batch_problems, *([job.heldout_problems] if cfg.margin else []))
    fitting, probe, *heldout = sample_rollouts(
        policy, sets, (cfg.group_size, parts.samples, cfg.heldout_samples), cfg, job.prompt_format
    )
    result = probe_rollouts(job, policy, parts, fitting, probe, heldout[0] if heldout else None)
    (job.out / "grad_probe.json").write_text(json.dumps(result, indent=1, allow_nan=False))
    print_probe(result, job.out)
    return result


def load_policy(policy: Path):
    """The policy as a float32 transformers model in eval mode: the probe's log-probs and gradients."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).eval()


def probe_rollouts(
    job: GradProbeJob,
    policy: Path,
    parts: Parts,
    fitting: Rollouts,
    probe: Rollouts,
    heldout: Rollouts | None,
    choices: Choices | None = None,
    model=None,
) -> dict[str, Any]:
    """The probe on rollouts already sampled: fit the scorers and choose the subsets (unless ``choices`` has them),
    measure every batch (until ``max_minutes``) on ``model`` (None: ``policy`` loaded); what ``grad_probe.json``
    holds."""
    from arrol_pl.train.policy.weights import freeze_lower_layers

    cfg = job.config
    c = choices or choose(cfg, parts, fitting, probe)
    model = model if model is not None else load_policy(policy)
    if cfg.trainable_layers is not None:
        freeze_lower_layers(model, cfg.trainable_layers)
    params = [p for p in model.parameters() if p.requires_grad]
    margin = HeldoutMargin(model, heldout, cfg.temperature) if heldout is not None else None
    per_batch: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    for b in range(cfg.batches):
        if b >= 2 and cfg.max_minutes is not None and time.perf_counter() - start > 60 * cfg.max_minutes:
            print(f"max_minutes={cfg.max_minutes:g} reached: {b} of {cfg.batches} batches measured", flush=True)
            break
        batch = list(range(b * cfg.prompts_per_batch, (b + 1) * cfg.prompts_per_batch))
        for key, measures in measure_batch(
            cfg, model, params, probe, parts, c.chosen, c.lengths, c.correct, batch, margin, c.mean_length
        ).items():
            for name, value in measures.items():
                per_batch.setdefault(key, {}).setdefault(name, []).append(value)
        print(f"batch {b + 1}/{cfg.batches}: {time.perf_counter() - start:.0f} s", flush=True)
    compared = ("cosine", *(MARGINS if margin is not None else ()), "grad_norm", "cost")
    group = c.parts.group
    return _finite(
        {
            "command": job.command,
            "settings": {
                **{k: v for k, v in asdict(cfg).items() if k not in ("data", "head", "reward")},
                "policy_dir": str(policy),
                "data": job.data,
                "dataset": cfg.data.name,
                "data_options": dict(cfg.data.options),
                "head": asdict(cfg.head),
                "reward": cfg.reward.function,
                "prompt_format": asdict(job.prompt_format),
                "measured_batches": len(per_batch["all"]["cosine"]),
            },
            "default_rule": c.rules[0],
            "rules": c.rules,
            "costs": {
                "mean_length": c.mean_length,
                "detect_length": cfg.detect_length,
                "eligible_share": float(c.eligible[:, group].double().mean()),
                "by_kappa": {
                    f"{k:g}": {"count_matched": cfg.count_matched_size(k), "cost_matched": g}
                    for k, g in c.chosen.cost_matched.items()
                },
            },
            "rollouts": {
                name: {
                    "rollouts": len(r.response_ids),
                    "accuracy": float(r.correct.mean()),
                    "generation_seconds": r.seconds,
                }
                for name, r in (("head", fitting), ("batches", probe), ("heldout", heldout))
                if r is not None
            },
            "scorers": scorer_quality(c.scorers, c.correct[:, group]),
            "margin": margin.record() if margin is not None else None,
            "subsets": {k: {"per_batch": v, **{m: summary(x) for m, x in v.items()}} for k, v in per_batch.items()},
            "differences": {
                kind: {
                    k: {m: paired_difference(per_batch[k][m], per_batch[baseline_of(k, kind)][m]) for m in compared}
                    for k in per_batch
                    if not k.startswith(BASELINES)
                }
                for kind in BASELINES
            },
            "seconds": {"scorers": c.seconds, "batches": time.perf_counter() - start},
        }
    )


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (a margin without mixed held-out problems) as None, for JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def print_probe(result: dict[str, Any], out: Path) -> None:
    """The probe's account, its subsets' table and the differences to each baseline."""
    print(probe_account(result))
    print(subset_table(result))
    for base in BASELINES:
        print()
        print(difference_table(result, base))
    print(f"outputs: {out / 'grad_probe.json'}")


def probe_account(result: dict[str, Any]) -> str:
    """One paragraph: what the probe measured on, the scorers' AUCs, the costs and the held-out margin."""
    s, r, c = result["settings"], result["rollouts"], result["costs"]
    scorers = ", ".join(
        f"{name} {q['auc']:.2f} / {q['within_auc']:.2f}"
        for name, q in result["scorers"].items()
        if q["auc"] is not None and q["within_auc"] is not None
    )
    costs = "; ".join(
        f"κ = {k}: κG = {v['count_matched']}, G' = {v['cost_matched']:.2f}" for k, v in c["by_kappa"].items()
    )
    margin = result["margin"]
    fresh = f"{s['group_size']} + " if fresh_controls(s) else ""
    source = "their own" if fresh else "the first of the group's"
    text = (
        f"{s['measured_batches']} batches x {s['prompts_per_batch']} prompts x ({s['group_size']} + "
        f"{fresh}{s['reference_rollouts']}) rollouts, accuracy {r['batches']['accuracy']:.3f}; head "
        f"fit on {r['head']['rollouts']} rollouts; default rule: {result['default_rule']}; scorers' AUC pooled / "
        f"within groups (all rollouts): {scorers}; mean length {c['mean_length']:.1f} tokens at L_detect = "
        f"{c['detect_length']} ({c['eligible_share']:.0%} reach it unfinished); {costs}; the controls' rollouts: "
        f"{source}"
    )
    if margin is not None:
        text += (
            f"; margin on {margin['rollouts']} held-out rollouts of {margin['problems']} problems, base "
            f"{margin['base'] if margin['base'] is None else round(margin['base'], 4)}"
        )
    return text
