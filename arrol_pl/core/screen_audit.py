"""The group screen's audit: which groups run to completion whatever is decided, and what their rewards say of the
screen (zero-advantage counts per stage, summed over a run into the screen's, random's and the oracle's precisions).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


def audit_mask(num_groups: int, share: float, generator: torch.Generator) -> torch.Tensor:
    """``(num_groups,)`` bool: each group audited with probability ``share``, independently of the screen."""
    return torch.rand(num_groups, generator=generator) < share


def zero_variance(rewards: torch.Tensor) -> bool:
    """Whether one group's rewards ``(G,)`` all agree (zero GRPO advantage)."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    return bool(rewards.numel() == 0 or (rewards == rewards[0]).all())


@dataclass
class AuditCounts:
    """What one stage's audit saw: audited groups, how many of them the screen dropped, and how many of each
    had zero advantage once complete. Summed over steps (``+``), it gives the run's precisions."""

    audited: int = 0
    audited_zero: int = 0
    screened: int = 0
    """Audited groups the screen dropped."""
    screened_zero: int = 0
    dropped_share_sum: float = 0.0
    """Σ over audited groups of the stage's dropped share at their step (the oracle drops the same share)."""

    def __add__(self, other: "AuditCounts") -> "AuditCounts":
        return AuditCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def from_mapping(cls, values: dict, prefix: str = "") -> "AuditCounts":
        """From ``values[prefix + field]`` (a history row's floats, or a summary's counts)."""
        return cls(**{f.name: type(getattr(cls(), f.name))(values[prefix + f.name]) for f in fields(cls)})

    @classmethod
    def of_step(cls, zero: torch.Tensor, screened: torch.Tensor, dropped_share: float) -> "AuditCounts":
        """From the audited groups of one step: ``zero (n,)`` bool, ``screened (n,)`` bool."""
        zero, screened = torch.as_tensor(zero, dtype=torch.bool), torch.as_tensor(screened, dtype=torch.bool)
        return cls(
            int(zero.numel()),
            int(zero.sum()),
            int(screened.sum()),
            int((zero & screened).sum()),
            float(dropped_share) * int(zero.numel()),
        )

    def precisions(self) -> dict[str, float]:
        """``screen``: zero-advantage share of the dropped groups; ``random``: of all groups (what a random screen
        drops); ``oracle``: of a perfect screen's dropped groups, ``min(1, random / dropped share)``;
        ``progress``: (screen − random) / (oracle − random), 1 at the oracle. NaN where nothing was seen."""
        nan = float("nan")
        screen = self.screened_zero / self.screened if self.screened else nan
        rand = self.audited_zero / self.audited if self.audited else nan
        share = self.dropped_share_sum / self.audited if self.audited else nan
        oracle = min(1.0, rand / share) if self.audited and share > 0 else nan
        gap = oracle - rand
        progress = (screen - rand) / gap if gap == gap and screen == screen and gap > 0 else nan
        return {"screen": screen, "random": rand, "oracle": oracle, "progress": progress}


def counts_metrics(stage: str, counts: AuditCounts) -> dict[str, float]:
    return {f"screen/{stage}_audit_{k}": float(v) for k, v in vars(counts).items()}


def audit_totals(history: list[dict[str, float]], stage: str) -> AuditCounts:
    """A run's audit for ``stage`` (``prompt`` | ``detect``): the per-step counts summed."""
    total = AuditCounts()
    for h in history:
        if f"screen/{stage}_audit_audited" in h:
            total = total + AuditCounts.from_mapping(h, f"screen/{stage}_audit_")
    return total
