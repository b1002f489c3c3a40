"""The quality head (paper §4.2): a 2-layer MLP from a rollout's detect-time feature to a success logit.

Decisions: the paper's input is the final-layer hidden state at the detection token (``last``; the engine
extracts it, see :mod:`arrol_pl.engine`). Beyond the paper the head can read the prefix statistics of the
sampled log-probs (``stats``, :func:`~arrol_pl.core.confidence.prefix_statistics`) or both concatenated
(``last+stats``): :data:`HEAD_INPUTS`. Features of mixed scales (any with ``stats``) are z-scored inside
the head with moments it stores as buffers (:meth:`QualityHead.set_input_moments`, refreshed from the
replay window before each update), so the engine's copy standardises exactly as the trainer's. The head
is trained with binary cross-entropy on *detached* features so no gradient reaches the backbone
(§4.3 (iii)); its raw output is an uncalibrated logit that the
:class:`~arrol_pl.core.calibration.BinnedCalibrator` maps to a posterior.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from arrol_pl.core.autocast import no_autocast
from arrol_pl.core.confidence import PREFIX_STATISTICS

HEAD_INPUTS = ("last", "stats", "last+stats")
"""What the head reads: the paper's final-layer hidden state, the prefix log-prob statistics, or both."""


def check_head_input(kind: str, key: str = "input") -> str:
    """``kind`` if it is one of :data:`HEAD_INPUTS`, else a ValueError naming ``key``."""
    if kind not in HEAD_INPUTS:
        raise ValueError(f"{key}={kind!r}; choose one of {list(HEAD_INPUTS)}")
    return kind


def head_input_dim(kind: str, hidden_size: int) -> int:
    """Feature width of head input ``kind`` on a policy of hidden size ``hidden_size``."""
    check_head_input(kind)
    return ("last" in kind.split("+")) * hidden_size + ("stats" in kind.split("+")) * len(PREFIX_STATISTICS)


class QualityHead(nn.Module):
    """``[z-score →] Linear(D, H) → GELU → Linear(H, 1)``; ``forward(features: (N, D)) -> (N,)`` logits.

    ``input_kind`` records what the features are (:data:`HEAD_INPUTS`, or a probe's own kind); ``standardize``
    (default: when the input holds ``stats``) z-scores them with the stored moments (identity until set).
    """

    def __init__(
        self, input_dim: int, hidden_dim: int = 256, input_kind: str = "last", standardize: bool | None = None
    ) -> None:
        super().__init__()
        if input_dim <= 0 or hidden_dim <= 0:
            raise ValueError(f"QualityHead needs positive sizes, got input_dim={input_dim}, hidden_dim={hidden_dim}")
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.input_kind = input_kind
        self.standardize = "stats" in input_kind.split("+") if standardize is None else bool(standardize)
        if self.standardize:
            self.register_buffer("input_mean", torch.zeros(input_dim))
            self.register_buffer("input_std", torch.ones(input_dim))
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, 1)

    @torch.no_grad()
    def set_input_moments(self, features: torch.Tensor) -> None:
        """Standardising heads: take the mean and (population) std of ``features: (N, D)`` as the input moments;
        a constant column keeps its scale (std clamped to 1e-6). Others: nothing to do."""
        if not self.standardize or features.numel() == 0:
            return
        f = features.to(device=self.input_mean.device, dtype=torch.float32)
        self.input_mean.copy_(f.mean(0))
        self.input_std.copy_(f.std(0, correction=0).clamp_min(1e-6))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-1] != self.input_dim:
            raise ValueError(
                f"QualityHead expects features of size {self.input_dim}, got shape {tuple(features.shape)}"
            )
        x = features.to(self.fc1.weight.dtype)
        if self.standardize:
            x = (x - self.input_mean.to(x.dtype)) / self.input_std.to(x.dtype)
        with no_autocast():  # the head's dtype, not a mixed-precision trainer's (arrol_pl.core.autocast)
            return self.fc2(F.gelu(self.fc1(x))).squeeze(-1)

    def loss(self, features: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """BCE-with-logits on detached features. ``features: (N, D)``, ``labels: (N,)`` in {0, 1}."""
        logits = self(features.detach())
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), weight=weights)

    def save(self, path: Path | str) -> None:
        """Weights, sizes and input kind in one file (``quality_head.pt`` of an exported run), readable by
        :meth:`load`."""
        torch.save(
            {
                "state_dict": self.state_dict(),
                "input_dim": self.input_dim,
                "hidden_dim": self.hidden_dim,
                "input_kind": self.input_kind,
                "standardize": self.standardize,
            },
            path,
        )

    @classmethod
    def load(cls, path: Path | str) -> "QualityHead":
        """A head written by :meth:`save`, on CPU in eval mode; read with ``weights_only`` (tensors and plain
        types only: nothing in the file is executed). Files from before head inputs read as ``last``."""
        blob = torch.load(path, map_location="cpu", weights_only=True)
        head = cls(
            int(blob["input_dim"]),
            int(blob["hidden_dim"]),
            str(blob.get("input_kind", "last")),
            bool(blob.get("standardize", False)),
        )
        head.load_state_dict(blob["state_dict"])
        return head.eval()

    @classmethod
    def for_input(cls, input_kind: str, hidden_size: int, hidden_dim: int = 256) -> "QualityHead":
        """A fresh head reading ``input_kind`` features of a policy with hidden size ``hidden_size``."""
        return cls(head_input_dim(input_kind, hidden_size), hidden_dim, input_kind)

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor], input_kind: str = "last") -> "QualityHead":
        """A head shaped by ``state`` (sizes from ``fc1.weight``, standardising when it holds input moments)."""
        weight = state["fc1.weight"]
        head = cls(int(weight.shape[1]), int(weight.shape[0]), input_kind, "input_mean" in state)
        head.load_state_dict(state)
        return head
