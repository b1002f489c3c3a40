"""The probe's replays on its test groups: the engine's keep/prune rules (Table 4) and the test-time votes
(Table 3), with heads fit on the other problems."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from arrol_pl.analysis.head_probe.fit import ProbeSettings, head_scores, train_probe
from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.metrics import mean_sd_se, voted_answer_correct
from arrol_pl.core.decisions import decide_groups
from arrol_pl.core.pruning import PruningConfig, build_pruner_params, step_seed
from arrol_pl.core.voting import arrol_vote, majority_vote, weighted_vote


BALANCE_ARMS = {
    "arrol_anchored": {"policy": "arrol", "balance_target": "anchored"},
    "arrol_global": {"policy": "arrol", "balance_target": "global"},
    "arrol_group": {"policy": "arrol", "balance_target": "group"},
    "arrol_spread": {"policy": "arrol", "balance_target": "spread"},
    "random": {"policy": "random"},
    "none": {"policy": "none"},
}
"""Pruning rules :func:`replay_balance` compares (Table 4): ARRoL with its default anchored rule, with the paper's
Eq. 2 as written, with the per-group target and with the rank-only ``spread`` rule, random pruning at the same κ, and
no pruning."""


def replay_balance(
    scores: torch.Tensor,
    labels: torch.Tensor,
    eligible: torch.Tensor,
    groups: torch.Tensor,
    calibrator: BinnedCalibrator,
    keep_ratio: float = 0.5,
    draws: int = 32,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Table 4 by replay: the engine's keep/prune rule (h_t from ``calibrator`` as :func:`build_pruner_params` makes
    it) on recorded groups, ``draws`` times with fresh decision seeds, each draw deciding what
    :func:`~arrol_pl.core.decisions.decide_batch` would.

    ``scores: (N,)`` head logits at L, ``labels: (N,)``, ``eligible: (N,)`` (False: finished before L, kept),
    ``groups: (N,)``. Per arm of :data:`BALANCE_ARMS`: the survivors' mean positive ratio ``rho``, ``balance``
    = E[ρ̂(1−ρ̂)], ``zero_adv`` (groups whose survivors share one reward) and ``keep``, each averaged over the
    draws per group, then over groups, with ``*_se`` its standard error over groups; ``zero_adv_vs_random``
    and ``balance_vs_random`` are paired per-group differences to random pruning (``*_se`` likewise).
    """
    labels = torch.as_tensor(labels, dtype=torch.float64)
    groups = torch.as_tensor(groups, dtype=torch.long)
    scores = torch.as_tensor(scores, dtype=torch.float32).flatten()
    eligible = torch.as_tensor(eligible, dtype=torch.bool).flatten()
    ids = torch.unique(groups)
    column = torch.searchsorted(ids, groups)  # each row's group, 0..len(ids)-1
    size = torch.zeros(ids.numel(), dtype=torch.float64).index_add_(0, column, torch.ones_like(labels))
    per_group: dict[str, torch.Tensor] = {}
    out: dict[str, dict[str, float]] = {}
    members = [torch.nonzero(groups == g, as_tuple=True)[0] for g in ids.tolist()]
    for arm, settings in BALANCE_ARMS.items():
        # h_t is the same for every draw but its seed (steps 0 of runs seeded seed, seed + 1, ...), which only seeds
        # the groups' generators: every draw's groups are decided in one call
        params = build_pruner_params(
            PruningConfig(keep_ratio=keep_ratio, cold_start_steps=0, seed=seed, **settings), calibrator, 0
        )
        generators = [
            dataclasses.replace(params, seed=step_seed(seed + d, 0)).group_generator(g)
            for d in range(draws)
            for g in ids.tolist()
        ]
        decisions = decide_groups(
            params,
            [scores[idx] for _ in range(draws) for idx in members],
            [eligible[idx] for _ in range(draws) for idx in members],
            generators,
        )
        keep = torch.zeros(draws, labels.numel(), dtype=torch.float64)
        for k, decision in enumerate(decisions):
            keep[k // len(members), members[k % len(members)]] = decision.keep.to(keep.dtype)
        kept = torch.zeros(draws, ids.numel(), dtype=torch.float64).index_add_(1, column, keep)  # (draws, groups)
        right = torch.zeros_like(kept).index_add_(1, column, keep * labels)
        rho = right / kept  # NaN where a group kept nothing
        shared = (kept < 2) | (right == 0) | (right == kept)  # the survivors share one reward
        stats = torch.stack([rho, rho * (1 - rho), shared.double(), kept / size], dim=2)
        per_group[arm] = stats.mean(0)
        se = per_group[arm].std(0) / math.sqrt(max(ids.numel(), 1))
        out[arm] = {
            name: float(per_group[arm][:, k].mean()) for k, name in enumerate(("rho", "balance", "zero_adv", "keep"))
        }
        out[arm].update({f"{name}_se": float(se[k]) for k, name in enumerate(("rho", "balance", "zero_adv", "keep"))})
    for arm in (a for a in BALANCE_ARMS if a.startswith("arrol")):
        for k, name in ((2, "zero_adv"), (1, "balance")):
            diff, _, diff_se = mean_sd_se(per_group[arm][:, k] - per_group["random"][:, k])
            out[arm][f"{name}_vs_random"], out[arm][f"{name}_vs_random_se"] = diff, diff_se
    return out


VOTE_RULES = {
    "majority": "majority vote (maj@k)",
    "deepconf": "DeepConf-weighted vote (full-trace confidence)",
    "arrol_detect": "ARRoL vote, head trained at L_detect (the pruning head, scoring complete rollouts)",
    "arrol_end": "ARRoL vote, head trained on complete rollouts",
}
"""Voting rules :func:`replay_votes` compares (Table 3); ARRoL's votes weigh answers by the ranks of the head's
scores of each complete rollout (§4.4)."""


def replay_votes(
    end_features: torch.Tensor,
    detect_features: torch.Tensor,
    labels: torch.Tensor,
    eligible: torch.Tensor,
    groups: torch.Tensor,
    classes: Sequence[Sequence[int | None]],
    confidences: torch.Tensor,
    test: torch.Tensor,
    calibration: torch.Tensor,
    settings: ProbeSettings,
) -> dict[str, dict[str, float]]:
    """Table 3 by replay: k-sample votes on the test problems, with heads fit on the other problems' rollouts.

    ``end_features, detect_features: (N, D)`` hidden states at each rollout's last token and at L_detect;
    ``labels, eligible (at L_detect), groups (problem ids 0..P-1), confidences (full-trace DeepConf): (N,)``;
    ``classes[p]``: the answer classes of problem ``p``'s k rollouts in row order (None: no answer); ``test``,
    ``calibration``: problem-level parts as in :func:`~arrol_pl.analysis.head_probe.lengths.evaluate_length` (the
    calibration part also fits the heads: votes need no calibrator). Per rule of :data:`VOTE_RULES`: ``accuracy``
    (voted answer correct) and
    its standard error over test problems, paired differences ``vs_majority`` / ``vs_deepconf`` with theirs;
    ``avg`` and ``pass`` give the mean sample accuracy and the oracle (any sample correct) of the same problems.
    """
    labels = torch.as_tensor(labels, dtype=torch.float32)
    groups = torch.as_tensor(groups, dtype=torch.long)
    fit = ~test
    head_end, _ = train_probe(end_features[fit], labels[fit], settings)
    head_detect, _ = train_probe(detect_features[fit & eligible], labels[fit & eligible], settings)
    scores = {"arrol_end": head_scores(head_end, end_features), "arrol_detect": head_scores(head_detect, end_features)}
    conf = torch.nan_to_num(torch.as_tensor(confidences, dtype=torch.float64), nan=0.0)
    problems = torch.unique(groups[test]).tolist()
    hits = {rule: [] for rule in (*VOTE_RULES, "avg", "pass")}
    for g in problems:
        rows = torch.nonzero(groups == g, as_tuple=True)[0]
        cls, correct = list(classes[g]), [bool(c) for c in labels[rows]]
        winners = {
            "majority": majority_vote(cls),
            "deepconf": weighted_vote(cls, conf[rows].tolist()),
            **{rule: arrol_vote(cls, scores[rule][rows]) for rule in ("arrol_detect", "arrol_end")},
        }
        for rule, winner in winners.items():
            hits[rule].append(float(voted_answer_correct(cls, correct, winner)))
        hits["avg"].append(sum(correct) / len(correct))
        hits["pass"].append(float(any(correct)))
    table = {rule: torch.tensor(v, dtype=torch.float64) for rule, v in hits.items()}
    n = len(problems)
    out: dict[str, dict[str, float]] = {"problems": {"n": float(n), "k": float(len(classes[problems[0]]))}}
    for rule, x in table.items():
        acc, _, se = mean_sd_se(x)
        out[rule] = {"accuracy": acc, "accuracy_se": se}
        if rule in VOTE_RULES:
            for base in ("majority", "deepconf"):
                diff, _, diff_se = mean_sd_se(x - table[base])
                out[rule] |= {f"vs_{base}": diff, f"vs_{base}_se": diff_se}
    return out
