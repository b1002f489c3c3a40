"""The probe at each detection length: a head fit, calibrated and tested at L against DeepConf on the same
test rollouts, with one problem-level split shared by every L (:class:`LengthResult` per L)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from arrol_pl.analysis.evaluation import DeepConfSettings
from arrol_pl.analysis.formatting import fmt
from arrol_pl.analysis.head_probe.features import deepconf_at, eligible_at
from arrol_pl.analysis.head_probe.fit import (
    ProbeSettings,
    fit_calibrator,
    head_scores,
    problem_parts,
    quality_metrics,
    train_probe,
)
from arrol_pl.analysis.head_probe.replay import replay_balance
from arrol_pl.core.metrics import binary_auc, spearman, within_group_auc


@dataclass
class LengthResult:
    """The probe at one detection length; the tensors (test part) feed the plots and stay out of :meth:`row`."""

    detect_length: int
    n_total: int
    n_eligible: int
    n_train: int
    n_calibration: int
    n_test: int
    positive_rate: float
    """Fraction correct among the test rollouts."""
    majority_accuracy: float
    """max(positive_rate, 1 - positive_rate): accuracy of always predicting the majority class."""
    head_spearman: float
    head_auc: float
    head_accuracy: float
    """Calibrated posterior > 0.5 against correctness."""
    head_accuracy_logit0: float
    """Raw logit > 0 against correctness (no calibrator)."""
    head_ece: float
    head_train_loss: float
    deepconf_spearman: float
    deepconf_auc: float
    head_within_auc: float = float("nan")
    """AUC over the (correct, incorrect) pairs inside one problem's group (what balance and votes need)."""
    deepconf_within_auc: float = float("nan")
    balance: dict[str, dict[str, float]] = field(default_factory=dict)
    """:func:`replay_balance` on the test groups with this length's head and calibrator."""
    fraction: float | None = None
    test_labels: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_head_scores: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_deepconf: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)

    def row(self) -> dict[str, Any]:
        """JSON-ready scalars (NaN → None)."""
        out = {k: v for k, v in asdict(self).items() if not k.startswith("test_")}
        return {k: fmt(v, None) for k, v in out.items()}


def evaluate_length(
    detect_length: int,
    features: torch.Tensor,
    labels: torch.Tensor,
    confidences: torch.Tensor,
    eligible: torch.Tensor,
    test: torch.Tensor,
    calibration: torch.Tensor,
    settings: ProbeSettings,
    standardize: bool = False,
    groups: torch.Tensor | None = None,
) -> LengthResult:
    """Train, calibrate and test a probe head at one L; DeepConf on the same test rollouts.

    Args:
        features: ``(N, D)`` detect-time features at L of all N rollouts.
        labels: ``(N,)`` final correctness in {0, 1}.
        confidences: ``(N,)`` DeepConf trace confidence over the first L tokens.
        eligible: ``(N,)`` bool, rollouts scored at L (:func:`eligible_at`).
        test, calibration: ``(N,)`` bool problem-level parts
            (:func:`~arrol_pl.analysis.head_probe.fit.split_by_problem`); the rest fit the head.

        groups: ``(N,)`` problem ids: adds the within-group AUCs and the pruning replay (:func:`replay_balance`)
            of the test groups.
        standardize: the head z-scores each feature with the head-fit rows' moments (features of mixed
            scales, such as :func:`~arrol_pl.analysis.head_probe.features.prefix_stats`, as the online ``stats``
            head does; hidden states go in raw).

    A part left without eligible rollouts (L too long for the rollouts) gives NaN metrics and the counts.
    """
    labels = labels.float()
    fit_rows = eligible & ~test & ~calibration
    held_apart = bool(calibration.any())
    cal_rows = eligible & calibration if held_apart else fit_rows
    test_rows = eligible & test
    y = labels[test_rows]
    rate = float(y.double().mean()) if y.numel() else float("nan")
    counts = {
        "detect_length": detect_length,
        "n_total": int(labels.numel()),
        "n_eligible": int(eligible.sum()),
        "n_train": int(fit_rows.sum()),
        "n_calibration": int(cal_rows.sum()) if held_apart else 0,
        "n_test": int(test_rows.sum()),
        "positive_rate": rate,
        "majority_accuracy": max(rate, 1.0 - rate),
    }
    nan = float("nan")
    if not fit_rows.any() or not test_rows.any():
        return LengthResult(
            **counts,
            head_spearman=nan,
            head_auc=nan,
            head_accuracy=nan,
            head_accuracy_logit0=nan,
            head_ece=nan,
            head_train_loss=nan,
            deepconf_spearman=nan,
            deepconf_auc=nan,
        )
    if standardize:  # rows without log-probs (NaN statistics) read as zeros
        features = torch.nan_to_num(features)
    head, train_loss = train_probe(features[fit_rows], labels[fit_rows], settings, standardize)
    bins = settings.calibration_bins or min(128, max(1, int(cal_rows.sum()) // 32))
    calibrator = fit_calibrator(head_scores(head, features[cal_rows]), labels[cal_rows], bins)
    scores = head_scores(head, features[test_rows])
    conf = confidences[test_rows]
    g = None if groups is None else torch.as_tensor(groups)
    head_m = quality_metrics(scores, y, calibrator, None if g is None else g[test_rows])
    within: dict[str, Any] = {}
    if g is not None:
        within = {
            "head_within_auc": head_m["within_auc"],
            "deepconf_within_auc": within_group_auc(conf, y, g[test_rows]),
        }
        # every test rollout, finished-early ones included (always kept), as the engine would see the group
        all_test = test.clone()
        within["balance"] = replay_balance(
            head_scores(head, features[all_test]),
            labels[all_test],
            eligible[all_test],
            g[all_test],
            calibrator,
            seed=settings.seed,
        )
    return LengthResult(
        **counts,
        head_spearman=head_m["spearman"],
        head_auc=head_m["auc"],
        head_accuracy=head_m["accuracy"],
        head_accuracy_logit0=head_m["accuracy_logit0"],
        head_ece=head_m["ece"],
        head_train_loss=train_loss,
        deepconf_spearman=spearman(conf, y),
        deepconf_auc=binary_auc(conf, y),
        **within,
        test_labels=y,
        test_head_scores=scores,
        test_deepconf=conf,
    )


def probe_lengths(
    features: dict[int, torch.Tensor],
    labels: torch.Tensor,
    response_lengths: torch.Tensor,
    problem_ids: torch.Tensor,
    logprobs: Sequence[Sequence[dict[int, float]] | None],
    lengths: Sequence[int],
    settings: ProbeSettings,
    deepconf: DeepConfSettings | None = None,
    fractions: Sequence[float] | None = None,
    standardize: bool = False,
) -> list[LengthResult]:
    """:func:`evaluate_length` at every L of ``lengths``, with one problem-level split shared by all L.

    ``features[L]: (N, D)``; ``labels, response_lengths, problem_ids: (N,)``; ``logprobs``: N per-token
    top-k dicts (the engine's ``Rollout.logprobs``); ``deepconf`` defaults to :class:`DeepConfSettings`' own;
    ``fractions[i]`` (of max_tokens) labels ``lengths[i]``.
    """
    deepconf = deepconf or DeepConfSettings()
    test, calibration = problem_parts(problem_ids, settings)
    fracs = list(fractions) if fractions is not None else [None] * len(lengths)
    if len(fracs) != len(lengths):
        raise ValueError(f"{len(fracs)} fractions for {len(lengths)} detection lengths")
    return [
        replace(
            evaluate_length(
                length,
                features[length],
                labels,
                deepconf_at(logprobs, length, deepconf),
                eligible_at(response_lengths, length),
                test,
                calibration,
                settings,
                standardize,
                problem_ids,
            ),
            fraction=frac,
        )
        for length, frac in zip(lengths, fracs)
    ]
