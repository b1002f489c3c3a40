"""The results page's opening table: one row per claim of the paper and policy (and the project's two own
questions), each with the paper's figure, this project's, the verdict on the paper's claim and the project's own
stricter targets in a column of their own. The README carries the same table (:func:`update_readme`).

Decisions:
- **A row's verdict is computed from its claims** (:class:`~.common.Claim`): all reproduced → reproduced; some
  reproduced → partly reproduced; all not distinguishable (inside their 95 % t intervals) → not distinguishable;
  otherwise not reproduced. A row whose claims carry
  no verdict of the paper's says ``—`` (a question of the project's own); a row with no claims says ``not run``.
- **Targets are counted, not merged into the verdict**: ``1.80× end to end: missed``, or ``met on 8 of 11`` where
  a target is judged per seed or run; a target judged per variant (its name in backticks first, as in ```mean`
  head above …``) is counted over the variants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.formatting import table_lines

from .common import NOT_DISTINGUISHABLE, Claim
from .paper import PAPER_FIG4_GAIN


@dataclass(frozen=True)
class Row:
    key: str
    claim: str
    policy: str
    paper: str


TINY, SMOL = "tiny", "SmolLM2-135M"
_BALANCE = "Pruned groups better balanced than random pruning (Table 4)"
_HEAD = "The quality head predicts correctness early, better than DeepConf (Fig. 2)"
_VOTES = "Head-weighted votes beat majority and DeepConf (Table 3)"
_TIME = "ARRoL's accuracy ≥ GRPO's in less training time (Fig. 4)"
_GAIN = f"+{PAPER_FIG4_GAIN[0]:.2f} to +{PAPER_FIG4_GAIN[1]:.2f} points, up to 1.7× faster"
HEADLINE: tuple[Row, ...] = (
    Row(
        "speed",
        "Faster end to end at κ = 0.5, generation gaining least (Table 5)",
        f"{TINY}, long answers",
        "1.61–1.70×",
    ),
    Row("kappa", "Faster still as κ falls (Table 6)", TINY, "2.33× at κ = 0.25"),
    Row("balance_tiny", _BALANCE, TINY, "E[ρ̂(1−ρ̂)] 0.23 vs 0.21"),
    Row("balance_smollm2", _BALANCE, SMOL, "E[ρ̂(1−ρ̂)] 0.23 vs 0.21"),
    Row("head_tiny", _HEAD, TINY, "accuracy ≈ 0.80"),
    Row("head_smollm2", _HEAD, SMOL, "accuracy ≈ 0.80"),
    Row("votes_tiny", _VOTES, TINY, "up to +8.33 points"),
    Row("votes_smollm2", _VOTES, SMOL, "up to +8.33 points"),
    Row("time_tiny", _TIME, TINY, _GAIN),
    Row("time_smollm2", _TIME, SMOL, _GAIN),
    Row("seeds", "The default experiment learns on every seed (project)", TINY, "—"),
    Row("screen", "Choosing the groups beats GRPO and DAPO at equal time (project, beyond the paper)", SMOL, "—"),
)
ROWS = {row.key: row for row in HEADLINE}
README_MARKERS = ("<!-- results-table:start -->", "<!-- results-table:end -->")


def row_verdict(claims: Sequence[Claim]) -> str:
    """The verdict of the paper's claim over a row's claims (module docstring)."""
    found = [c.paper for c in claims if c.paper]
    if not found:
        return "—" if claims else "not run"
    if all(v == "reproduced" for v in found):
        return "reproduced"
    if any(v in ("reproduced", "partly reproduced") for v in found):
        return "partly reproduced"
    return NOT_DISTINGUISHABLE if all(v == NOT_DISTINGUISHABLE for v in found) else "not reproduced"


def row_targets(claims: Sequence[Claim]) -> str:
    """The project's targets over a row's claims, each counted (``what: met``, ``what: met on 2 of 5``)."""
    counts: dict[str, list[bool]] = {}
    for claim in claims:
        for what, met in claim.targets:
            counts.setdefault(re.sub(r"^`[^`]+` ", "", what), []).append(met)
    cells = []
    for what, mets in counts.items():
        outcome = (
            ("met" if all(mets) else "missed")
            if len(mets) == 1
            else ("met" if all(mets) else f"met on {sum(mets)} of {len(mets)}")
        )
        cells.append(f"{what}: {outcome}")
    return "; ".join(cells)


def headline_table(claims: Sequence[Claim], anchors: dict[str, str] | None = None, brief: bool = False) -> list[str]:
    """The opening table's lines from every claim on the page. ``anchors``: row key → a link target to put on the
    row's verdict (the page's first section that judges it). ``brief`` (the README's copy): no column of the
    project's own targets (they stay on the page), and of a row's measurements the first, with how many more the
    page gives."""
    unknown = sorted({c.row for c in claims} - set(ROWS))
    if unknown:
        raise ValueError(f"claims name unknown headline rows {unknown}; the rows are {list(ROWS)}")
    rows = []
    for row in HEADLINE:
        mine = [c for c in claims if c.row == row.key]
        shown = [c.here for c in mine if c.here]
        if brief and len(shown) > 1:
            shown = [f"{shown[0]} (+{len(shown) - 1} more on the page)"]
        here = "; ".join(shown) or ("—" if mine else "not run")
        verdict = row_verdict(mine)
        if verdict not in ("—", "not run"):
            verdict = f"**{verdict}**"
        if anchors and row.key in anchors:
            verdict = f"{verdict} ([§]({anchors[row.key]}))"
        rows.append([row.claim, row.policy, row.paper, here, verdict] + ([] if brief else [row_targets(mine) or "—"]))
    full = ["claim", "policy", "paper", "here", "verdict on the paper's claim", "project's own target"]
    return table_lines(["claim", "policy", "paper", "here", "verdict"] if brief else full, rows)


def update_readme(readme: Path, table: Sequence[str]) -> bool:
    """Put ``table`` between the README's markers (links made relative to the README); False when it has none."""
    text = readme.read_text()
    start, end = README_MARKERS
    if start not in text or end not in text:
        return False
    block = "\n".join(re.sub(r"\]\(#", "](docs/results.md#", line) for line in table)
    head, rest = text.split(start, 1)
    readme.write_text(f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}")
    return True


def readme_block(readme: Path) -> list[str]:
    """The table the README carries between its markers ([] when it has none)."""
    text = readme.read_text()
    start, end = README_MARKERS
    if start not in text or end not in text:
        return []
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n").split("\n")
