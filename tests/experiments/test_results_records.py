"""The results page rebuilt from its records (results_page.records): docs/results.md, docs/results.json and the
README's table rebuild byte for byte from what is committed beside the page, a section whose records were never
collected is kept and says so, and records collected from a results directory rebuild every section exactly as the
results directory itself does."""

import json
import re
import shutil
from pathlib import Path

import pytest

from results_page.common import Claim
from results_page.headline import readme_block, row_verdict
from results_page.online import BALANCE_MEASURES
from results_page.page import SECTION_KEYS, build_page, page_headline, split_page
from results_page.pretrained import restated_replay_claim
from results_page.records import (
    HISTORY_TAGS,
    KEPT,
    MAX_BYTES,
    PART_SECTIONS,
    RECORDS,
    SECTION_RECORDS,
    collect_records,
    rebuilt_sections,
    record_files,
    records_path,
    rerun_command,
)
from test_results import probe_json, write_online, write_screen_run, write_seed_run
from test_results import results_dir  # noqa: F401  (a fixture)
from test_results_online_balance import sweep as balance_sweep
from test_results_peers import peers_json
from test_results_pruning_pays import write_study

import write_results

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results.md"
GRAD_PROBE = ROOT / "tests" / "fixtures" / "grad_probe.json"


def copy_page(to: Path) -> Path:
    """The committed page, its claims and its records, copied under ``to`` in their layout."""
    page = to / "docs" / "results.md"
    page.parent.mkdir(parents=True)
    shutil.copyfile(PAGE, page)
    shutil.copyfile(PAGE.with_suffix(".json"), page.with_suffix(".json"))
    shutil.copytree(records_path(PAGE), records_path(page))
    return page


def test_the_committed_page_rebuilds_byte_for_byte_from_its_records(tmp_path: Path):
    page = copy_page(tmp_path)
    records = records_path(page)
    rebuilt = build_page(records, page, only=rebuilt_sections(records))
    assert rebuilt == PAGE.read_text(), "docs/results.md differs from its records: run experiments/write_results.py"
    assert page.with_suffix(".json").read_text() == PAGE.with_suffix(".json").read_text()
    table = [re.sub(r"\]\(#", "](docs/results.md#", line) for line in page_headline(page)]
    assert readme_block(ROOT / "README.md") == table
    # each section the records do not rebuild is kept, and says so under its heading with the command that refreshes it
    kept = set(SECTION_KEYS) - set(rebuilt_sections(records))
    for number, body in split_page(rebuilt).items():
        key = SECTION_KEYS[number - 1]
        assert body.split("\n")[2].startswith(KEPT) == (key in kept), key
        if key in kept:
            assert f"rerun `{rerun_command(key)}` to refresh it." in body
    # the records hold what records.json lists and nothing else, within the size limit
    listed = {f for s in json.loads((records / RECORDS).read_text())["sections"].values() for f in s.get("files", [])}
    assert set(record_files(records)) == listed
    assert sum(p.stat().st_size for p in records.rglob("*") if p.is_file()) <= MAX_BYTES


def results_of_every_kind(root: Path) -> Path:
    """``results_dir`` with the pruning-pays study (:func:`write_study`) and outputs for every other section but the
    phase benchmark's, and what is never a record: a checkpoint, TensorBoard events, a log, history tags no section
    reads."""
    write_study(root)
    for seed, (grpo, arrol) in enumerate([(0.30, 0.34), (0.31, 0.30), (0.29, 0.33)]):
        write_online(root, "none", 40, grpo, 0.03, seed=seed)
        write_online(root, "arrol", 60, arrol, 0.03, seed=seed, heldout_per_problem_after=[arrol] * 4)
        write_online(root, "none", 40, grpo, 0.02, seed=seed, part="online_spread", detect_length=12)
        write_online(
            root,
            "arrol",
            48,
            arrol,
            0.02,
            seed=seed,
            part="online_spread",
            detect_length=12,
            pruning={"balance_target": "spread"},
            head_input="stats",
        )
        write_seed_run(root / "seeds" / f"g{seed}", "none", None, seed, [(0, 0.2), (50, 0.3), (100, 0.4)])
        write_seed_run(
            root / "seeds" / f"d{seed}", "arrol", 0.6, seed, [(0, 0.2), (40, 0.32), (90, 0.41)], gate_open=0.5
        )
    (root / "seeds" / "wallclock.png").write_bytes(b"\x89PNG seeds")
    balance_sweep(root)
    grpo = {"name": "grpo", "dynamic_sampling_refill": False}
    for seed in (0, 1):
        write_screen_run(root, "grpo", seed, grpo, {"policy": "none"}, 0.30, 0.70)
        write_screen_run(
            root,
            "arrol_screen_prompt",
            seed,
            grpo,
            {"policy": "arrol", "screen": {"stages": "prompt"}},
            0.32,
            0.60,
            {"cost_share": 0.04},
        )
    (root / "pretrained").mkdir()
    (root / "pretrained" / "head_quality.json").write_text(json.dumps(probe_json(8, 0.02)))
    (root / "grad_probe" / "tiny").mkdir(parents=True)
    shutil.copyfile(GRAD_PROBE, root / "grad_probe" / "tiny" / "grad_probe.json")
    peers_json(root, "default", 1.02, {"GRPO": 1.05, "ARRoL κ=0.5": 1.3})
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "quick": False,
                "overrides": [],
                "parts": {
                    part: {"command": part, "returncode": 0, "seconds": 60.0 * (i + 1)}
                    for i, part in enumerate(("kappa", "balance", "voting", "wallclock", "online", "seeds", "page"))
                },
            }
        )
    )
    run = root / "kappa" / "0"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (run / "events.out.tfevents.1").write_bytes(b"events")
    (root / "logs").mkdir()
    (root / "logs" / "kappa.log").write_text("log")
    rows = [{**json.loads(line), "loss/policy": 0.1} for line in (run / "history.jsonl").read_text().splitlines()]
    (run / "history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root


@pytest.mark.slow  # builds the whole results page twice: outside the quick tier
def test_records_collected_from_a_results_directory_rebuild_the_page_it_builds(
    results_dir: Path,  # noqa: F811
    tmp_path: Path,
):
    results = results_of_every_kind(results_dir)
    direct = build_page(results, tmp_path / "direct" / "results.md")
    page = tmp_path / "docs" / "results.md"
    write_results.main([str(results), "-o", str(page)])
    assert page.read_text() == direct
    assert page.with_suffix(".json").read_text() == (tmp_path / "direct" / "results.json").read_text()
    records = records_path(page)
    assert rebuilt_sections(records) == [key for key in SECTION_KEYS if key != "phases"]
    held = record_files(records)
    assert "kappa/0/summary.json" in held and "grad_probe/tiny/grad_probe.json" in held
    assert not [f for f in held if "ckpt" in f or "tfevents" in f or f.startswith("logs/")]
    assert not list(records.rglob("*.ckpt")) and not (records / "logs").exists()
    for history in records.rglob("history.jsonl"):  # each row kept, each with the tags the page reads only
        original = (results / history.relative_to(records)).read_text().splitlines()
        rows = [json.loads(line) for line in history.read_text().splitlines()]
        assert len(rows) == len(original) and all(set(row) <= HISTORY_TAGS for row in rows)
    # from the records alone, the results directory gone
    shutil.rmtree(results)
    write_results.main(["-o", str(page)])
    assert page.read_text() == direct


def test_collecting_one_section_replaces_its_records_and_rebuilds_the_rest_from_theirs(
    results_dir: Path,  # noqa: F811
    tmp_path: Path,
):
    page = tmp_path / "docs" / "results.md"
    write_results.main([str(results_dir), "-o", str(page)])
    first = page.read_text()
    assert "Kept from an earlier run" not in first  # every section from the records, or not run
    # a later voting run elsewhere: only its section changes
    other = tmp_path / "other"
    (other / "voting").mkdir(parents=True)
    metrics = json.loads((results_dir / "voting" / "metrics.json").read_text())
    metrics["metrics"]["arithmetic"]["arrol@k"] = 0.45
    (other / "voting" / "metrics.json").write_text(json.dumps(metrics))
    write_results.main([str(other), "-o", str(page), "--sections", "voting", "kappa"])  # kappa: nothing there
    second = page.read_text()
    assert "ARRoL vote 45.0 vs majority 40.0" in second
    changed = [n for n, body in split_page(second).items() if body != split_page(first)[n]]
    assert changed == [SECTION_KEYS.index("voting") + 1]
    # a sweep rerun with fewer jobs leaves none of the old ones
    shutil.rmtree(results_dir / "balance" / "0")
    write_results.main([str(results_dir), "-o", str(page), "--sections", "balance"])
    assert not (records_path(page) / "balance" / "0").exists() and (records_path(page) / "balance" / "1").is_dir()
    assert "| ARRoL, Eq. 2 as written (global δ) | not run |" in page.read_text()


def test_a_section_without_records_is_kept_from_the_page_and_says_so(results_dir: Path, tmp_path: Path):  # noqa: F811
    page = tmp_path / "docs" / "results.md"
    full = build_page(results_dir, page)
    collect_records(results_dir, records_path(page), ["voting"])
    kept = build_page(records_path(page), page, only=rebuilt_sections(records_path(page)))
    bodies, before = split_page(kept), split_page(full)
    assert bodies[5] == before[5]  # voting: from its records
    assert bodies[4].split("\n")[2] == (
        f"{KEPT}; its records were not committed, so its figures cannot be rebuilt "
        "here: rerun `python experiments/reproduce.py --only kappa page` to refresh it."
    )
    assert build_page(records_path(page), page, only=rebuilt_sections(records_path(page))) == kept  # marked once


def test_records_above_the_size_limit_are_refused_with_nothing_written(
    results_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    import results_page.records as records_module

    monkeypatch.setattr(records_module, "MAX_BYTES", 100)
    records = tmp_path / "records"
    with pytest.raises(ValueError, match="over the 0 MB the page's records may"):
        collect_records(results_dir, records, SECTION_KEYS)
    assert not records.exists()


def test_every_section_has_its_records_and_a_command_that_refreshes_them():
    assert list(SECTION_RECORDS) == list(SECTION_KEYS)
    assert {s for fed in PART_SECTIONS.values() for s in fed} == set(SECTION_KEYS)
    assert rerun_command("voting") == "python experiments/reproduce.py --only kappa voting page"
    assert rerun_command("pretrained") == (
        "python experiments/reproduce.py --only pretrained pretrained_seeds votes32 page"
    )
    assert not [g for globs in SECTION_RECORDS.values() for g in globs if "ckpt" in g or "tb" in g or "log" in g]
    assert {f"balance/{key}" for key, _, _ in BALANCE_MEASURES} <= HISTORY_TAGS  # section 10's per-step figures


def test_a_replay_of_a_rule_beyond_the_paper_and_the_default_carries_no_verdict_on_the_papers_claim():
    """Table 4's row on SmolLM2 rests on the paper's Eq. 2 and the default rule: a kept replay claim of an alternative
    rule (spread, per-group) is stated beside them without a verdict, so it cannot lift the row to partly reproduced
    while the paper's own rule falls short."""
    text = "Table 4 by replay on SmolLM2-135M, ARRoL, {}: fewer zero-advantage groups than random at 4 of 4"
    eq2 = Claim("balance_smollm2", text.format("global δ (Eq. 2)"), paper="not reproduced")
    spread = Claim("balance_smollm2", text.format("spread (ranks only)"), paper="partly reproduced")
    online = Claim(
        "balance_smollm2", "Table 4 online on SmolLM2-135M (the default rule vs random pruning)", paper="not reproduced"
    )
    assert row_verdict([eq2, spread, online]) == "partly reproduced"
    restated = [restated_replay_claim(c) for c in (eq2, spread, online)]
    assert restated[0] == eq2 and restated[2] == online
    assert restated[1].paper is None and "no verdict on the paper's claim" in restated[1].line()
    assert restated_replay_claim(restated[1]) == restated[1]
    assert row_verdict(restated) == "not reproduced"
