"""The quality head's ranking at several detection lengths: a head per L fitted as the probe fits it (on the head
prompts' rollouts), its AUC within groups read on every rollout of the batches' groups (none pruned: the probe
decodes them all), from the policy's hidden state computed with transformers (:func:`detect_features`), with a 95 %
interval by resampling the groups (:func:`within_auc_interval`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arrol_pl.analysis.grad_probe.rollouts import Rollouts
from arrol_pl.analysis.head_probe.features import detect_features, eligible_at
from arrol_pl.analysis.head_probe.fit import ProbeSettings, head_scores, train_probe
from arrol_pl.core.metrics import binary_auc, within_group_auc


BOOTSTRAP = 400
"""Resamples of the groups behind each AUC's interval."""


def within_auc_interval(
    scores: torch.Tensor, correct: torch.Tensor, groups: torch.Tensor, seed: int, draws: int = BOOTSTRAP
) -> tuple[float, float]:
    """The 2.5 and 97.5 percentiles of :func:`within_group_auc` over ``draws`` resamples of the groups with
    replacement (a group drawn twice counts twice); ``(nan, nan)`` when no resample is defined."""
    ids = torch.unique(groups)
    members = [torch.nonzero(groups == g, as_tuple=True)[0] for g in ids]
    generator = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(draws):
        picks = torch.randint(len(members), (len(members),), generator=generator).tolist()
        rows = torch.cat([members[i] for i in picks])
        relabel = torch.cat([torch.full((len(members[i]),), k) for k, i in enumerate(picks)])
        value = within_group_auc(scores[rows], correct[rows], relabel)
        if value == value:
            values.append(value)
    if not values:
        return float("nan"), float("nan")
    q = torch.quantile(torch.tensor(values, dtype=torch.float64), torch.tensor([0.025, 0.975], dtype=torch.float64))
    return float(q[0]), float(q[1])


def _non_empty(rollouts: Rollouts, rows: Sequence[int]) -> list[int]:
    return [i for i in rows if len(rollouts.response_ids[i]) > 0]


def auc_by_length(
    model,
    fitting: Rollouts,
    probe: Rollouts,
    group_rows: Sequence[int],
    lengths: Sequence[int],
    settings: ProbeSettings,
    pad_id: int,
) -> list[dict[str, float]]:
    """Per L in ``lengths``: the AUC within groups (with its 95 % interval) and pooled of a head fitted at L, on the
    rollouts of ``probe`` in ``group_rows`` that reach L unfinished (what a rule decides on), and their share."""
    fit_rows = _non_empty(fitting, range(len(fitting.response_ids)))
    rows = _non_empty(probe, group_rows)
    fit = detect_features(
        model, [fitting.prompt_ids[i] for i in fit_rows], [fitting.response_ids[i] for i in fit_rows], lengths, pad_id
    )
    read = detect_features(
        model, [probe.prompt_ids[i] for i in rows], [probe.response_ids[i] for i in rows], lengths, pad_id
    )
    fit_lengths = torch.tensor([len(fitting.response_ids[i]) for i in fit_rows])
    read_lengths = torch.tensor([len(probe.response_ids[i]) for i in rows])
    labels, correct, groups = fitting.correct[fit_rows], probe.correct[rows], probe.problem[rows]
    out = []
    for length in lengths:
        train = eligible_at(fit_lengths, length)
        live = eligible_at(read_lengths, length)
        if int(train.sum()) < 2 or labels[train].min() == labels[train].max():
            out.append(
                {
                    "detect_length": length,
                    "within_auc": None,
                    "within_interval": None,
                    "auc": None,
                    "eligible_share": float(live.double().mean()),
                }
            )
            continue
        head, _ = train_probe(fit[length][train], labels[train], settings)
        scores = head_scores(head, read[length][live])
        out.append(
            {
                "detect_length": length,
                "within_auc": within_group_auc(scores, correct[live], groups[live]),
                "within_interval": within_auc_interval(scores, correct[live], groups[live], settings.seed),
                "auc": binary_auc(scores, correct[live]),
                "eligible_share": float(live.double().mean()),
            }
        )
    return out
