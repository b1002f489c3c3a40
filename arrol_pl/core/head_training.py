"""How the quality head learns online (paper §4.2–4.3 (iii)) and how well it predicts: one recipe for the
trainer and the offline probe.

Decisions:
- **Replay window.** One RL step yields only B×G×κ labelled features; the head takes several BCE
  minibatch steps drawn from a sliding window of recent ones (:class:`FeatureReplay`) instead of a
  single gradient step on the newest.
- **Importance weights.** With ``pruning.importance_weighting`` a survivor counts 1/p in the loss, as in
  the calibrator; weights are normalised to mean 1 per minibatch.
- **Metrics** (:func:`head_quality`) are named without a logger prefix; what is undefined (one class
  only, no posteriors) is NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arrol_pl.core.autocast import no_autocast
from arrol_pl.core.metrics import expected_calibration_error, spearman
from arrol_pl.core.survivor_auc import survivor_aucs
from arrol_pl.core.quality_head import QualityHead, check_head_input


@dataclass
class HeadConfig:
    """The quality head: what it reads, its width and its online training recipe (the trainer's ``head:``
    section; the probe's ``training``, where ``input`` and ``hidden_dim`` are unused: the probe names its feature
    kinds and width itself)."""

    input: str = "last"
    """What the head reads (:data:`~arrol_pl.core.quality_head.HEAD_INPUTS`): ``last`` (the paper's final-layer
    hidden state), ``stats`` (prefix log-prob statistics) or ``last+stats``."""
    hidden_dim: int = 256
    """Hidden width of the 2-layer MLP (the prompt screen's head takes the same)."""
    lr: float = 1e-3
    """AdamW learning rate."""
    steps: int = 8
    """Minibatch BCE steps per update (per training step in RL)."""
    batch_size: int = 256
    """Minibatch size."""
    replay: int | None = 2048
    """Labelled features the replay window holds; None: every feature added."""

    def __post_init__(self) -> None:
        check_head_input(self.input)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        for key in ("hidden_dim", "steps", "batch_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.replay is not None and self.replay < 1:
            raise ValueError(f"replay must be >= 1 or null (every feature), got {self.replay}")


class FeatureReplay:
    """A sliding window of labelled detect-time features ``(features (N, D), labels (N,), weights (N,))``."""

    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"replay must be >= 1, got {capacity}")
        self.capacity = capacity
        self.features = torch.empty(0)
        self.labels = torch.empty(0)
        self.weights = torch.empty(0)

    def __len__(self) -> int:
        return int(self.labels.numel())

    def add(self, features: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> None:
        keep = slice(-self.capacity if self.capacity is not None else None, None)
        if len(self) == 0:
            self.features, self.labels, self.weights = features.float(), labels.float(), weights.float()
        else:
            self.features = torch.cat([self.features, features.float()])
            self.labels = torch.cat([self.labels, labels.float()])
            self.weights = torch.cat([self.weights, weights.float()])
        self.features, self.labels, self.weights = self.features[keep], self.labels[keep], self.weights[keep]

    def state_dict(self) -> dict[str, torch.Tensor | int | None]:
        return {"capacity": self.capacity, "features": self.features, "labels": self.labels, "weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = None if state["capacity"] is None else int(state["capacity"])
        self.features, self.labels, self.weights = state["features"], state["labels"], state["weights"]


def head_update(
    head: QualityHead,
    optimizer: torch.optim.Optimizer,
    replay: FeatureReplay,
    steps: int,
    batch_size: int,
    generator: torch.Generator,
) -> float:
    """``steps`` minibatch BCE steps of the head on the replay window (features are detached: no
    gradient reaches the policy); weights normalised to mean 1 per minibatch. A standardising head first
    takes the window's moments. Returns the mean loss. Forward, loss and backward run in the head's own dtype
    under any autocast of the caller's (the trainer's mixed precision is the policy's, not the head's)."""
    with no_autocast():
        return _head_update(head, optimizer, replay, steps, batch_size, generator)


def _head_update(
    head: QualityHead,
    optimizer: torch.optim.Optimizer,
    replay: FeatureReplay,
    steps: int,
    batch_size: int,
    generator: torch.Generator,
) -> float:
    device = next(head.parameters()).device
    head.set_input_moments(replay.features)
    total = 0.0
    for _ in range(steps):
        idx = torch.randint(len(replay), (min(batch_size, len(replay)),), generator=generator)
        w = replay.weights[idx]
        loss = head.loss(replay.features[idx].to(device), replay.labels[idx].to(device), (w / w.mean()).to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
    return total / max(steps, 1)


def head_quality(
    scores: torch.Tensor,
    posteriors: torch.Tensor | None,
    labels: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    survival: torch.Tensor | None = None,
    joint: torch.Tensor | None = None,
) -> dict[str, float]:
    """Quality of head scores ``(N,)`` against final correctness ``labels (N,)`` (Fig. 2): ``accuracy`` of
    the raw logit at 0, ``auc``, ``spearman``, with calibrated ``posteriors (N,)`` their
    ``calibration_error`` (ECE) and ``posterior_accuracy`` (> 0.5), and with ``group_ids (N,)`` the
    ``within_auc`` over pairs of one group (what rules comparing a group's rollouts need). NaN where undefined.
    With ``survival (N,)``, the rows' survival probabilities p, both AUCs estimate those of every rollout before
    pruning, a pair counting 1/π_ij, the chance both survived (``joint``, the draw's pair chances; None: independent
    draws, 1/(p_i p_j); :func:`~arrol_pl.core.survivor_auc.survivor_aucs`); the other figures stay the survivors'."""
    labels = labels.float()
    nan = float("nan")
    survival = torch.ones(labels.shape, dtype=torch.float64) if survival is None else survival
    ids = torch.zeros(labels.shape, dtype=torch.long) if group_ids is None else group_ids
    pooled, within = survivor_aucs(scores, labels, ids, survival, joint)
    return {
        "within_auc": nan if group_ids is None else within,
        "accuracy": float(((scores > 0).float() == labels).float().mean()),
        "auc": pooled,
        "spearman": spearman(scores, labels),
        "calibration_error": nan if posteriors is None else expected_calibration_error(posteriors, labels),
        "posterior_accuracy": nan
        if posteriors is None
        else float(((posteriors > 0.5).float() == labels).float().mean()),
    }
