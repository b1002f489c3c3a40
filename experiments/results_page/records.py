"""The records behind the results page: the small files each section reads from a results directory of
``experiments/reproduce.py``, kept beside the page (``docs/results/records/`` for ``docs/results.md``, in the results
directory's own layout), so that ``write_results.py`` rebuilds the page from them alone and the test suite rebuilds it
and compares.

Decisions:
- **A section's records are the files its renderer reads** (:data:`SECTION_RECORDS`, globs under a results
  directory): run summaries (with their per-problem held-out arrays), histories, each part's JSON and the figures a
  part draws itself; never checkpoints, TensorBoard events, exports or logs.
- **A history keeps the tags the page reads** (:data:`HISTORY_TAGS`) and every row, so that a step's index (the cold
  start) stays where it was.
- **Collecting a section replaces its records glob by glob** where the results directory has files for the glob (a
  sweep rerun with fewer jobs leaves none of the old ones); a glob the results directory has nothing for keeps what
  the records hold. Sections that read the same runs (the κ sweep feeds sections 2, 3, 4 and 6) are rebuilt from the
  runs collected last.
- **The records say per section what the page is built from** (``records.json``): its records, or, where they were
  never collected, the page as it stands: such a section is kept and says so under its heading (:func:`kept_line`).
  ``manifest.json`` holds each part of ``reproduce.py`` as the run whose records were collected last recorded it.
- **A size guard** refuses records above :data:`MAX_BYTES` in all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .common import load_json

PART_SECTIONS = {
    "phases": ("phases",),
    "kappa": ("balance", "head", "kappa", "wallclock"),
    "balance": ("balance",),
    "head": ("head",),
    "voting": ("voting",),
    "wallclock": ("wallclock",),
    "pretrained": ("pretrained",),
    "pretrained_seeds": ("pretrained",),
    "votes32": ("pretrained",),
    "online": ("online",),
    "seeds": ("seeds",),
    "online_balance": ("online_balance",),
    "online_spread": ("online_spread",),
    "screen": ("screen",),
    "pruning_pays": ("pruning_pays",),
    "grad_probe": ("grad_probe",),
    "peers": ("peers",),
}
"""The sections of the page each part of ``reproduce.py`` feeds, in the parts' order: ``--only <parts> page``
collects those sections' records and rebuilds the page from the records."""
PART_NEEDS = {"head": ("kappa",), "voting": ("kappa",), "wallclock": ("kappa",)}
"""Parts that read another part's outputs (the κ = 0.5 run's export, the κ = 1 and κ = 0.5 runs)."""
KAPPA_RUNS = ("kappa/*/summary.json", "kappa/*/history.jsonl")
SECTION_RECORDS: dict[str, tuple[str, ...]] = {
    "phases": ("phases/phases.json",),
    "balance": (*KAPPA_RUNS, "balance/*/summary.json"),
    "head": (*KAPPA_RUNS, "head/head_quality.json", "head/head_quality.png"),
    "kappa": KAPPA_RUNS,
    "voting": ("voting/metrics.json",),
    "wallclock": (*KAPPA_RUNS, "wallclock.png"),
    "pretrained": (
        "pretrained/head_quality.json",
        "pretrained/head_quality.png",
        "pretrained_seeds/*/head_quality.json",
        "votes32/head_quality.json",
    ),
    "online": ("online/*/summary.json",),
    "seeds": ("seeds/*/summary.json", "seeds/*/history.jsonl", "seeds/wallclock.png"),
    "online_balance": ("online_balance/*/summary.json", "online_balance/*/history.jsonl"),
    "online_spread": ("online_spread/*/summary.json",),
    "screen": ("screen/*/summary.json",),
    "pruning_pays": (
        "pruning_pays/*/summary.json",
        "pruning_pays/*/history.jsonl",
        "pruning_pays_advice/advice.json",
        "pruning_pays_advice/grad_probe.json",
    ),
    "grad_probe": ("grad_probe/*/grad_probe.json",),
    "peers": ("peers/*/peers.json",),
}
"""Per section (the page's order), the files under a results directory its renderer reads."""
HISTORY_TAGS = frozenset(
    {
        "time/wall",
        "time/wall_credited",
        "heldout/accuracy",  # held-out curves (sections 6, 9, 13)
        "reward/accuracy",  # the majority-outcome rate beside the online head (section 3)
        "tokens/generated",  # the mean response length (section 4)
        "balance/positive_ratio",
        "balance/rho_1_minus_rho",
        "balance/zero_advantage_fraction",  # Table 4 per step (10)
    }
)
"""The history tags the page reads; a history's other tags stay in the run directory."""
MANIFEST = "manifest.json"
"""``reproduce.py``'s parts (their commands, exit codes and seconds): the page's header."""
RECORDS = "records.json"
"""What each section is built from (module docstring)."""
MAX_BYTES = 5 * 2**20
"""The records' size limit in all: a few MB, the page's records and not a results directory."""
KEPT = "Kept from an earlier run"


def records_path(page: Path) -> Path:
    """Where a page's records are kept: ``docs/results/records/`` beside ``docs/results.md``."""
    return Path(page).with_suffix("") / "records"


def rerun_command(section: str) -> str:
    """The ``reproduce.py`` command that measures a section again and collects its records."""
    parts = [p for p, sections in PART_SECTIONS.items() if section in sections]
    needed = {n for p in parts for n in PART_NEEDS.get(p, ())}
    ordered = [p for p in PART_SECTIONS if p in needed or p in parts]
    return f"python experiments/reproduce.py --only {' '.join(ordered)} page"


def kept_line(section: str) -> str:
    """What a section kept from the page says under its heading."""
    return (
        f"{KEPT}; its records were not committed, so its figures cannot be rebuilt here: rerun "
        f"`{rerun_command(section)}` to refresh it."
    )


def compact_history(text: str) -> str:
    """A ``history.jsonl`` with only :data:`HISTORY_TAGS` in each row, every row kept."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return "".join(json.dumps({k: v for k, v in row.items() if k in HISTORY_TAGS}) + "\n" for row in rows)


def record_bytes(path: Path) -> bytes:
    """A file of a results directory as the records keep it."""
    if path.name == "history.jsonl":
        return compact_history(path.read_text()).encode()
    return path.read_bytes()


def record_files(records: Path, sections: Sequence[str] = tuple(SECTION_RECORDS)) -> list[str]:
    """The files the records hold for ``sections``, relative to ``records``, sorted."""
    return sorted(
        {
            p.relative_to(records).as_posix()
            for key in sections
            for pattern in SECTION_RECORDS[key]
            for p in records.glob(pattern)
            if p.is_file()
        }
    )


def sections_state(records: Path) -> dict[str, dict[str, Any]]:
    """``records.json``'s sections: per section ``{"state": "rebuilt", "files": [...]}`` or ``{"state": "kept"}``
    (every section kept where the records have no such file)."""
    data = load_json(records / RECORDS) or {}
    return {key: data.get("sections", {}).get(key, {"state": "kept"}) for key in SECTION_RECORDS}


def rebuilt_sections(records: Path) -> list[str]:
    """The sections the records rebuild, in the page's order; a file ``records.json`` lists but the records lack is
    an error, not a section quietly kept."""
    rebuilt = []
    for key, state in sections_state(records).items():
        if state["state"] != "rebuilt":
            continue
        missing = [f for f in state["files"] if not (records / f).is_file()]
        if missing:
            raise FileNotFoundError(f"{records / RECORDS} lists {missing} for section {key!r}, which the records lack")
        rebuilt.append(key)
    return rebuilt


def merged_manifest(old: dict | None, new: dict | None, sections: Sequence[str]) -> dict[str, Any]:
    """The records' ``manifest.json``: the parts ``old`` has, each part that feeds ``sections`` as ``new`` recorded
    it (with whether that run was a quick smoke run), in the parts' order."""
    parts = dict((old or {}).get("parts", {}))
    feeding = {p for p, fed in PART_SECTIONS.items() if set(fed) & set(sections)}
    for name, part in (new or {}).get("parts", {}).items():
        if name in feeding:
            parts[name] = {**part, "quick": bool((new or {}).get("quick"))}
    parts = {name: parts[name] for name in PART_SECTIONS if name in parts}
    return {"quick": any(p.get("quick") for p in parts.values()), "parts": parts}


def collect_records(results: Path, records: Path, sections: Sequence[str]) -> list[str]:
    """Copy the records of ``sections`` from a results directory of ``reproduce.py`` into ``records`` (module
    docstring) and write which sections the records rebuild; returns the sections collected (those the results
    directory has any file of). Refused, with nothing written, when the records would exceed :data:`MAX_BYTES`."""
    results, records = Path(results), Path(records)
    unknown = sorted(set(sections) - set(SECTION_RECORDS))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choose from {list(SECTION_RECORDS)}")
    incoming: dict[str, bytes] = {}
    replaced: set[str] = set()
    collected = []
    for key in sections:
        found = {pattern: sorted(p for p in results.glob(pattern) if p.is_file()) for pattern in SECTION_RECORDS[key]}
        if not any(found.values()):
            continue
        collected.append(key)
        for pattern, paths in found.items():
            if paths:
                replaced.add(pattern)
                incoming.update({p.relative_to(results).as_posix(): record_bytes(p) for p in paths})
    outgoing = {p for pattern in replaced for p in records.glob(pattern) if p.is_file()}
    staying = [f for f in record_files(records) if records / f not in outgoing and f not in incoming]
    total = sum(map(len, incoming.values())) + sum((records / f).stat().st_size for f in staying)
    if total > MAX_BYTES:
        raise ValueError(
            f"the records of {collected} would take {total / 2**20:.1f} MB, over the {MAX_BYTES / 2**20:.0f} "
            f"MB the page's records may: a results directory is not a record (see {__name__})"
        )
    for path in outgoing:
        path.unlink()
        for folder in path.parents:  # a job directory left empty goes with its files
            if folder == records or any(folder.iterdir()):
                break
            folder.rmdir()
    for rel, data in incoming.items():
        (records / rel).parent.mkdir(parents=True, exist_ok=True)
        (records / rel).write_bytes(data)
    if collected:
        manifest = merged_manifest(load_json(records / MANIFEST), load_json(results / MANIFEST), collected)
        (records / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    write_state(records, collected)
    return collected


def write_state(records: Path, collected: Sequence[str] = ()) -> None:
    """Write ``records.json``: the sections just ``collected`` and those the records rebuilt before are rebuilt, each
    with its files as the records hold them now; every other section is kept from the page."""
    before = sections_state(records)
    state = {
        key: {"state": "rebuilt", "files": record_files(records, [key])}
        if key in collected or before[key]["state"] == "rebuilt"
        else {"state": "kept"}
        for key in SECTION_RECORDS
    }
    records.mkdir(parents=True, exist_ok=True)
    (records / RECORDS).write_text(json.dumps({"sections": state}, indent=1) + "\n")
