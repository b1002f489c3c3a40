"""The probe's subsets chosen once, before any gradient: the scorers fitted, then every rule's survivors and the
controls over all the batches' groups (:mod:`.subsets` says what each subset is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.grad_probe.rollouts import Rollouts, fit_scorers
from arrol_pl.analysis.grad_probe.subsets import (
    Parts,
    cost_matched_size,
    first_of,
    fresh_counts,
    kappa_key,
    pruner_params,
    survivors,
)
from arrol_pl.core.calibration import BinnedCalibrator


@dataclass
class Chosen:
    """Every subset over all the batches' prompts: the part of each prompt's rollouts it chooses from (group,
    fresh, reference) and its ``(P, n)`` keep mask over that part; and the cost-matched sizes G' by κ."""

    subsets: dict[str, tuple[slice, torch.Tensor]]
    cost_matched: dict[float, float]


def choose_subsets(
    config: GradProbeConfig,
    parts: Parts,
    scorers: dict[str, tuple[BinnedCalibrator, torch.Tensor]],
    eligible: torch.Tensor,
    lengths: torch.Tensor,
    rules: list[str],
) -> Chosen:
    """Random pruning and every rule reading every scorer on the groups, the two controls, all G and the
    reference, at every κ. ``eligible, lengths: (P, G)`` of the groups; G' is measured on the default rule's
    decisions reading the head (``rules[0]``)."""
    prompts = eligible.shape[0]
    indices = list(range(prompts))

    def whole(part: slice) -> tuple[slice, torch.Tensor]:
        return part, torch.ones(prompts, part.stop - part.start, dtype=torch.bool)

    subsets = {"all": whole(parts.group)}
    cost_matched = {}
    head_calibrator, head_scores = scorers["head"]
    for kappa in config.keep_ratios:

        def key(name: str) -> str:
            return kappa_key(name, kappa, config.keep_ratio)

        subsets[key("random")] = (
            parts.group,
            survivors(pruner_params("random", head_calibrator, kappa, config.seed), head_scores, eligible, indices),
        )
        for rule in rules:
            for name, (calibrator, scores) in scorers.items():
                params = pruner_params("arrol", calibrator, kappa, config.seed, balance_target=rule)
                subsets[key(f"{rule}/{name}")] = parts.group, survivors(params, scores, eligible, indices)
        default = subsets[key(f"{rules[0]}/head")][1]
        cost_matched[kappa] = cost_matched_size(lengths, default, eligible, config.detect_length)
        source = parts.controls
        size = source.stop - source.start
        count = torch.full((prompts,), config.count_matched_size(kappa))
        subsets[key("fresh_count")] = source, first_of(count, size)
        subsets[key("fresh_cost")] = source, first_of(fresh_counts(prompts, cost_matched[kappa], config.seed), size)
    subsets["reference"] = whole(parts.reference)
    return Chosen(subsets, cost_matched)


@dataclass
class Choices:
    """The probe's rollouts of the batches, shaped ``(P, samples)``, and what was chosen on them."""

    parts: Parts
    lengths: torch.Tensor
    correct: torch.Tensor
    eligible: torch.Tensor
    scorers: dict[str, tuple[BinnedCalibrator, torch.Tensor]]
    rules: list[str]
    chosen: Chosen
    mean_length: float
    """The group rollouts' mean length: what ``cost`` counts rollouts in."""
    seconds: float


def choose(cfg: GradProbeConfig, parts: Parts, fitting: Rollouts, probe: Rollouts) -> Choices:
    """Fit the scorers on ``fitting`` and choose every subset of the batches' rollouts ``probe``."""
    start = time.perf_counter()
    shape = (len(probe.response_ids) // parts.samples, parts.samples)
    features, correct = probe.features.view(*shape, -1), probe.correct.view(shape)
    lengths = torch.tensor([len(r) for r in probe.response_ids]).view(shape)
    eligible = probe.eligible.view(shape)
    scorers = fit_scorers(cfg, fitting, features[:, parts.group], correct[:, parts.group])
    rules = cfg.compared_rules
    chosen = choose_subsets(cfg, parts, scorers, eligible[:, parts.group], lengths[:, parts.group], rules)
    return Choices(
        parts,
        lengths,
        correct,
        eligible,
        scorers,
        rules,
        chosen,
        float(lengths[:, parts.group].double().mean()),
        time.perf_counter() - start,
    )
