"""The results page itself: the header, the summary of what reproduced, how to read it, then every section
(:mod:`results_page`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Sequence

from arrol_pl.analysis.runs import pick, sweep_runs
from arrol_pl.train.records.summary import RunSummary

from .common import Claim, load_json
from .default_task import (
    section_balance,
    section_head,
    section_kappa,
    section_phases,
    section_seeds,
    section_voting,
    section_wallclock,
)
from .grad_probe import section_grad_probe
from .headline import headline_table
from .online import restated_direction, section_online, section_online_balance, section_online_spread
from .peers import section_peers
from .pretrained import restated_replay_claim, section_pretrained
from .pruning_pays import section_pruning_pays
from .records import KEPT, kept_line, records_path
from .screen import section_screen


def reading(kappa_runs: list[RunSummary]) -> list[str]:
    """How to read the verdicts, from how well the online head predicted correctness."""
    online = pick(kappa_runs, keep_ratio=0.5, policy="arrol")
    auc = online.head_auc_after_cold_start if online else None
    if auc is None:
        return []
    if auc < 0.65:
        return [
            f"Reading: the online quality head barely predicts correctness here (AUC {auc:.2f} after the cold "
            "start). Pruning then acts close to random, so the effects that need a predictive head (balance, "
            "votes, accuracy at equal steps) cannot show on this policy; the speed effects need none and are "
            "what this machine can test. A policy whose hidden state carries the signal (the paper's 1.7B–8B "
            "models) is needed for the rest: the same scripts take `model=`/`data=` overrides.",
            "",
        ]
    return [f"Reading: the online quality head predicts correctness with AUC {auc:.2f} after the cold start.", ""]


SECTION_KEYS = (
    "phases",
    "balance",
    "head",
    "kappa",
    "voting",
    "wallclock",
    "pretrained",
    "online",
    "seeds",
    "online_balance",
    "online_spread",
    "screen",
    "pruning_pays",
    "grad_probe",
    "peers",
)
"""The page's sections in order (section n is ``SECTION_KEYS[n - 1]``), named as ``write_results.py --sections``
takes them."""


def anchor(heading: str) -> str:
    """The link target a Markdown renderer gives a heading (``## 9. The default …`` → ``9-the-default-…``)."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def split_page(text: str) -> dict[int, str]:
    """An existing page's section bodies, by section number."""
    return {
        int(m.group(1)): m.group(0).rstrip("\n")
        for m in re.finditer(r"^## (\d+)\. .*?(?=^## |\Z)", text, flags=re.M | re.S)
    }


def claims_path(page: Path) -> Path:
    """Where the page's claims are kept as data (``docs/results.json`` beside ``docs/results.md``): the README's
    table and a rebuild of some sections read them."""
    return page.with_suffix(".json")


def read_claims(page: Path) -> dict[int, list[Claim]]:
    """The claims a page was built with, by section number ({} when it has none)."""
    data = load_json(claims_path(page))
    claims: dict[int, list[Claim]] = {}
    for entry in (data or {}).get("claims", []):
        entry = dict(entry)
        claims.setdefault(int(entry.pop("section")), []).append(Claim.from_json(entry))
    return claims


def headline(claims: dict[int, list[Claim]], anchors: dict[int, str], brief: bool = False) -> list[str]:
    """The headline table's lines, each row's verdict linked to the first section that judges it (``brief``: the
    README's, :func:`~.headline.headline_table`)."""
    first: dict[str, str] = {}
    for number in sorted(claims):
        for claim in claims[number]:
            first.setdefault(claim.row, f"#{anchors[number]}")
    return headline_table([c for n in sorted(claims) for c in claims[n]], first, brief)


def page_headline(page: Path, brief: bool = True) -> list[str]:
    """The headline table of a built page, from its claims file and its section headings (by default the brief
    one the README carries)."""
    anchors = {n: anchor(body.split("\n", 1)[0]) for n, body in split_page(page.read_text()).items()}
    return headline(read_claims(page), anchors, brief)


def opening(claims: dict[int, list[Claim]], anchors: dict[int, str]) -> list[str]:
    """The page's opening: the headline table, then every claim by section."""
    every = [f"- [§{n}](#{anchors[n]}) {c.line()}" for n in sorted(claims) for c in claims[n]]
    return [
        "## What reproduced and what did not",
        "",
        "One row per claim of the paper and policy, and the project's own two questions. The verdict is on the "
        "paper's claim; the project's stricter targets have a column of their own. Every claim behind a row is "
        "listed below the table and judged in its section.",
        "",
        *headline(claims, anchors),
        "",
        "### Every claim, by section",
        "",
        *every,
        "",
    ]


def intro(page: Path) -> list[str]:
    """The page's title and how it is made."""
    records = records_path(page).relative_to(page.parent).as_posix()
    return [
        "# Results: ARRoL measured the way the paper measures it",
        "",
        f"Generated by `python experiments/write_results.py` from the records in [{records}/]({records}/), which "
        "`python experiments/reproduce.py` (`make results`) collects from its outputs; do not edit by hand. A "
        "section whose records were never collected is kept from the page as it stood and says so under its "
        "heading.",
        "",
    ]


RESTATED: dict[str, tuple[Callable[[Claim], Claim] | None, Callable[[list[str]], list[str]] | None]] = {
    "pretrained": (restated_replay_claim, None),
    "online_balance": (None, restated_direction),
}
"""Per section, how its renderer words a kept claim and a kept text now, from the figures they record (claims of
a page judged by two standard errors are judged again when read: :meth:`.common.Claim.restated`)."""


def unmarked(body: list[str]) -> list[str]:
    """A section's lines without the line that marks it kept (:func:`~.records.kept_line`) and the blank after it."""
    return body[:2] + body[4:] if body[2:3] and body[2].startswith(KEPT) else body


def kept_section(key: str, body: list[str], claims: list[Claim]) -> tuple[list[str], list[Claim]]:
    """A section kept from the page as it stands (:func:`unmarked`): its text and claims as its renderer words them
    now (:data:`RESTATED`), with the line that says it was kept (:func:`~.records.kept_line`) under its heading."""
    claim_rule, body_rule = RESTATED.get(key, (None, None))
    if claim_rule:
        claims = [claim_rule(c) for c in claims]
    if body_rule:
        body = body_rule(body)
    return [body[0], "", kept_line(key), "", *body[2:]], claims


def build_page(root: Path, page: Path, only: Sequence[str] | None = None) -> str:
    """Write ``page`` (and its figures beside it) from the results directory ``root`` (or the page's records,
    :mod:`.records`, in the same layout); returns the text.

    ``only``: rebuild these sections (``SECTION_KEYS``) from ``root`` and keep every other section, its body and
    its claims, as the existing ``page`` and its claims file (:func:`claims_path`) have them, under a line that says
    so (:func:`kept_section`); a section the page has no more of than ``root`` gives (one not run) and every section
    of a page not written yet are built from ``root``."""
    root, page = Path(root), Path(page)
    unknown = sorted(set(only or ()) - set(SECTION_KEYS))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choose from {list(SECTION_KEYS)}")
    partial = only is not None and set(only) != set(SECTION_KEYS)
    old = page.read_text() if partial and page.is_file() else ""
    kept_bodies, kept_claims = split_page(old), read_claims(page) if old else {}
    if old and not kept_bodies:
        raise ValueError(f"{page} has no sections to keep: build the whole page (without sections)")
    if old and not claims_path(page).is_file():
        raise ValueError(
            f"{claims_path(page)} (the claims of the sections to keep) is missing: build the whole page "
            "(without sections)"
        )
    figures = page.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    manifest = load_json(root / "manifest.json") or {"parts": {}}
    phases = load_json(root / "phases" / "phases.json")
    machine = phases["machine"] if phases else None
    kappa_runs = sweep_runs(root / "kappa")  # read once: five sections use these runs
    sections: list[Callable[[], tuple[list[str], list[Claim]]]] = [
        lambda: section_phases(root),
        lambda: section_balance(root, kappa_runs),
        lambda: section_head(root, kappa_runs, figures, page.parent),
        lambda: section_kappa(kappa_runs),
        lambda: section_voting(root),
        lambda: section_wallclock(root, kappa_runs, figures, page.parent),
        lambda: section_pretrained(root, figures, page.parent),
        lambda: section_online(root),
        lambda: section_seeds(root, figures, page.parent),
        lambda: section_online_balance(root),
        lambda: section_online_spread(root),
        lambda: section_screen(root),
        lambda: section_pruning_pays(root, figures, page.parent),
        lambda: section_grad_probe(root),
        lambda: section_peers(root),
    ]
    bodies: list[str] = []
    claims: dict[int, list[Claim]] = {}
    anchors: dict[int, str] = {}
    for number, (key, make) in enumerate(zip(SECTION_KEYS, sections), start=1):
        body, found = make()
        if partial and key not in only and number in kept_bodies:  # kept, unless the page has no more than root
            earlier = unmarked(kept_bodies[number].split("\n"))
            if earlier != body:
                body, found = kept_section(key, earlier, kept_claims.get(number, []))
        bodies.append("\n".join(body))
        anchors[number] = anchor(body[0])
        if found:
            claims[number] = found
    header = intro(page)
    if old:  # some sections kept: the machine and the parts as the page has them
        header += [
            line
            for line in old.split("\n## What reproduced and what did not", 1)[0].split("\n")
            if line.startswith(("Machine:", "Measurement parts", "**Quick"))
        ]
    else:
        parts = {k: p for k, p in manifest.get("parts", {}).items() if k != "page"}
        if machine:
            header.append(
                f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine.get('gpu') or 'none'}; "
                f"Python {machine['python']}, torch {machine.get('torch')}, vLLM {machine.get('vllm')}."
            )
        if parts:
            header.append(
                f"Measurement parts took {sum(p['seconds'] for p in parts.values()) / 60:.1f} min in total: "
                + ", ".join(f"{k} {p['seconds']:.0f} s" for k, p in parts.items())
                + "."
            )
        if manifest.get("quick"):
            header.append("**Quick smoke run: a few steps per part, the figures mean nothing.**")
    if old and "kappa" not in only:  # the reading of the page, whose κ runs are kept
        summary = old.split("\n## 1. ", 1)[0]
        read = [line for line in summary.split("\n") if line.startswith("Reading: ")]
        header += ["", *opening(claims, anchors)] + ([*read, ""] if read else [])
    else:
        header += ["", *opening(claims, anchors)] + reading(kappa_runs)
    text = "\n".join(header) + "\n" + "\n\n".join(bodies) + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    claims_path(page).write_text(
        json.dumps(
            {"claims": [{"section": n, **c.to_json()} for n in sorted(claims) for c in claims[n]]},
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    return text
