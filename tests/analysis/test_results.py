"""docs/results.md generation (arrol_pl.analysis.results): numbers come from the outputs, verdicts from criteria."""

import json
from pathlib import Path

import pytest

from arrol_pl.analysis import results


def write_run(job: Path, pruning: dict, summary: dict, history: list[dict]) -> None:
    job.mkdir(parents=True)
    base = {"policy": "arrol", "keep_ratio": 0.5, "balance_target": "global", "cold_start_steps": 0}
    config = {"pruning": {**base, **pruning}, "engine": {"detect_length": 12, "max_num_seqs": 256},
              "algo": {"prompts_per_step": 2, "group_size": 4}}
    (job / "summary.json").write_text(json.dumps({"config": config, "steps": len(history), **summary}))
    (job / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))


def balance_summary(rho: float, bal: float, zero: float, **extra) -> dict:
    return {"positive_ratio_mean": rho, "rho_1_minus_rho_mean": bal, "zero_advantage_fraction": zero,
            "keep_ratio_mean": 0.5, "heldout_accuracy_after": 0.3, **extra}


def curve(points: list[tuple[float, float | None]], acc: float = 0.3) -> list[dict]:
    rows = []
    for t, heldout in points:
        row = {"time/wall": t, "reward/accuracy": acc, "tokens/generated": 160}
        if heldout is not None:
            row["heldout/accuracy"] = heldout
        rows.append(row)
    return rows


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    kappa_extra = dict(heldout_accuracy_before=0.2, heldout_greedy_accuracy_after=0.3,
                       head_accuracy_after_cold_start=0.85, head_auc_after_cold_start=0.8)
    write_run(root / "kappa" / "0", {"keep_ratio": 1.0}, balance_summary(
        0.3, 0.15, 0.3, seconds_per_step=2.0, **kappa_extra), curve([(10, None), (20, 0.25), (30, 0.30)], acc=0.5))
    write_run(root / "kappa" / "1", {"keep_ratio": 0.5}, balance_summary(
        0.45, 0.2, 0.2, seconds_per_step=1.0, **kappa_extra), curve([(5, None), (10, 0.31), (15, 0.33)], acc=0.5))
    write_run(root / "balance" / "0", {"balance_target": "group"}, balance_summary(0.48, 0.22, 0.15), curve([(1, None)]))
    write_run(root / "balance" / "1", {"policy": "random"}, balance_summary(0.35, 0.18, 0.25), curve([(1, None)]))
    (root / "voting").mkdir()
    (root / "voting" / "metrics.json").write_text(json.dumps({"k": 32, "temperature": 1.0, "metrics": {
        "arithmetic": {"problems": 128, "k": 32, "avg@k": 0.3, "pass@k": 0.8, "maj@k": 0.4, "deepconf@k": 0.41,
                       "arrol@k": 0.39}}}))
    (root / "wallclock.png").write_bytes(b"\x89PNG fake")
    return root


def test_page_numbers_and_verdicts_follow_the_outputs(results_dir: Path, tmp_path: Path):
    page = tmp_path / "docs" / "results.md"
    text = results.build_page(results_dir, page)
    assert page.read_text() == text
    claims = text.split("## What reproduced and what did not")[1].split("## 1.")[0]
    # balance: both ARRoL variants closer to 0.5, more signal, fewer flat groups than random
    assert claims.count("Table 4") == 2 and "E[ρ̂] 0.450 vs random 0.350" in claims
    assert all("**reproduced**" in line for line in claims.splitlines() if "Table 4" in line)
    # voting: ARRoL 39.0 below majority 40.0 → not reproduced
    assert "ARRoL vote 39.0 vs majority 40.0 and DeepConf 41.0 — **not reproduced**" in claims
    assert "Reading: the online quality head predicts correctness with AUC 0.80" in text
    # κ: 2.00× at κ = 0.5
    assert "κ=0.5 2.00×" in claims
    # wall clock: ARRoL first reaches GRPO's final 0.30 at 10 s, GRPO at 30 s
    assert "GRPO at 30 s, ARRoL reaches it at 10 s — **reproduced**" in claims
    assert "responses average 20 tokens" in claims
    # head accuracy 0.85 against a majority rate of 0.5
    assert "Head accuracy after cold start 0.850" in claims and "majority-outcome rate at 0.500" in claims
    # parts that were not run are said to be missing, never filled in
    assert "Not run (`phases/phases.json` missing)." in text
    assert "Offline probe not run" in text
    assert (page.parent / "figures" / "wallclock.png").read_bytes() == b"\x89PNG fake"


def test_worse_balance_is_not_reproduced(results_dir: Path, tmp_path: Path):
    random_job = results_dir / "balance" / "1"
    s = json.loads((random_job / "summary.json").read_text())
    s.update(positive_ratio_mean=0.5, rho_1_minus_rho_mean=0.25, zero_advantage_fraction=0.0)
    (random_job / "summary.json").write_text(json.dumps(s))
    text = results.build_page(results_dir, tmp_path / "page.md")
    lines = [line for line in text.splitlines() if line.startswith("- Table 4")]
    assert len(lines) == 4 and all("**not reproduced**" in line for line in lines)  # summary + section


def test_curve_helpers():
    assert results.time_to_reach([(0, 0.1), (5, 0.3), (9, 0.2)], 0.25) == 5
    assert results.time_to_reach([(0, 0.1)], 0.25) is None


def test_a_tied_vote_is_not_a_reproduction(results_dir: Path, tmp_path: Path):
    path = results_dir / "voting" / "metrics.json"
    data = json.loads(path.read_text())
    data["metrics"]["arithmetic"].update({"maj@k": 0.4, "deepconf@k": 0.4, "arrol@k": 0.4})
    path.write_text(json.dumps(data))
    text = results.build_page(results_dir, tmp_path / "page.md")
    assert "ARRoL vote 40.0 vs majority 40.0 and DeepConf 40.0 — **not reproduced**" in text
    data["metrics"]["arithmetic"]["arrol@k"] = 0.45
    path.write_text(json.dumps(data))
    assert "ARRoL vote 45.0 vs majority 40.0 and DeepConf 40.0 — **reproduced**" in results.build_page(
        results_dir, tmp_path / "page.md")
