"""The whole gradient probe of ``arrol grad-probe``: rollouts and scorers (:mod:`.rollouts`), the subsets chosen on
every batch's groups, every subset's gradient and measures per batch; then ``grad_probe.json`` and the printed tables.

Decisions:
- **Three sets of prompts, disjoint.** Training problems drawn with the seed: the first ``head_prompts`` (G
  rollouts each) fit the scorers' calibrators and the head; the next ``batches × prompts_per_batch`` (G + κG + R
  rollouts each) give the gradients. The first ``data.num_heldout`` held-out problems (``heldout_samples`` rollouts
  each) measure the margin.
- **One policy, unchanged.** Every gradient is taken at the policy that sampled the rollouts; a measured step is
  undone before the next (:func:`~arrol_pl.analysis.grad_probe.gradients.after_step`), and AdamW's weight decay is the
  trainer's (``algo.weight_decay``, 0 by default: the step is the gradient's alone).
- **The subsets are chosen once**, over all the batches' groups, before any gradient: each batch then reads its rows.
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

from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.grad_probe.gradients import after_step, mean_log_probs, subset_gradient
from arrol_pl.analysis.grad_probe.measures import cosine, likelihood_margin, paired_difference, summary
from arrol_pl.analysis.grad_probe.rollouts import (Rollouts, fit_scorers, policy_directory, sample_rollouts,
                                                   scorer_quality)
from arrol_pl.analysis.grad_probe.subsets import (Parts, balance, compared_rules, pruner_params, subset_rows,
                                                  survivors)
from arrol_pl.analysis.grad_probe.tables import difference_table, subset_table
from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.prompts import PromptFormat
from arrol_pl.train.config.run import AlgoConfig

BASELINES = ("random", "fresh")
"""The subsets every other is compared with, paired by batch."""
COMPARED = ("cosine", "margin_sgd", "margin_adamw", "grad_norm")
"""The measures of the update compared between subsets (beside them, each subset's kept share and balance)."""


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


def choose_subsets(config: GradProbeConfig, scorers: dict[str, tuple[BinnedCalibrator, torch.Tensor]],
                   eligible: torch.Tensor, rules: list[str]) -> dict[str, torch.Tensor]:
    """``(P, G)`` keep masks of random pruning and of every rule reading every scorer, over all the batches' groups."""
    indices = list(range(eligible.shape[0]))
    calibrator, scores = scorers["head"]
    chosen = {"random": survivors(pruner_params("random", calibrator, config.keep_ratio, config.seed), scores,
                                  eligible, indices)}
    for rule in rules:
        for name, (calibrator, scores) in scorers.items():
            params = pruner_params("arrol", calibrator, config.keep_ratio, config.seed, balance_target=rule)
            chosen[f"{rule}/{name}"] = survivors(params, scores, eligible, indices)
    return chosen


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


def measure_batch(cfg: GradProbeConfig, model, params, probe: Rollouts, parts: Parts, chosen: dict[str, torch.Tensor],
                  correct: torch.Tensor, batch: list[int], margin: HeldoutMargin) -> dict[str, dict[str, float]]:
    """Every subset's measures on one batch of prompts (indices into ``chosen``'s rows and ``correct: (P, samples)``):
    cosine to the reference gradient, gradient norm, the margin after an SGD step and after AdamW's first, and what
    it kept."""
    optimizers = {"margin_sgd": partial(torch.optim.SGD, lr=cfg.sgd_lr),
                  "margin_adamw": partial(torch.optim.AdamW, lr=cfg.adamw_lr, weight_decay=AlgoConfig.weight_decay)}
    subsets = _batch_subsets(parts, chosen, batch)
    grads = {}
    for key, (part, keep) in subsets.items():
        rows = subset_rows(parts, batch, part, keep)
        grads[key] = subset_gradient(model, params, [probe.prompt_ids[i] for i in rows],
                                     [probe.response_ids[i] for i in rows], probe.rewards[rows],
                                     probe.problem[rows].tolist(), cfg.temperature, cfg.loss_agg_mode, cfg.max_tokens)
    # a batch whose every reference group has one outcome has no gradient to align with: its cosines are undefined
    aligned = bool(grads["reference"].norm() > 0)
    out = {}
    for key, (part, keep) in subsets.items():
        out[key] = {"cosine": cosine(grads[key], grads["reference"]) if aligned else math.nan,
                    "grad_norm": float(grads[key].double().norm()),
                    **{name: margin.change(params, grads[key], optimizer) for name, optimizer in optimizers.items()},
                    **balance(keep, correct[batch][:, part], cfg.group_size)}
    return out


def run_grad_probe(job: GradProbeJob) -> dict[str, Any]:
    """Generate, fit the scorers, measure every subset on every batch, write ``grad_probe.json`` under ``job.out``
    and print the tables; returns what the JSON holds."""
    from transformers import AutoModelForCausalLM

    from arrol_pl.train.policy.weights import freeze_lower_layers

    cfg = job.config
    parts = Parts(cfg.group_size, cfg.fresh_size, cfg.reference_rollouts)
    policy = policy_directory(cfg)
    job.out.mkdir(parents=True, exist_ok=True)
    fitting, probe, heldout = sample_rollouts(
        policy, (job.head_problems, job.batch_problems, job.heldout_problems),
        (cfg.group_size, parts.samples, cfg.heldout_samples), cfg, job.prompt_format)
    start = time.perf_counter()
    shape = (len(job.batch_problems), parts.samples)
    features, correct = probe.features.view(*shape, -1), probe.correct.view(shape)
    scorers = fit_scorers(cfg, fitting, features[:, parts.group], correct[:, parts.group])
    rules = compared_rules(cfg.rules)
    chosen = choose_subsets(cfg, scorers, probe.eligible.view(shape)[:, parts.group], rules)
    seconds = {"scorers": time.perf_counter() - start}

    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).eval()
    if cfg.trainable_layers is not None:
        freeze_lower_layers(model, cfg.trainable_layers)
    params = [p for p in model.parameters() if p.requires_grad]
    margin = HeldoutMargin(model, heldout, cfg.temperature)
    per_batch: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    for b in range(cfg.batches):
        batch = list(range(b * cfg.prompts_per_batch, (b + 1) * cfg.prompts_per_batch))
        for key, measures in measure_batch(cfg, model, params, probe, parts, chosen, correct, batch, margin).items():
            for name, value in measures.items():
                per_batch.setdefault(key, {}).setdefault(name, []).append(value)
        print(f"batch {b + 1}/{cfg.batches}: {time.perf_counter() - start:.0f} s", flush=True)
    seconds["batches"] = time.perf_counter() - start

    result = _finite({
        "command": job.command,
        "settings": {**{k: v for k, v in asdict(cfg).items() if k not in ("data", "head", "reward")},
                     "policy_dir": str(policy), "fresh_size": cfg.fresh_size, "data": job.data,
                     "dataset": cfg.data.name, "data_options": dict(cfg.data.options), "head": asdict(cfg.head),
                     "reward": cfg.reward.function, "prompt_format": asdict(job.prompt_format)},
        "default_rule": rules[0],
        "rules": rules,
        "rollouts": {name: {"rollouts": len(r.response_ids), "accuracy": float(r.correct.mean()),
                            "generation_seconds": r.seconds}
                     for name, r in (("head", fitting), ("batches", probe), ("heldout", heldout))},
        "scorers": scorer_quality(scorers, correct[:, parts.group]),
        "margin": margin.record(),
        "subsets": {k: {"per_batch": v, **{m: summary(x) for m, x in v.items()}} for k, v in per_batch.items()},
        "differences": {base: {k: {m: paired_difference(per_batch[k][m], per_batch[base][m]) for m in COMPARED}
                               for k in per_batch if k != base}
                        for base in BASELINES},
        "seconds": seconds,
    })
    (job.out / "grad_probe.json").write_text(json.dumps(result, indent=1, allow_nan=False))
    print_probe(result, job.out)
    return result


def _batch_subsets(parts: Parts, chosen: dict[str, torch.Tensor],
                   batch: list[int]) -> dict[str, tuple[slice, torch.Tensor]]:
    """Every subset of one batch's prompts: the part of their rollouts it chooses from (group, fresh, reference) and
    its ``(P, n)`` keep mask over that part."""
    def whole(part: slice) -> tuple[slice, torch.Tensor]:
        return part, torch.ones(len(batch), part.stop - part.start, dtype=torch.bool)

    return {"all": whole(parts.group), **{k: (parts.group, keep[batch]) for k, keep in chosen.items()},
            "fresh": whole(parts.fresh), "reference": whole(parts.reference)}


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (a margin without mixed held-out problems) as None, for JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def print_probe(result: dict[str, Any], out: Path) -> None:
    """The probe's account, its subsets' table and the differences to random and fresh pruning."""
    s, r = result["settings"], result["rollouts"]
    scorers = ", ".join(f"{name} {q['auc']:.2f} / {q['within_auc']:.2f}" for name, q in result["scorers"].items()
                        if q["auc"] is not None and q["within_auc"] is not None)
    margin = result["margin"]
    print(f"{s['batches']} batches x {s['prompts_per_batch']} prompts x ({s['group_size']} + {s['fresh_size']} + "
          f"{s['reference_rollouts']}) rollouts, accuracy {r['batches']['accuracy']:.3f}; head fit on "
          f"{r['head']['rollouts']} rollouts; default rule: {result['default_rule']}; scorers' AUC pooled / within "
          f"groups: {scorers}; margin on {margin['rollouts']} held-out rollouts of {margin['problems']} problems, "
          f"base {margin['base'] if margin['base'] is None else round(margin['base'], 4)}")
    print(subset_table(result))
    for base in BASELINES:
        print()
        print(difference_table(result, base))
    print(f"outputs: {out / 'grad_probe.json'}")
