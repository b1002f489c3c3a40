"""The quality head (paper §4.2): a 2-layer MLP from a policy hidden state to a success logit.

Decisions: the input is the final-layer hidden state at the detection token (the engine extracts it,
see :mod:`arrol_pl.engine`); the head is trained with binary cross-entropy on *detached* features so
no gradient reaches the backbone (§4.3 (iii)); its raw output is an uncalibrated logit that the
:class:`~arrol_pl.core.calibration.BinnedCalibrator` maps to a posterior.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class QualityHead(nn.Module):
    """``Linear(D, H) → GELU → Linear(H, 1)``; ``forward(features: (N, D)) -> (N,)`` logits."""

    def __init__(self, input_dim: int, hidden_dim: int = 256) -> None:
        super().__init__()
        if input_dim <= 0 or hidden_dim <= 0:
            raise ValueError(f"QualityHead needs positive sizes, got input_dim={input_dim}, hidden_dim={hidden_dim}")
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-1] != self.input_dim:
            raise ValueError(
                f"QualityHead expects features of size {self.input_dim}, got shape {tuple(features.shape)}"
            )
        x = features.to(self.fc1.weight.dtype)
        return self.fc2(F.gelu(self.fc1(x))).squeeze(-1)

    def loss(self, features: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """BCE-with-logits on detached features. ``features: (N, D)``, ``labels: (N,)`` in {0, 1}."""
        logits = self(features.detach())
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), weight=weights)

    def save(self, path: Path | str) -> None:
        """Weights and sizes in one file (``quality_head.pt`` of an exported run), readable by :meth:`load`."""
        torch.save({"state_dict": self.state_dict(), "input_dim": self.input_dim, "hidden_dim": self.hidden_dim}, path)

    @classmethod
    def load(cls, path: Path | str) -> "QualityHead":
        """A head written by :meth:`save`, on CPU in eval mode; read with ``weights_only`` (tensors and plain
        types only: nothing in the file is executed)."""
        blob = torch.load(path, map_location="cpu", weights_only=True)
        head = cls(int(blob["input_dim"]), int(blob["hidden_dim"]))
        head.load_state_dict(blob["state_dict"])
        return head.eval()
