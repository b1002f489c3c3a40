"""The arms of the pruning study (``+exp=pruning_pays``) read from its sweep: each arm's runs by seed, the AUC it stands
at on the break-even axis, its difference to GRPO G = 8 and its time to GRPO's final accuracy. Section 13
(:mod:`.pruning_pays`) states the decisions; this module reads the runs by them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.history import read_history
from arrol_pl.analysis.runs import PairedDifference, heldout_curve, paired_difference
from arrol_pl.analysis.sweep import SEED_OVERRIDE
from arrol_pl.core.metrics import reach_share
from arrol_pl.core.pruning import DEFAULT_BALANCE_TARGET
from arrol_pl.train.records.summary import RunSummary

from .ladder import LEGACY_RULE, rule_name

BASELINE, CONTROL = "grpo", "grpo_g4"
SCORERS = {
    "arrol": "the learned head",
    "arrol_confidence": "DeepConf",
    "arrol_checker": "the checker",
    "random": "random pruning",
}
"""The arms (by ``arm=``) drawn as marked points of the break-even figure, by what their decisions read."""
TITLES = {BASELINE: "GRPO G = 8", CONTROL: "GRPO G = 4", "grpo_screen": "GRPO + prompt screen", **SCORERS}
ORDER = (BASELINE, CONTROL, "random", "arrol", "arrol_confidence", "arrol_checker", "grpo_screen", "oracle")
WITHIN, POOLED, SET, NO_SCORE = "within groups", "pooled", "set", "no score"
"""What an arm's AUC is (:class:`AucReading`)."""


@dataclass(frozen=True)
class AucReading:
    """Where an arm stands on the break-even axis, and what that figure is (module docstring)."""

    value: float
    basis: str
    """:data:`WITHIN` (realised within groups), :data:`POOLED` (realised over all survivors: runs that predate the
    within-group record), :data:`SET` (an oracle's set AUC) or :data:`NO_SCORE` (random pruning, 0.5)."""

    def text(self, spec: str = ".3f") -> str:
        """The AUC as the page writes it, marked where it is not one realised within groups."""
        return f"{self.value:{spec}}" + (f" ({self.basis})" if self.basis in (POOLED, SET) else "")


def _recorded(value: float | None, fallback: float | None) -> float | None:
    """``value``, or ``fallback`` where ``value`` was not recorded; None where neither is a finite figure."""
    for v in (value, fallback):
        if v is not None and math.isfinite(v):
            return v
    return None


@dataclass
class Arm:
    """One arm of the study: its label (:func:`study_arms`) and its runs by seed."""

    label: str
    runs: dict[int, RunSummary]

    @property
    def name(self) -> str:
        """The arm's preset (its ``arm=`` override; empty without one)."""
        return next((o.split("=", 1)[1] for o in self.label.split() if o.startswith("arm=")), "")

    @property
    def pruning(self) -> dict:
        return next(iter(self.runs.values())).config.get("pruning", {})

    @property
    def oracle_auc(self) -> float | None:
        """The oracle's set AUC (None: another scorer)."""
        return float(self.pruning.get("oracle_auc", 1.0)) if self.pruning.get("scorer") == "oracle" else None

    @property
    def rule(self) -> str:
        """The survival rule the arm's decisions follow (``pruning.balance_target``; Eq. 2 where none was recorded)."""
        return self.pruning.get("balance_target", LEGACY_RULE)

    @property
    def default_rule(self) -> bool:
        """Whether the arm prunes by the default survival rule, the one the bare ``arm=oracle`` ladder runs."""
        return self.rule == DEFAULT_BALANCE_TARGET

    @property
    def pruned(self) -> bool:
        return self.pruning.get("policy", "none") != "none"

    @property
    def title(self) -> str:
        """What the text calls the arm; a survival rule other than the default is named after it."""
        title = (
            f"the oracle at AUC {self.oracle_auc}"
            if self.oracle_auc is not None
            else TITLES.get(self.name, f"`{self.label}`")
        )
        by_rule = self.pruned and self.pruning.get("policy") == "arrol" and not self.default_rule
        return f"{title} ({rule_name(self.rule)})" if by_rule else title

    def auc_reading(self) -> AucReading | None:
        """The AUC within groups of what the decisions read, or what stands in for it (module docstring); None
        without pruning or any record."""
        if self.pruning.get("policy") == "random":
            return AucReading(0.5, NO_SCORE)
        if not self.pruned:
            return None
        head = self.pruning.get("scorer", "head") == "head"
        runs = self.runs.values()
        within = [
            _recorded(r.scorer_within_auc_after_cold_start, r.head_within_auc_after_cold_start if head else None)
            for r in runs
        ]
        if all(v is not None for v in within):
            return AucReading(statistics.mean(within), WITHIN)
        if self.oracle_auc is not None:
            return AucReading(self.oracle_auc, SET)
        pooled = [
            v
            for r in runs
            if (v := _recorded(r.scorer_auc_after_cold_start, r.head_auc_after_cold_start if head else None))
            is not None
        ]
        return AucReading(statistics.mean(pooled), POOLED) if pooled else None

    def auc(self) -> float | None:
        """The arm's place on the break-even axis (:meth:`auc_reading`)."""
        reading = self.auc_reading()
        return None if reading is None else reading.value


def study_arms(runs: Sequence[RunSummary]) -> list[Arm]:
    """The sweep's runs by arm (module docstring), GRPO G = 8 first, then :data:`ORDER`, the oracle ladders (the
    default rule's first, then each other survival rule's) from the highest AUC down."""
    shared = set.intersection(*(set(r.overrides) for r in runs)) if len(runs) > 1 else set()
    by_label: dict[str, dict[int, RunSummary]] = {}
    for run in runs:
        label = " ".join(
            o for o in run.overrides if not o.startswith(SEED_OVERRIDE) and (o.startswith("arm=") or o not in shared)
        )
        by_label.setdefault(label or "all", {})[run.config.get("trainer", {}).get("seed", 0)] = run
    arms = [Arm(label, dict(sorted(seeds.items()))) for label, seeds in by_label.items()]
    return sorted(
        arms,
        key=lambda a: (
            ORDER.index(a.name) if a.name in ORDER else len(ORDER),
            not a.default_rule,
            a.rule,
            -(a.oracle_auc or 0),
            a.label,
        ),
    )


def named(arms: Sequence[Arm], name: str) -> Arm | None:
    """The first arm whose ``arm=`` is ``name``."""
    return next((a for a in arms if a.name == name), None)


def versus(arm: Arm, base: Arm | None) -> PairedDifference | None:
    """``arm``'s held-out accuracy after minus ``base``'s over the seeds both ran (None: none, or no ``base``)."""
    pairs = [(seed, base.runs[seed], run) for seed, run in arm.runs.items() if seed in base.runs] if base else []
    return paired_difference(pairs) if pairs and arm is not base else None


def curve(run: RunSummary) -> list[tuple[float, float]]:
    """A run's held-out curve (training seconds, the oracle's credited); empty without a history."""
    return heldout_curve(run) if (Path(run.run_dir) / "history.jsonl").exists() else []


def reach_shares(arm: Arm, base: Arm) -> list[tuple[int, float | None]]:
    """Per seed both arms ran with held-out curves: when ``arm`` first reaches ``base``'s final held-out accuracy
    of the same seed, as a share of the time ``base`` itself first reached it
    (:func:`~arrol_pl.core.metrics.reach_share`: 1.0 for ``base`` against itself; None: never; NaN: ``base`` ended
    no higher than it began)."""
    out = []
    for seed, run in arm.runs.items():
        ours, theirs = curve(run), curve(base.runs[seed]) if seed in base.runs else []
        if len(ours) > 1 and len(theirs) > 1:
            out.append((seed, reach_share(ours, theirs)))
    return out


def median_share(shares: Sequence[tuple[int, float | None]]) -> float | None:
    """The median of :func:`reach_shares` (a seed that never reached counts as infinitely late; a seed whose GRPO
    run ended no higher than it began has no time to compare with and is left out; None: no seed left)."""
    kept = [math.inf if s is None else s for _, s in shares if s is None or not math.isnan(s)]
    return statistics.median(kept) if kept else None


def share_text(share: float | None) -> str:
    """A share of GRPO's time to its final accuracy as the page writes it (``never``: not reached; ``n/a``: GRPO
    ended no higher than it began)."""
    if share is None or math.isinf(share):
        return "never"
    return "n/a" if math.isnan(share) else f"{share:.2f}"


def credited_share(run: RunSummary) -> float | None:
    """The oracle's credit as a share of the run's measured training seconds (None: not an oracle run)."""
    if run.credited_seconds is None or not (Path(run.run_dir) / "history.jsonl").exists():
        return None
    walls = [h["time/wall"] for h in read_history(Path(run.run_dir)) if "time/wall" in h]
    return run.credited_seconds / walls[-1] if walls and walls[-1] > 0 else None
