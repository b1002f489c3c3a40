"""Fitting a probe head: the problem-level split, a fresh head trained as the RL run trains its own, its
calibrator, its scores and quality metrics; and the head a training run exported, scored the same way.

Decisions:
- **Split by problem.** Rollouts of one problem share a prompt and are correlated; a problem is in one
  part only (head-fit, calibration or test), drawn once with a seed so every L is tested on the same
  problems.
- **Training recipe of the RL run.** BCE minibatch steps through :func:`~arrol_pl.core.head_training.head_update`
  on a :class:`~arrol_pl.core.head_training.FeatureReplay` window holding the whole fit part, AdamW, with
  the trainer's :class:`~arrol_pl.core.head_training.HeadConfig` (more steps: one fit, not one per step).
- **Calibration on fresh scores.** The online calibrator sees each rollout's score before the head has
  trained on it; the head's scores on its own training rollouts are over-confident. The calibrator is
  therefore fitted on a held-apart share of the training problems (``calibration_fraction``; 0 fits it on
  the head-fit part, which biases the ECE low and the accuracy high).
- **Metrics** come from :mod:`arrol_pl.core.metrics` through :func:`~arrol_pl.core.head_training.head_quality`
  (accuracy of the calibrated posterior > 0.5, AUC, Spearman, ECE); the majority-class accuracy of the
  test part is reported beside the head's accuracy, as the floor it must beat.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.head_training import FeatureReplay, HeadConfig, head_quality, head_update
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.train.records.summary import RunSummary


PROBE_TRAINING = HeadConfig(steps=300, replay=None)
"""The probe's head recipe: the trainer's (``head.*``), fitted once on the whole fit part."""


@dataclass(frozen=True)
class ProbeSettings:
    """How a probe head is trained and calibrated at each detection length."""

    hidden_dim: int = 256
    """Head width (the trainer's ``head.hidden_dim``)."""
    training: HeadConfig = field(default_factory=lambda: replace(PROBE_TRAINING))
    """BCE minibatch steps, learning rate, minibatch size."""
    calibration_bins: int | None = None
    """B of the binned calibrator; None: one bin per 32 calibration rollouts, at most 128 (the density of the
    engine's 128 bins over its 4096-rollout window; 128 bins over a few hundred rollouts leave most bins
    empty and the posterior no longer follows the score's order)."""
    test_fraction: float = 0.5
    """Share of the problems whose rollouts test the head (the rest train and calibrate it)."""
    calibration_fraction: float = 0.25
    """Share of the training problems held apart to fit the calibrator (0: fit it on the head-fit part)."""
    seed: int = 0
    """Seeds the head's initialisation and minibatch draws."""

    def __post_init__(self) -> None:
        if self.hidden_dim < 1:
            raise ValueError(f"hidden_dim must be >= 1, got {self.hidden_dim}")
        if self.calibration_bins is not None and self.calibration_bins < 1:
            raise ValueError(f"calibration_bins must be >= 1, got {self.calibration_bins}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.calibration_fraction < 1.0:
            raise ValueError(f"calibration_fraction must be in [0, 1), got {self.calibration_fraction}")


def split_by_problem(problem_ids: torch.Tensor, fraction: float, seed: int) -> torch.Tensor:
    """``(N,)`` bool, True for the rollouts of a seeded random ``fraction`` of the distinct problems.

    With ``fraction > 0`` at least one problem is drawn and at least one is left (so both parts exist).
    """
    problem_ids = torch.as_tensor(problem_ids)
    problems = torch.unique(problem_ids)
    if fraction <= 0:
        return torch.zeros_like(problem_ids, dtype=torch.bool)
    if problems.numel() < 2:
        raise ValueError(f"splitting by problem needs at least 2 problems, got {problems.numel()}")
    count = min(max(1, round(fraction * problems.numel())), problems.numel() - 1)
    order = torch.randperm(problems.numel(), generator=torch.Generator().manual_seed(seed))
    return torch.isin(problem_ids, problems[order[:count]])


def problem_parts(problem_ids: torch.Tensor, settings: ProbeSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """``(test, calibration)``, each ``(N,)`` bool: the test problems, then the calibration share of the
    others (none with ``calibration_fraction = 0``); the remaining rollouts fit the head."""
    problem_ids = torch.as_tensor(problem_ids)
    test = split_by_problem(problem_ids, settings.test_fraction, settings.seed)
    calibration = torch.zeros_like(test)
    calibration[~test] = split_by_problem(problem_ids[~test], settings.calibration_fraction, settings.seed + 1)
    return test, calibration


def train_probe(
    features: torch.Tensor, labels: torch.Tensor, settings: ProbeSettings, standardize: bool = False
) -> tuple[QualityHead, float]:
    """A fresh head trained on ``features: (N, D)``, ``labels: (N,)`` (training recipe, module docstring);
    ``standardize``: the head z-scores its input with the training features' moments (as a ``stats`` head does
    online).

    Returns the head in eval mode and its full-batch BCE on the training rollouts after training.
    """
    if labels.numel() == 0:
        raise ValueError("train_probe needs at least one labelled feature")
    with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the global RNG
        torch.manual_seed(settings.seed)
        head = QualityHead(features.shape[1], settings.hidden_dim, standardize=standardize)
    replay = FeatureReplay(labels.numel())
    replay.add(features, labels, torch.ones(labels.numel()))
    t = settings.training
    optimizer = torch.optim.AdamW(head.parameters(), lr=t.lr)
    head_update(head, optimizer, replay, t.steps, t.batch_size, torch.Generator().manual_seed(settings.seed))
    head.eval()
    with torch.no_grad():
        loss = float(head.loss(features, labels.float()))
    return head, loss


def fit_calibrator(scores: torch.Tensor, labels: torch.Tensor, num_bins: int) -> BinnedCalibrator:
    """A binned calibrator (Eq. 1) whose window holds exactly ``scores, labels: (N,)``."""
    calibrator = BinnedCalibrator(num_bins=num_bins, capacity=max(labels.numel(), 1))
    calibrator.update(scores, labels)
    return calibrator


def head_scores(head: QualityHead, features: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float32 raw logits of ``head`` on ``features: (N, D)`` (CPU)."""
    with torch.no_grad():
        return head(features.to(next(head.parameters()).device)).float().cpu()


def quality_metrics(
    scores: torch.Tensor, labels: torch.Tensor, calibrator: BinnedCalibrator | None, groups: torch.Tensor | None = None
) -> dict[str, float]:
    """Spearman, AUC, accuracy (calibrated posterior > 0.5; raw logit > 0) and ECE, and with ``groups: (N,)``
    the AUC within groups (``within_auc``); NaN where undefined."""
    keys = ("spearman", "auc", "accuracy", "accuracy_logit0", "ece") + (() if groups is None else ("within_auc",))
    if labels.numel() == 0:
        return dict.fromkeys(keys, float("nan"))
    m = head_quality(scores, None if calibrator is None else calibrator.posterior(scores), labels, groups)
    out = {
        "spearman": m["spearman"],
        "auc": m["auc"],
        "accuracy": m["posterior_accuracy"],
        "accuracy_logit0": m["accuracy"],
        "ece": m["calibration_error"],
    }
    return out if groups is None else out | {"within_auc": m["within_auc"]}


def load_exported_head(export_dir: Path) -> tuple[QualityHead | None, BinnedCalibrator | None, int | None]:
    """The head and calibrator a training run exported, and the run's ``L_detect``; None for each one absent.

    ``L_detect`` is read from ``summary.json`` one directory above ``export_dir`` (``config.engine.detect_length``).
    """
    from arrol_pl.models.head import load_head

    head, calibrator = load_head(export_dir) or (None, None)
    detect_length = None
    if (export_dir.parent / "summary.json").exists():
        detect_length = RunSummary.read(export_dir.parent).config.get("engine", {}).get("detect_length")
    return head, calibrator, detect_length


def online_head_metrics(
    head: QualityHead,
    calibrator: BinnedCalibrator | None,
    features: torch.Tensor,
    labels: torch.Tensor,
    eligible: torch.Tensor,
    groups: torch.Tensor | None = None,
) -> dict[str, float | int]:
    """The run's own head (trained online during RL) on every eligible rollout: n, positive rate and
    :func:`quality_metrics` (with the run's calibrator when given); with ``groups: (N,)`` also its AUC
    within groups (what the pruning rules that compare a group's rollouts need)."""
    y = labels[eligible].float()
    m = quality_metrics(
        head_scores(head, features[eligible]),
        y,
        calibrator,
        None if groups is None else torch.as_tensor(groups)[eligible],
    )
    return {"n": int(y.numel()), "positive_rate": float(y.double().mean()) if y.numel() else float("nan"), **m}
