"""What every section of the results page shares: reading a part's JSON, and a verdict (:class:`Claim`)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NOT_DISTINGUISHABLE = "not distinguishable"
"""The verdict on a claim whose comparison lies inside its 95 % t interval: stated with the effect it could have
detected (:mod:`arrol_pl.analysis.significance`), never as a tie."""
PAPER_VERDICTS = ("reproduced", "partly reproduced", NOT_DISTINGUISHABLE, "not reproduced")
"""What the page can say of a claim of the paper."""
FORMER_VERDICTS = {"tied within noise": NOT_DISTINGUISHABLE}
FORMER_CRITERION = "two standard errors"
"""The cutoff kept claims were once judged by; :meth:`Claim.from_json` judges them again from their own figures."""
SEED_FIGURES = re.compile(r"([+-]?\d+\.\d+) ± (\d+\.\d+) over (\d+) seed")
"""Verdicts a page's claims (``docs/results.json``) were written with before, and what they read as now."""


def load_json(path: Path) -> Any:
    """The JSON a part wrote at ``path``; None when the part did not run."""
    return json.loads(path.read_text()) if path.exists() else None


def verdict(ok: bool) -> str:
    """The verdict on a claim of the paper that either holds here or does not."""
    return "reproduced" if ok else "not reproduced"


@dataclass(frozen=True)
class Claim:
    """One verdict of the results page: what was measured, the verdict on the paper's claim, and the project's own
    targets, kept apart (a missed target of the project's never reads as a claim of the paper not reproduced).

    ``row`` is the opening table's row the claim counts toward (:data:`~.headline.HEADLINE`); ``here`` is what that
    row shows of it (empty: nothing, the claim is only listed). A claim with neither a paper verdict nor targets is
    context (a baseline against another) and has no verdict."""

    row: str
    text: str
    paper: str | None = None
    """The verdict on the paper's claim (:data:`PAPER_VERDICTS`); None: not a claim of the paper."""
    targets: tuple[tuple[str, bool], ...] = ()
    """The project's own targets, each (what it asks, met)."""
    detail: str = ""
    """Text after the verdicts (the criterion, in brackets, or ``: why``)."""
    here: str = ""

    def __post_init__(self) -> None:
        if self.paper is not None and self.paper not in PAPER_VERDICTS:
            raise ValueError(f"paper verdict {self.paper!r}; choose one of {PAPER_VERDICTS}")

    def line(self) -> str:
        """The claim as the page lists it: ``text — **verdict**; project target (…): **met**detail.``"""
        verdicts = [f"**{self.paper}**"] if self.paper else []
        verdicts += [f"project target ({what}): **{'met' if met else 'missed'}**" for what, met in self.targets]
        return self.text + (" — " + "; ".join(verdicts) if verdicts else "") + self.detail + "."

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "targets": [list(t) for t in self.targets]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Claim":
        paper = data.get("paper")
        claim = cls(
            **{
                **data,
                "paper": FORMER_VERDICTS.get(paper, paper),
                "targets": tuple((what, bool(met)) for what, met in data.get("targets", ())),
            }
        )
        return claim.restated()

    def restated(self) -> "Claim":
        """A claim kept from a page that judged a difference over seeds by two standard errors, judged again as the
        page judges now (:class:`~arrol_pl.analysis.significance.Estimate`: its 95 % t interval on seeds − 1
        degrees of freedom) from the mean ± SE and seed count its text records; any other claim as it is."""
        found = SEED_FIGURES.search(self.text)
        stale = FORMER_CRITERION in self.detail or any(FORMER_CRITERION in what for what, _ in self.targets)
        if not stale or found is None or int(found.group(3)) < 2:
            return self
        from arrol_pl.analysis.significance import INTERVAL, Estimate

        e = Estimate(float(found.group(1)), float(found.group(2)), int(found.group(3)) - 1)
        paper = (
            None
            if self.paper is None
            else "reproduced"
            if e.ahead
            else NOT_DISTINGUISHABLE
            if e.mean >= 0
            else "not reproduced"
        )
        targets = tuple(
            (re.sub(r"by more than two standard errors", f"beyond {INTERVAL}", what), e.ahead)
            if FORMER_CRITERION in what
            else (what, met)
            for what, met in self.targets
        )
        return Claim(
            self.row,
            self.text,
            paper,
            targets,
            f": {e.standing()} (judged again from the figures over the seeds; the runs predate the page's t intervals)",
            self.here,
        )


def parity(data: dict) -> str:
    """How closely a probe's features matched the engine's: the hidden state's, and the prefix statistics' when
    the engine computed them too."""
    p = data["feature_parity"]
    text = f"{p['max_abs_diff']:.1e}"
    if p.get("stats_max_abs_diff") is not None:
        text += f" (hidden state; prefix statistics to {p['stats_max_abs_diff']:.1e})"
    return text
