"""docs/results.md generation (experiments/results_page): numbers come from the outputs, verdicts from criteria."""

import json
import re
import shutil
from pathlib import Path

import pytest

from arrol_pl.core.metrics import time_to_reach

from results_page.page import build_page, split_page


def write_run(job: Path, pruning: dict, summary: dict, history: list[dict]) -> None:
    job.mkdir(parents=True)
    base = {"policy": "arrol", "keep_ratio": 0.5, "balance_target": "anchored", "cold_start_steps": 0}
    config = {
        "pruning": {**base, **pruning},
        "engine": {"detect_length": 12, "max_num_seqs": 256},
        "algo": {"prompts_per_step": 2, "group_size": 4},
    }
    (job / "summary.json").write_text(json.dumps({"config": config, "steps": len(history), **summary}))
    (job / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))


def balance_summary(rho: float, bal: float, zero: float, **extra) -> dict:
    return {
        "positive_ratio_mean": rho,
        "rho_1_minus_rho_mean": bal,
        "zero_advantage_fraction": zero,
        "keep_ratio_mean": 0.5,
        "heldout_accuracy_after": 0.3,
        **extra,
    }


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
    kappa_extra = dict(
        heldout_accuracy_before=0.2,
        heldout_greedy_accuracy_after=0.3,
        head_accuracy_after_cold_start=0.85,
        head_auc_after_cold_start=0.8,
    )
    write_run(
        root / "kappa" / "0",
        {"keep_ratio": 1.0},
        balance_summary(0.3, 0.15, 0.3, seconds_per_step=2.0, **kappa_extra),
        curve([(10, None), (20, 0.25), (30, 0.30)], acc=0.5),
    )
    write_run(
        root / "kappa" / "1",
        {"keep_ratio": 0.5},
        balance_summary(0.45, 0.2, 0.2, seconds_per_step=1.0, **kappa_extra),
        curve([(5, None), (10, 0.31), (15, 0.33)], acc=0.5),
    )
    write_run(
        root / "balance" / "0", {"balance_target": "global"}, balance_summary(0.48, 0.22, 0.15), curve([(1, None)])
    )
    write_run(root / "balance" / "1", {"policy": "random"}, balance_summary(0.35, 0.18, 0.25), curve([(1, None)]))
    (root / "voting").mkdir()
    (root / "voting" / "metrics.json").write_text(
        json.dumps(
            {
                "k": 32,
                "temperature": 1.0,
                "metrics": {
                    "arithmetic": {
                        "problems": 128,
                        "k": 32,
                        "avg@k": 0.3,
                        "pass@k": 0.8,
                        "maj@k": 0.4,
                        "deepconf@k": 0.41,
                        "arrol@k": 0.39,
                    }
                },
            }
        )
    )
    (root / "wallclock.png").write_bytes(b"\x89PNG fake")
    return root


def test_page_numbers_and_verdicts_follow_the_outputs(results_dir: Path, tmp_path: Path):
    page = tmp_path / "docs" / "results.md"
    text = build_page(results_dir, page)
    assert page.read_text() == text
    claims = text.split("### Every claim, by section")[1].split("## 1.")[0]
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
    text = build_page(results_dir, tmp_path / "page.md")
    lines = claim_lines(text, "Table 4") + [line for line in text.splitlines() if line.startswith("- Table 4")]
    assert len(lines) == 4 and all("**not reproduced**" in line for line in lines)  # summary + section


def test_a_balance_sweep_without_eq2_reports_the_default_rule_alone(results_dir: Path, tmp_path: Path):
    """``reproduce.py --quick`` runs random pruning only beside the κ sweep: the Eq. 2 row says not run and only the
    default rule's claim is judged."""
    shutil.rmtree(results_dir / "balance" / "0")
    text = build_page(results_dir, tmp_path / "page.md")
    assert "| ARRoL, Eq. 2 as written (global δ) | not run |" in text
    assert len(claim_lines(text, "Table 4")) == 1


def test_curve_helpers():
    assert time_to_reach([(0, 0.1), (5, 0.3), (9, 0.2)], 0.25) == 5
    assert time_to_reach([(0, 0.1)], 0.25) is None


def test_a_tied_vote_is_not_a_reproduction(results_dir: Path, tmp_path: Path):
    path = results_dir / "voting" / "metrics.json"
    data = json.loads(path.read_text())
    data["metrics"]["arithmetic"].update({"maj@k": 0.4, "deepconf@k": 0.4, "arrol@k": 0.4})
    path.write_text(json.dumps(data))
    text = build_page(results_dir, tmp_path / "page.md")
    assert "ARRoL vote 40.0 vs majority 40.0 and DeepConf 40.0 — **not reproduced**" in text
    data["metrics"]["arithmetic"]["arrol@k"] = 0.45
    path.write_text(json.dumps(data))
    assert "ARRoL vote 45.0 vs majority 40.0 and DeepConf 40.0 — **reproduced**" in build_page(
        results_dir, tmp_path / "page.md"
    )


def write_online(
    root: Path,
    policy: str,
    steps: int,
    after: float,
    se: float,
    seed: int | None = None,
    part: str = "online",
    pruning: dict | None = None,
    detect_length: int = 4,
    head_input: str = "last",
    **extra,
) -> None:
    job = root / part / (f"{2 * (seed or 0) + (policy != 'none')}")
    job.mkdir(parents=True)
    trainer = {"max_minutes": 12} if seed is None else {"max_minutes": 12, "seed": seed}  # no seed: from before seeds
    config = {
        "pruning": {"policy": policy, "keep_ratio": 1.0 if policy == "none" else 0.5, **(pruning or {})},
        "trainer": trainer,
        "engine": {"detect_length": detect_length},
        "head": {"input": head_input},
        "algo": {"prompts_per_step": 8, "group_size": 8, "max_response_tokens": 32},
    }
    summary = {
        "config": config,
        "steps": steps,
        "heldout_accuracy_before": 0.25,
        "heldout_accuracy_after": after,
        "heldout_accuracy_se_before": se,
        "heldout_accuracy_se_after": se,
        "heldout_problems": 128,
        "heldout_samples": 4,
        "seconds_per_step": 720 / steps,
        **extra,
    }
    (job / "summary.json").write_text(json.dumps(summary))


def claim_lines(text: str, start: str) -> list[str]:
    """The summary's claims that start with ``start`` after the link to their section (``- [§n](#…) ``)."""
    claims = [line.split(") ", 1)[1] for line in text.split("## 1.")[0].splitlines() if line.startswith("- [§")]
    return [f"- {claim}" for claim in claims if claim.startswith(start)]


def test_online_pretrained_section_compares_at_equal_time_with_its_uncertainty(results_dir: Path, tmp_path: Path):
    write_online(
        results_dir,
        "none",
        40,
        0.30,
        0.03,
        head_accuracy_after_cold_start=0.7,
        head_majority_after_cold_start=0.72,
        head_auc_after_cold_start=0.7,
    )
    write_online(
        results_dir,
        "arrol",
        64,
        0.32,
        0.04,
        head_accuracy_after_cold_start=0.80,
        head_majority_after_cold_start=0.74,
        head_auc_after_cold_start=0.77,
        keep_ratio_mean=0.5,
    )
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 8.")[1].split("## 9.")[0]
    assert "ARRoL took 1.60× GRPO's steps in the same training time" in section
    assert "seed 0: +0.020 ± 0.050" in section and "one seed per arm" in section  # hypot(0.03, 0.04)
    head, fig4 = claim_lines(text, "Online head"), claim_lines(text, "Fig. 4 on SmolLM2")
    assert len(head) == 1 and "accuracy 0.800 vs majority class 0.740, AUC 0.770" in head[0]
    assert (
        "project target (online head: accuracy ≥ majority + 5 points, AUC ≥ 0.75): **met**" in head[0]
    )  # 0.80 ≥ 0.74 + 0.05, AUC ≥ 0.75
    assert "reproduced" not in head[0]  # a target of the project's, not a claim of the paper
    # one seed: the evaluations' SE 0.050 on 128 − 1 df, so +0.020 is inside ±0.099 and what it could detect is stated
    assert (
        len(fig4) == 1
        and "— **not distinguishable**: ARRoL ≥ GRPO by the point estimate only; not "
        "distinguishable from 0 (95 % t interval ±0.099, 127 df); the comparison could detect "
        "±0.141 at 80 % power"
        in fig4[0]
    )
    s = json.loads((results_dir / "online" / "1" / "summary.json").read_text())
    s.update(heldout_accuracy_after=0.45)
    (results_dir / "online" / "1" / "summary.json").write_text(json.dumps(s))
    fig4 = claim_lines(build_page(results_dir, tmp_path / "page.md"), "Fig. 4 on SmolLM2")
    assert "+0.150 ± 0.050 over 1 seed(s) — **reproduced**" in fig4[0]
    # a head that does not clear the majority class by 5 points misses the target, whatever its AUC
    s = json.loads((results_dir / "online" / "1" / "summary.json").read_text())
    s.update(head_accuracy_after_cold_start=0.76, heldout_accuracy_after=0.25)
    (results_dir / "online" / "1" / "summary.json").write_text(json.dumps(s))
    text = build_page(results_dir, tmp_path / "page.md")
    assert all("**missed**" in line for line in claim_lines(text, "Online head"))
    assert all("**not reproduced**" in line for line in claim_lines(text, "Fig. 4 on SmolLM2"))
    assert (
        "-0.050 ± 0.050 over 1 seed(s) — **not reproduced**: ARRoL below GRPO by the point estimate only; not "
        "distinguishable from 0" in text
    )
    s.update(heldout_accuracy_after=0.10)
    (results_dir / "online" / "1" / "summary.json").write_text(json.dumps(s))
    fig4 = claim_lines(build_page(results_dir, tmp_path / "page.md"), "Fig. 4 on SmolLM2")[0]
    assert (
        "-0.200 ± 0.050 over 1 seed(s) — **not reproduced**: ARRoL behind beyond its 95 % t interval (±0.099, "
        "127 df)" in fig4
    )


def test_online_pretrained_section_pairs_the_arms_by_seed(results_dir: Path, tmp_path: Path):
    missing = build_page(results_dir, tmp_path / "page.md").split("## 8.")[1].split("## 9.")[0]
    assert "Not run" in missing and "--only online page" in missing
    # seed 0 ahead by 0.10 (eval SE hypot(0.03, 0.03) = 0.042), seed 1 ahead by 0.02; seed 2 has no GRPO arm and is
    # left out
    for seed, (grpo, arrol) in enumerate([(0.30, 0.40), (0.30, 0.32)]):
        write_online(results_dir, "none", 40, grpo, 0.03, seed=seed)
        write_online(results_dir, "arrol", 60, arrol, 0.03, seed=seed)
    write_online(results_dir, "arrol", 60, 0.9, 0.01, seed=2)
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 8.")[1].split("## 9.")[0]
    assert "| 1 | ARRoL κ = 0.5 | 60 |" in section and "| 2 |" not in section
    assert "seed 0: +0.100 ± 0.042; seed 1: +0.020 ± 0.042" in section
    # evaluation SE sqrt(2 × 0.042²) / 2 = 0.030; over seeds sd 0.057, SE 0.040: the larger is used
    assert "Over the 2 seed(s): +0.060 ± 0.040 (evaluation SE 0.030; over seeds sd 0.057, SE 0.040" in section
    # two seeds: 1 df, t_{0.975, 1} = 12.7, so the interval is ±0.508 and only ±0.563 could have been detected
    assert "the larger SE is used; 95 % t interval ±0.508, 1 df)" in section
    fig4 = claim_lines(text, "Fig. 4 on SmolLM2")
    assert len(fig4) == 1 and "+0.060 ± 0.040 over 2 seed(s) — **not distinguishable**" in fig4[0]
    assert "the comparison could detect ±0.563 at 80 % power" in fig4[0]
    assert len(claim_lines(text, "Online head on SmolLM2-135M (ARRoL κ = 0.5 arm at L_detect = 4, seed")) == 2


def test_the_spread_configuration_has_its_own_equal_time_section(results_dir: Path, tmp_path: Path):
    missing = build_page(results_dir, tmp_path / "page.md").split("## 11.")[1]
    assert "Not run" in missing and "--only online_spread page" in missing
    assert "needs a `pruning=none` and a `pruning=arrol_spread` job" in missing
    spread = {"balance_target": "spread"}
    for seed, (grpo, arrol) in enumerate([(0.30, 0.36), (0.30, 0.34), (0.32, 0.40)]):
        write_online(results_dir, "none", 40, grpo, 0.02, seed=seed, part="online_spread", detect_length=12)
        write_online(
            results_dir,
            "arrol",
            48,
            arrol,
            0.02,
            seed=seed,
            part="online_spread",
            pruning=spread,
            detect_length=12,
            head_input="stats",
        )
    # section 8's runs (the paper's rule) do not count here, and this part's do not count in section 8
    write_online(results_dir, "none", 40, 0.30, 0.02, seed=0)
    write_online(results_dir, "arrol", 60, 0.10, 0.02, seed=0)
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 11.")[1]
    assert "+exp=smollm2_online_spread" in section and "L_detect = 12 of 32 tokens, head input `stats`" in section
    assert "| 2 | ARRoL spread, κ = 0.5 | 48 |" in section and "ARRoL took 1.20× GRPO's steps" in section
    # +0.06, +0.04, +0.08 (eval SE hypot(0.02, 0.02) = 0.028 each): mean +0.060, eval SE 0.016, seed SE 0.012;
    # 3.7 standard errors ahead, which "two standard errors" called reproduced, but on 2 df t_{0.975} = 4.30: ±0.070
    fig4 = claim_lines(text, "Fig. 4 on SmolLM2-135M with the spread rule")
    assert len(fig4) == 1 and "+0.060 ± 0.016 over 3 seed(s) — **not distinguishable**" in fig4[0]
    assert "(95 % t interval ±0.070, 2 df); the comparison could detect ±0.088 at 80 % power" in fig4[0]
    assert "-0.200 ± 0.028 over 1 seed(s) — **not reproduced**" in claim_lines(text, "Fig. 4 on SmolLM2-135M:")[0]
    assert len(claim_lines(text, "Online head on SmolLM2-135M (ARRoL spread, κ = 0.5 arm at L_detect = 12")) == 3


def test_seeds_section_counts_the_seeds_that_learned(results_dir: Path, tmp_path: Path):
    for job, (arm, seed, before, after) in enumerate(
        [
            ("none", 0, 0.2, 0.4),
            ("none", 1, 0.3, 0.45),
            ("arrol", 0, 0.2, 0.3),
            ("arrol", 1, 0.3, 0.28),
            ("arrol_gated", 0, 0.2, 0.24),
            ("arrol_gated", 1, 0.3, 0.4),
        ]
    ):
        path = results_dir / "seeds" / str(job)
        path.mkdir(parents=True)
        path.joinpath("summary.json").write_text(
            json.dumps(
                {
                    "config": {"pruning": {"policy": arm}, "trainer": {"max_steps": 300}},
                    "steps": 300,
                    "heldout_accuracy_before": before,
                    "heldout_accuracy_after": after,
                    "heldout_problems": 256,
                    "heldout_accuracy_se_before": 0.02,
                    "heldout_accuracy_se_after": 0.02,  # 2 SE of the gain: 0.057
                    "heldout_samples": 8,
                    "seconds_per_step": 0.5,
                    "overrides": [f"pruning={arm}", f"trainer.seed={seed}", "+exp=seeds"],
                }
            )
        )
    text = build_page(results_dir, tmp_path / "page.md")
    seeds = claim_lines(text, "Seeds")
    assert len(seeds) == 3
    assert "`pruning=none`: held-out accuracy rose on 2 of 2 seeds, beyond its 95 % t interval" in seeds[0]
    assert seeds[0].endswith("(mean gain +0.175 ± 0.035).")  # GRPO, the baseline: context, no target
    assert "`pruning=arrol`: held-out accuracy rose on 1 of 2 seeds" in seeds[1] and "**missed**" in seeds[1]
    # +0.04 is a rise, but inside the 95 % t interval of the difference (1.97 × 0.028 on 255 df): not learning
    assert (
        "`pruning=arrol_gated`: held-out accuracy rose on 2 of 2 seeds, beyond its 95 % t interval of the "
        "before/after difference on 1"
        in seeds[2]
        and "**missed**" in seeds[2]
    )
    assert "−0.135" in text or "-0.135" in text  # ARRoL − GRPO paired by seed: (−0.10 − 0.17) / 2


def probe_json(k: int, arrol_vs_majority: float, **extra) -> dict:
    def rule(acc, vs_maj=None, vs_dc=None):
        out = {"accuracy": acc, "accuracy_se": 0.02}
        if vs_maj is not None:
            out |= {"vs_majority": vs_maj, "vs_majority_se": 0.01, "vs_deepconf": vs_dc, "vs_deepconf_se": 0.01}
        return out

    row = {
        "detect_length": 4,
        "fraction": 0.125,
        "n_test": 100,
        "positive_rate": 0.3,
        "head_spearman": 0.4,
        "deepconf_spearman": 0.2,
        "head_auc": 0.8,
        "deepconf_auc": 0.6,
        "head_accuracy": 0.8,
        "majority_accuracy": 0.7,
    }
    votes = {
        "problems": {"n": 40.0, "k": float(k)},
        "majority": rule(0.3),
        "deepconf": rule(0.31, 0.01, None),
        "arrol_detect": rule(0.3 + arrol_vs_majority, arrol_vs_majority, arrol_vs_majority - 0.01),
        "arrol_end": rule(0.3, 0.0, -0.01),
        "avg": rule(0.25),
        "pass": rule(0.7),
    }
    votes["deepconf"]["vs_deepconf"] = None
    return {
        "command": f"python experiments/head_quality.py --samples {k}",
        "rows": [row],
        "rollouts": 160 * k,
        "settings": {"problems": 160, "samples": k, "temperature": 0.8, "max_tokens": 32},
        "accuracy": 0.25,
        "mixed_group_fraction": 0.4,
        "mean_response_length": 20.0,
        "generation_seconds": 60.0,
        "feature_seconds": 30.0,
        "feature_parity": {"max_abs_diff": 1e-5},
        "votes": votes,
        **extra,
    }


def test_the_k32_vote_run_replaces_the_probes_own_votes(results_dir: Path, tmp_path: Path):
    (results_dir / "pretrained").mkdir()
    (results_dir / "pretrained" / "head_quality.json").write_text(json.dumps(probe_json(8, 0.0)))
    text = build_page(results_dir, tmp_path / "page.md")
    assert "| rule (k = 8, 40 test problems)" in text
    assert "**not reproduced** (above both" in claim_lines(text, "Table 3 by replay")[0]
    (results_dir / "votes32").mkdir()
    (results_dir / "votes32" / "head_quality.json").write_text(json.dumps(probe_json(32, 0.05)))
    text = build_page(results_dir, tmp_path / "page.md")
    assert "| rule (k = 32, 40 test problems)" in text and "k = 8, 40" not in text
    assert "Votes from `python experiments/head_quality.py --samples 32` (5120 rollouts" in text
    detect = claim_lines(text, "Table 3 by replay")[0]
    assert "beats majority by +0.050 ± 0.010 and DeepConf by +0.040" in detect and "**reproduced**" in detect


def test_online_balance_section_pairs_arms_by_seed_and_combines_the_seeds(results_dir: Path, tmp_path: Path):
    def write(job: str, pruning: dict, zero: list[float], bal: list[float], seed: int = 0) -> None:
        # two cold-start steps whose figures must be left out, then the measured steps
        history = [
            {"balance/zero_advantage_fraction": 1.0, "balance/rho_1_minus_rho": 0.0, "balance/positive_ratio": 0.0}
        ] * 2
        history += [
            {"balance/zero_advantage_fraction": z, "balance/rho_1_minus_rho": b, "balance/positive_ratio": 0.3}
            for z, b in zip(zero, bal)
        ]
        write_run(
            results_dir / "online_balance" / job,
            {"cold_start_steps": 2, **pruning},
            {
                "heldout_accuracy_before": 0.25,
                "heldout_accuracy_after": 0.3,
                "keep_ratio_mean": 0.5,
                "head_accuracy_after_cold_start": 0.80,
                "head_majority_after_cold_start": 0.749,
                "head_auc_after_cold_start": 0.81,
            },
            history,
        )
        s = json.loads((results_dir / "online_balance" / job / "summary.json").read_text())
        s["config"]["trainer"] = {"max_minutes": 12, "seed": seed}
        (results_dir / "online_balance" / job / "summary.json").write_text(json.dumps(s))

    missing = build_page(results_dir, tmp_path / "page.md").split("## 10.")[1]
    assert "Not run" in missing and "--only online_balance" in missing
    write("0", {"balance_target": "spread"}, [0.6, 0.7, 0.6, 0.7], [0.06, 0.07, 0.06, 0.07])
    write("1", {"policy": "random"}, [0.8, 0.9, 0.8, 0.9], [0.03, 0.04, 0.03, 0.04])
    write("2", {"balance_target": "spread"}, [0.6, 0.7, 0.6, 0.7], [0.06, 0.07, 0.06, 0.07], seed=1)  # no partner
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 10.")[1]
    assert (
        "| 0 | spread | `last` | 6 | 0.500 | 0.300 ± 0.000 | 0.065 ± 0.003 | 0.650 ± 0.029 | 0.810 | n/a |" in section
    )
    assert "each arm trains 12 min of training, L_detect = 12" in section
    assert "| 1 | spread" not in section
    claim = claim_lines(text, "Table 4 online")
    assert len(claim) == 1 and "1 seed(s)" in claim[0] and "zero-advantage groups -0.200 ± 0.041" in claim[0]
    assert "**reproduced**" in claim[0]
    head = claim_lines(text, "Online head on SmolLM2-135M at L_detect = 12 (spread arm, seed 0)")
    assert len(head) == 1 and "accuracy 0.800 vs majority class 0.749, AUC 0.810" in head[0] and "**met**" in head[0]
    # a second seed whose arms tie: the mean difference halves, the standard errors combine as sqrt(a² + b²) / 2
    write("3", {"policy": "random"}, [0.6, 0.7, 0.6, 0.7], [0.06, 0.07, 0.06, 0.07], seed=1)
    text = build_page(results_dir, tmp_path / "page.md")
    assert "| spread | 1 | +0.000 ± 0.000 | +0.0000 ± 0.0041 | +0.000 ± 0.041 | n/a |" in text.split("## 10.")[1]
    claim = claim_lines(text, "Table 4 online")[0]
    # over the seeds the spread of the per-seed differences (−0.2, 0: SE 0.100) exceeds the steps' combined SE
    # (0.029) and is judged on 1 df: t_{0.975, 1} · 0.100 = ±1.271, so the two seeds do not reproduce the claim,
    # and with both differences the paper's way they cannot tell it apart either
    assert "2 seed(s)" in claim and "zero-advantage groups -0.100 ± 0.100" in claim
    assert "**not distinguishable**" in claim
    assert "zero-advantage groups not distinguishable from 0 (95 % t interval ±1.271, 1 df)" in claim
    # the same figures in both arms of seed 0 as well: no reproduction
    write("4", {"policy": "random"}, [0.6, 0.7, 0.6, 0.7], [0.06, 0.07, 0.06, 0.07])
    (results_dir / "online_balance" / "1" / "summary.json").unlink()
    claim = claim_lines(build_page(results_dir, tmp_path / "page.md"), "Table 4 online")[0]
    assert "**reproduced**" not in claim and "**not distinguishable**" in claim


def test_pretrained_balance_claims_read_each_criterion_per_rule(results_dir: Path, tmp_path: Path):
    def arm(rho, bal, zero, d_zero=None, d_bal=None):
        out = {
            "rho": rho,
            "rho_se": 0.03,
            "balance": bal,
            "balance_se": 0.01,
            "zero_adv": zero,
            "zero_adv_se": 0.03,
            "keep": 0.5,
            "keep_se": 0.01,
        }
        if d_zero is not None:
            out |= {
                "zero_adv_vs_random": d_zero,
                "zero_adv_vs_random_se": 0.01,
                "balance_vs_random": d_bal,
                "balance_vs_random_se": 0.002,
            }
        return out

    balance = {
        "arrol_global": arm(0.23, 0.048, 0.77, 0.016, -0.002),  # worse than random on every reading
        "arrol_anchored": arm(0.26, 0.055, 0.70, -0.05, 0.005),  # all three
        "arrol_group": arm(0.26, 0.055, 0.70, -0.05, 0.005),  # all three, but a rule of the project's
        "arrol_spread": arm(0.22, 0.065, 0.68, -0.07, 0.015),  # fewer, more balanced, but E[ρ̂] further from ρ
        "random": arm(0.24, 0.050, 0.75),
        "none": arm(0.25, 0.057, 0.65),
    }
    data = probe_json(8, 0.0)
    data["rows"][0]["balance"] = balance
    (results_dir / "pretrained").mkdir()
    (results_dir / "pretrained" / "head_quality.json").write_text(json.dumps(data))
    text = build_page(results_dir, tmp_path / "page.md")
    claims = {line.split(":")[0].split(", ")[-1]: line for line in claim_lines(text, "Table 4 by replay")}
    assert claims["global δ (Eq. 2)"].endswith("E[ρ̂] closer to ρ at 0 of 1 — **not reproduced**.")
    assert claims["anchored (default)"].endswith("— **reproduced**.")  # the rule ARRoL runs by default here
    # the alternative rules are stated beside them, without a verdict on the paper's claim
    assert "fewer zero-advantage groups than random at 1 of 1" in claims["per-group target"]
    for rule in ("per-group target", "spread (ranks only)"):
        assert (
            claims[rule].endswith(
                "(an alternative rule of the project's, neither Eq. 2 nor the default: no verdict "
                "on the paper's claim)."
            )
            and "**" not in claims[rule]
        )
    assert "| 4 | ARRoL, spread (ranks only) | 0.220 ± 0.030 |" in text


def test_fig2c_is_judged_per_head_input(results_dir: Path, tmp_path: Path):
    data = probe_json(8, 0.0)
    second = dict(
        data["rows"][0], detect_length=16, fraction=0.5, head_spearman=0.3, deepconf_spearman=0.4, head_auc=0.72
    )  # the paper's input falls behind DeepConf at the longer length
    data["rows"].append(second)
    data["inputs"] = {
        "last": data["rows"],
        "mean": [dict(r, head_spearman=0.5, head_auc=0.85, head_within_auc=0.6) for r in data["rows"]],
        "stats": [
            dict(data["rows"][0], head_spearman=0.1, head_auc=0.6),
            dict(second, head_spearman=0.6, head_auc=0.9),
        ],
    }
    (results_dir / "pretrained").mkdir()
    (results_dir / "pretrained" / "head_quality.json").write_text(json.dumps(data))
    text = build_page(results_dir, tmp_path / "page.md")
    paper = claim_lines(text, "Fig. 2(c) on SmolLM2-135M:")
    assert len(paper) == 1 and "exceeds DeepConf's at 1 of 2" in paper[0] and "≥ 0.80 at 1 of 2" in paper[0]
    assert "**not reproduced**" in paper[0]
    others = claim_lines(text, "Fig. 2(c) on SmolLM2-135M with the other head inputs")
    assert len(others) == 1 and "`last`" not in others[0]
    assert "`mean` 2 / 2; `stats` 1 / 1 — " in others[0]
    assert (
        "project target (`mean` head above DeepConf with AUC ≥ 0.80 at every length): **met**; project target "
        "(`stats` head above DeepConf with AUC ≥ 0.80 at every length): **missed**."
    ) in others[0]
    assert "| 16 | 0.300 / 0.720 / n/a | 0.500 / 0.850 / 0.600 | 0.600 / 0.900 / n/a | 0.400 / 0.600 / n/a |" in text


def test_equal_time_arms_pair_their_evaluations_by_problem_when_recorded(results_dir: Path, tmp_path: Path):
    # the same 4 problems: GRPO gets 0, 0.5, 1, 0.25; ARRoL the same plus 0.25 on one, 0 on another
    grpo, arrol = [0.0, 0.5, 1.0, 0.25], [0.25, 0.5, 1.0, 0.25]
    write_online(results_dir, "none", 40, sum(grpo) / 4, 0.2, seed=0, heldout_per_problem_after=grpo)
    write_online(results_dir, "arrol", 60, sum(arrol) / 4, 0.2, seed=0, heldout_per_problem_after=arrol)
    section = build_page(results_dir, tmp_path / "page.md").split("## 8.")[1].split("## 9.")[0]
    # differences 0.25, 0, 0, 0: mean 0.0625, sd 0.125, SE 0.0625 (unpaired it would be hypot(0.2, 0.2) = 0.283)
    assert "paired by problem" in section and "seed 0: +0.062 ± 0.062" in section
    s = json.loads((results_dir / "online" / "0" / "summary.json").read_text())
    s["heldout_per_problem_after"] = []  # a run from before per-problem results: no pairing for that seed
    (results_dir / "online" / "0" / "summary.json").write_text(json.dumps(s))
    section = build_page(results_dir, tmp_path / "page.md").split("## 8.")[1].split("## 9.")[0]
    assert "as if independent" in section and "seed 0: +0.062 ± 0.283" in section
    assert "predate the per-problem records" in section
    # one seed paired, one not: the text says which
    write_online(results_dir, "none", 40, sum(grpo) / 4, 0.2, seed=1, heldout_per_problem_after=grpo)
    write_online(results_dir, "arrol", 60, sum(arrol) / 4, 0.2, seed=1, heldout_per_problem_after=arrol)
    section = build_page(results_dir, tmp_path / "page.md").split("## 8.")[1].split("## 9.")[0]
    assert "paired by problem for the seeds whose runs recorded per-problem results, else" in section
    assert "seed 0: +0.062 ± 0.283; seed 1: +0.062 ± 0.062" in section


def test_fig2c_is_judged_across_replicate_probe_runs(results_dir: Path, tmp_path: Path):
    data = probe_json(8, 0.0)
    data["inputs"] = {"last": data["rows"], "mean": [dict(data["rows"][0], head_spearman=0.5, head_auc=0.85)]}
    (results_dir / "pretrained").mkdir()
    (results_dir / "pretrained" / "head_quality.json").write_text(json.dumps(data))
    text = build_page(results_dir, tmp_path / "page.md")
    assert not claim_lines(text, "Fig. 2(c) on SmolLM2-135M over") and "Replicate probes" not in text
    # a replicate where the paper's input falls behind DeepConf and `mean` stays ahead but under AUC 0.80
    replicate = probe_json(
        8, 0.0, settings={"seed": 1, "problems": 160, "samples": 8, "temperature": 0.8, "max_tokens": 32}
    )
    replicate["rows"][0].update(head_spearman=0.1)
    replicate["inputs"] = {
        "last": replicate["rows"],
        "mean": [dict(replicate["rows"][0], head_spearman=0.4, head_auc=0.78)],
    }
    (results_dir / "pretrained_seeds" / "1").mkdir(parents=True)
    (results_dir / "pretrained_seeds" / "1" / "head_quality.json").write_text(json.dumps(replicate))
    text = build_page(results_dir, tmp_path / "page.md")
    claim = claim_lines(text, "Fig. 2(c) on SmolLM2-135M over 2 probe runs")
    assert len(claim) == 1 and "(seeds ?, 1)" in claim[0]  # section 7's probe json from before seeds were recorded
    assert "`last` 1 / 2; `mean` 2 / 1 — " in claim[0] and claim[0].count("**missed**") == 2
    assert "seed 1: accuracy 0.250, mixed groups 0.400, Spearman head / DeepConf at L = 4: 0.100 / 0.200" in text


def write_screen_run(
    root: Path,
    arm: str,
    seed: int,
    algo: dict,
    pruning: dict,
    after: float,
    zero: float,
    screen: dict | None = None,
    steps: int = 40,
) -> None:
    job = root / "screen" / f"arm={arm},trainer.seed={seed}"
    job.mkdir(parents=True)
    config = {
        "algo": {"prompts_per_step": 8, "group_size": 8, "max_response_tokens": 32, **algo},
        "pruning": {"keep_ratio": 0.5, "screen": {"stages": "none"}, **pruning},
        "trainer": {"max_minutes": 12, "seed": seed},
        "engine": {"detect_length": 4},
        "head": {"input": "last"},
    }
    summary = {
        "config": config,
        "steps": steps,
        "heldout_accuracy_before": 0.25,
        "heldout_accuracy_after": after,
        "heldout_accuracy_se_before": 0.02,
        "heldout_accuracy_se_after": 0.02,
        "heldout_problems": 128,
        "heldout_samples": 4,
        "seconds_per_step": 720 / steps,
        "zero_advantage_fraction": zero,
        "screen": screen or {},
        "heldout_per_problem_after": [after + 0.01 * ((i % 3) - 1) for i in range(128)],
    }
    (job / "summary.json").write_text(json.dumps(summary))


def test_screen_section_pairs_each_arm_with_grpo_and_judges_the_audit(results_dir: Path, tmp_path: Path):
    audit = {"audited": 20, "audited_zero": 14, "screened": 10, "screened_zero": 9, "dropped_share_sum": 10.0}
    grpo = {"name": "grpo", "dynamic_sampling_refill": False}
    for seed in (0, 1):
        write_screen_run(results_dir, "grpo", seed, grpo, {"policy": "none"}, 0.30, 0.70)
        write_screen_run(
            results_dir,
            "dapo",
            seed,
            {"name": "dapo", "dynamic_sampling_refill": True},
            {"policy": "none"},
            0.33,
            0.0,
            steps=30,
        )
        write_screen_run(
            results_dir,
            "grpo_screen",
            seed,
            grpo,
            {"policy": "none", "screen": {"stages": "prompt"}},
            0.36,
            0.49,
            {"prompt": audit, "cost_share": 0.05},
        )
        write_screen_run(
            results_dir,
            "arrol_screen",
            seed,
            grpo,
            {"policy": "arrol", "screen": {"stages": "detect"}},
            0.30,
            0.60,
            {"detect": {**audit, "screened_zero": 7}, "cost_share": 0.30},
        )
        write_screen_run(
            results_dir,
            "arrol_screen_prompt",
            seed,
            grpo,
            {"policy": "arrol", "screen": {"stages": "prompt"}},
            0.34,
            0.55,
            {"prompt": audit, "cost_share": 0.04},
            steps=50,
        )
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 12.")[1]
    for title in (
        "DAPO with refill",
        "ARRoL",
        "ARRoL + prompt screen",
        "ARRoL + detect screen",
        "GRPO + prompt screen",
    ):
        assert f"### {title} vs GRPO" in section
    assert "ARRoL + prompt screen took 1.25× GRPO's steps" in section
    assert "+0.040 ±" in claim_lines(text, "Fig. 4 on SmolLM2-135M, ARRoL + prompt screen")[0]
    assert "DAPO with refill took 0.75× GRPO's steps" in section
    missing = section.split("### ARRoL vs GRPO")[1].split("###")[0]
    assert "Not run" in missing and "needs a `arm=grpo` and a `arm=arrol` job" in missing, "no plain ARRoL runs"
    fig4 = claim_lines(text, "Fig. 4 on SmolLM2-135M, GRPO + prompt screen")
    # screening is beyond the paper: its verdicts are the project's targets, never "reproduced"
    assert len(fig4) == 1 and "+0.060 ±" in fig4[0] and "**met**" in fig4[0] and "reproduced" not in fig4[0]
    detect = claim_lines(text, "Fig. 4 on SmolLM2-135M, ARRoL + detect screen")[0]
    assert "**missed**: ARRoL + detect screen ≥ GRPO by the point estimate only; not distinguishable" in detect
    dapo = claim_lines(text, "Fig. 4 on SmolLM2-135M, DAPO with refill")[0]  # a baseline: context, no verdict
    assert dapo.endswith(": ahead beyond its 95 % t interval (±0.000, 1 df).") and "**" not in dapo
    vs_dapo = claim_lines(text, "GRPO + prompt screen against DAPO with refill")[0]
    assert "+0.030" in vs_dapo and "**met**" in vs_dapo and "ahead beyond its 95 % t interval" in vs_dapo
    assert "**missed**" in claim_lines(text, "ARRoL + detect screen against DAPO with refill")[0]  # −0.03
    prompt_gain = claim_lines(text, "Group screening, GRPO + prompt screen")[0]
    assert "1.70× GRPO's share" in prompt_gain and "**met**" in prompt_gain  # 0.51 / 0.30, cost 0.05
    detect_gain = claim_lines(text, "Group screening, ARRoL + detect screen")[0]
    assert "1.33×" in detect_gain and "**missed**" in detect_gain  # 0.40 / 0.30, and cost 0.30 > 0.25
    assert not claim_lines(text, "Group screening, DAPO"), "no screen, no screen claims"
    prompt_audit = claim_lines(text, "Screen audit, GRPO + prompt screen, prompt stage")[0]
    # pooled over 2 seeds: screened 18/20 = 0.9, random 28/40 = 0.7, oracle min(1, 0.7 / 0.5) = 1: progress 2/3
    assert "0.900 had zero advantage, against 0.700" in prompt_audit and "oracle" in prompt_audit
    assert "progress 0.67" in prompt_audit and "**met**" in prompt_audit
    detect_audit = claim_lines(text, "Screen audit, ARRoL + detect screen, detect stage")[0]
    assert "0.700 had zero advantage" in detect_audit and "**missed**" in detect_audit  # progress 0
    assert section.count("| prompt | 20 |") == 4 and "| 0 | GRPO + prompt screen | 0.510 | 1.70× | 0.050 |" in section


def test_screen_section_says_how_to_run_it(results_dir: Path, tmp_path: Path):
    text = build_page(results_dir, tmp_path / "page.md")
    assert "--only screen page" in text.split("## 12.")[1]


def test_screen_section_leaves_out_pilot_arms_that_did_not_run(results_dir: Path, tmp_path: Path):
    grpo = {"name": "grpo", "dynamic_sampling_refill": False}
    write_screen_run(results_dir, "grpo", 0, grpo, {"policy": "none"}, 0.30, 0.70)
    write_screen_run(
        results_dir,
        "arrol_screen_prompt",
        0,
        grpo,
        {"policy": "arrol", "screen": {"stages": "prompt"}},
        0.32,
        0.60,
        {"cost_share": 0.04},
    )
    # a run from before the screen's cost was recorded: its cost is unknown, not -inf
    write_screen_run(results_dir, "grpo", 1, grpo, {"policy": "none"}, 0.30, 0.70)
    write_screen_run(
        results_dir, "arrol_screen_prompt", 1, grpo, {"policy": "arrol", "screen": {"stages": "prompt"}}, 0.32, 0.60
    )
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 12.")[1]
    assert "### ARRoL + prompt screen vs GRPO" in section and "### DAPO with refill vs GRPO" in section
    assert "detect screen vs GRPO" not in section and "### GRPO + prompt screen" not in section
    cost = claim_lines(text, "Group screening, ARRoL + prompt screen")[0]
    assert "the screen costing 0.040 of the step (1 of 2 runs recorded it)" in cost and "-inf" not in section


def write_seed_run(
    path: Path,
    policy: str,
    gate: float | None,
    seed: int,
    curve_points: list[tuple[float, float]],
    gate_open: float = 0.0,
) -> None:
    """A job of +exp=seeds with a held-out curve: ``(training seconds, held-out accuracy)``, the first point at 0 s
    being the accuracy before training; a pruned arm's gate open on ``gate_open`` of its steps."""
    path.mkdir(parents=True)
    (t0, before), *after = curve_points
    path.joinpath("summary.json").write_text(
        json.dumps(
            {
                "config": {
                    "pruning": {
                        "policy": policy,
                        "gate_auc": gate,
                        "screen": {"stages": "none"},
                        "cold_start_steps": 0,
                    },
                    "trainer": {"max_steps": 300, "seed": seed},
                },
                "steps": 300,
                "heldout_accuracy_before": before,
                "heldout_accuracy_after": after[-1][1],
                "heldout_problems": 256,
                "heldout_accuracy_se_before": 0.01,
                "heldout_accuracy_se_after": 0.01,
                "heldout_samples": 8,
                "seconds_per_step": 0.5,
                **(
                    {}
                    if policy == "none"
                    else {
                        "head_auc_after_cold_start": 0.7,
                        "head_within_auc_after_cold_start": 0.5,
                        "pruning_active_fraction": gate_open,
                    }
                ),
                "overrides": [f"pruning={'none' if policy == 'none' else 'arrol_gated'}", f"trainer.seed={seed}"],
            }
        )
    )
    path.joinpath("history.jsonl").write_text(
        "".join(json.dumps({"time/wall": t, "heldout/accuracy": acc}) + "\n" for t, acc in after)
    )


def test_seeds_section_compares_the_default_with_grpo_per_second_of_training(results_dir: Path, tmp_path: Path):
    seeds = results_dir / "seeds"
    # seed 0: the default gains as much in half the time; seed 1: it gains half as much in the same time
    write_seed_run(seeds / "g0", "none", None, 0, [(0, 0.2), (50, 0.3), (100, 0.4)])
    write_seed_run(seeds / "d0", "arrol", 0.65, 0, [(0, 0.2), (25, 0.35), (50, 0.4)], gate_open=0.5)
    write_seed_run(seeds / "g1", "none", None, 1, [(0, 0.2), (50, 0.3), (100, 0.4)])
    write_seed_run(seeds / "d1", "arrol", 0.65, 1, [(0, 0.2), (50, 0.25), (100, 0.3)], gate_open=0.5)
    # seed 2: GRPO first stands at its final 0.40 at 50 s (it peaks, then ends there); the default gets there at
    # 40 s: 0.80 of GRPO's own time, not 0.40 of its whole run
    write_seed_run(seeds / "g2", "none", None, 2, [(0, 0.2), (50, 0.42), (100, 0.4)])
    write_seed_run(seeds / "d2", "arrol", 0.65, 2, [(0, 0.2), (40, 0.4), (100, 0.45)], gate_open=0.5)
    (seeds / "wallclock.png").write_bytes(b"\x89PNG fake")
    page = tmp_path / "docs" / "page.md"
    text = build_page(results_dir, page)
    section = text.split("## 9.")[1].split("## 10.")[0]
    assert "| 0 | 100 / 50 | +0.200 / +0.200 | 2.00× | 50 s (0.50) | 0.700 / 0.500 | 0.50 |" in section
    assert "| 1 | 100 / 100 | +0.200 / +0.100 | 0.50× | never | 0.700 / 0.500 | 0.50 |" in section
    assert "| 2 | 100 / 100 | +0.200 / +0.250 | 1.25× | 40 s (0.80) | 0.700 / 0.500 | 0.50 |" in section
    assert (
        "![held-out accuracy vs training seconds" in section
        and (page.parent / "figures" / "seeds_wallclock.png").exists()
    )
    claim = claim_lines(text, "Seeds, the default against GRPO")[0]
    assert (
        "higher on 2 of 3 seeds" in claim and "reached on 2 of 3 seeds (median at 0.65 of the time GRPO took" in claim
    )
    # 2.00, 0.50, 1.25: mean 1.25 ± SE 0.433 on 2 df, inside ±1.86 of 1×; what 3 seeds could detect is stated
    assert (
        "1.25 ± 0.75 (SE 0.43)× GRPO's (not distinguishable from 1×: 95 % t interval ±1.86, 2 df; the seeds could "
        "detect ±2.32 at 80 % power)"
        in claim
        and "**missed**" in claim
    )


def test_a_default_whose_gate_never_opened_ran_as_grpo_and_gets_no_speed_claim(results_dir: Path, tmp_path: Path):
    seeds = results_dir / "seeds"
    for seed in (0, 1):  # the default gains faster than GRPO, but it pruned nothing: GRPO against GRPO
        write_seed_run(seeds / f"g{seed}", "none", None, seed, [(0, 0.2), (50, 0.3), (100, 0.4)])
        write_seed_run(seeds / f"d{seed}", "arrol", 0.6, seed, [(0, 0.2), (25, 0.35), (50, 0.4)])
    text = build_page(results_dir, tmp_path / "page.md")
    section = text.split("## 9.")[1].split("## 10.")[0]
    assert "| 0 | 100 / 50 | +0.200 / +0.200 | 2.00× | 50 s (0.50) | 0.700 / 0.500 | 0.00 (ran as GRPO) |" in section
    claim = claim_lines(text, "Seeds, the default against GRPO")[0]
    assert (
        "its gate never opened on any of 2 seeds, so it pruned no rollout and ran as GRPO; no speed of ARRoL's is "
        "measured here"
        in claim
        and "2.00" not in claim
        and "**missed**: the default pruned nothing" in claim
    )
    headline = [line for line in text.split("### Every claim")[0].splitlines() if "(Fig. 4) | tiny |" in line][0]
    assert (
        "default ran as GRPO (gate shut on 2 of 2 seeds): no speed claim" in headline and "per second" not in headline
    )
    # one seed that pruned: the claim is made from it alone, and the shut one is named as left out
    write_seed_run(seeds / "g2", "none", None, 2, [(0, 0.2), (50, 0.3), (100, 0.4)])
    write_seed_run(seeds / "d2", "arrol", 0.6, 2, [(0, 0.2), (50, 0.3), (100, 0.5)], gate_open=0.4)
    claim = claim_lines(build_page(results_dir, tmp_path / "page.md"), "Seeds, the default against GRPO")[0]
    assert (
        "where its gate opened: held-out gain per training second 1.50" in claim and "higher on 1 of 1 seeds" in claim
    )
    assert "on 2 of 3 seeds its gate never opened and it ran as GRPO, left out" in claim and "**missed**" in claim


def unkept(text: str) -> str:
    """A page's text without the lines that mark its kept sections (and the blank line after each)."""
    return re.sub(r"Kept from an earlier run; [^\n]*\n\n", "", text)


def test_one_section_is_rebuilt_and_the_others_are_kept_as_the_page_has_them(results_dir: Path, tmp_path: Path):
    page = tmp_path / "page.md"
    full = build_page(results_dir, page)
    assert "- [§4](#4-κ-ablation-paper-table-6) Table 6" in full  # each claim links to its section
    # the κ runs are gone (measured elsewhere); the seeds part is new: only section 9 is rebuilt
    for job in (results_dir / "kappa").iterdir():
        (job / "summary.json").unlink()
    write_seed_run(results_dir / "seeds" / "g0", "none", None, 0, [(0, 0.2), (50, 0.3), (100, 0.4)])
    write_seed_run(results_dir / "seeds" / "g1", "none", None, 1, [(0, 0.2), (50, 0.3), (100, 0.45)])
    partial = build_page(results_dir, page, only=["seeds"])
    summary = lambda text: text.split("### Every claim")[1].split("## 1.")[0].splitlines()  # noqa: E731
    assert [line for line in summary(partial) if not line.startswith("- [§9]")] == summary(full)
    assert [line for line in summary(partial) if line.startswith("- [§9]")] == [
        "- [§9](#9-the-default-experiment-over-seeds-tiny-policy) Seeds, `all`: held-out accuracy rose on 2 of 2 "
        "seeds, beyond its 95 % t interval of the before/after difference on 2 (mean gain +0.225 ± 0.035) — "
        "project target (learning on every seed): **met**."
    ]
    table = [line for line in partial.split("### Every claim")[0].splitlines() if line.startswith("| The default")]
    assert table == [
        "| The default experiment learns on every seed (project) | tiny | — | `all` learned on 2 of 2 | — "
        "([§](#9-the-default-experiment-over-seeds-tiny-policy)) | learning on every seed: met |"
    ]
    kept = [line for line in partial.split("### Every claim")[0].splitlines() if "(Table 6)" in line]
    assert kept == [line for line in full.split("### Every claim")[0].splitlines() if "(Table 6)" in line]
    # every other section is kept as it was, under the line that says so and how to refresh it
    assert unkept(partial.split("## 9.")[0].split("## 1.")[1]) == full.split("## 9.")[0].split("## 1.")[1]
    assert unkept(partial.split("## 10.")[1]) == full.split("## 10.")[1]
    assert "Table 6" in partial.split("## 4.")[1]  # kept although its runs are gone
    # the sections that had the κ runs are kept; one that results still give as they were (voting) or that was
    # not run has nothing to keep
    kept = {
        n: body.split("\n")[2]
        for n, body in split_page(partial).items()
        if body.split("\n")[2].startswith("Kept from an earlier run; its records were not committed")
    }
    assert sorted(kept) == [2, 3, 4, 6]
    assert kept[2].endswith("rerun `python experiments/reproduce.py --only kappa balance page` to refresh it.")
    assert kept[4].endswith("rerun `python experiments/reproduce.py --only kappa page` to refresh it.")
    assert build_page(results_dir, page, only=["seeds"]) == partial, "a kept section is marked once"
    assert "Not run (`seeds/`" in full and "Not run (`seeds/`" not in partial
    with pytest.raises(ValueError, match="unknown section"):
        build_page(results_dir, page, only=["seed"])


def test_the_gradient_probe_is_the_pages_fourteenth_section_and_says_how_to_run_it(results_dir: Path, tmp_path: Path):
    from results_page.page import SECTION_KEYS

    assert SECTION_KEYS.index("grad_probe") == 13
    page = tmp_path / "page.md"
    full = build_page(results_dir, page)
    section = full.split("\n## 14. ")[1]
    assert section.startswith("Does choosing the survivors improve the update? The gradient probe (beyond the paper)")
    assert (
        "Not run (`grad_probe/` holds no `grad_probe.json`): `python experiments/reproduce.py --only grad_probe page`"
    ) in section
    # a page built before the section existed gains it when only the probe's section is rebuilt
    older = full.split("\n\n## 14. ")[0] + "\n"
    page.write_text(older)
    partial = build_page(results_dir, page, only=["grad_probe"])
    assert unkept(partial.split("\n\n## 14. ")[0].split("## 1. ", 1)[1]) == older.split("## 1. ", 1)[1].rstrip("\n")
    assert "\n## 14. Does choosing the survivors" in partial


def test_the_pages_seeds_section_reports_the_arms_and_seeds_the_sweep_runs():
    """docs/results.md section 9 is generated from `+exp=seeds`: its table's arms and seed counts are the ones
    conf/exp/seeds.yaml sweeps, so the page cannot report arms the preset does not run."""
    import re

    import yaml

    root = Path(__file__).resolve().parents[2]
    params = yaml.safe_load((root / "conf" / "exp" / "seeds.yaml").read_text())["hydra"]["sweeper"]["params"]
    arms = {f"pruning={a.strip()}" for a in str(params["pruning"]).split(",")}
    seeds = len(str(params["trainer.seed"]).split(","))
    page = (root / "docs" / "results.md").read_text()
    section = page[page.index("## 9. ") : page.index("## 10. ")]
    rows = [line.split("|")[1:3] for line in section.splitlines() if re.match(r"\| pruning=", line)]
    assert {arm.strip() for arm, _ in rows} == arms
    assert all(int(n) == seeds for _, n in rows), f"every arm over the sweep's {seeds} seeds"


def test_a_kept_claim_judged_by_two_standard_errors_is_judged_again_by_its_t_interval():
    from results_page.common import Claim

    old = {
        "row": "time_smollm2",
        "text": "Fig. 4: ARRoL minus GRPO's, +0.030 ± 0.012 over 3 seed(s)",
        "paper": "reproduced",
        "detail": " (reproduced means ahead by more than two standard errors)",
        "targets": [["ahead of GRPO by more than two standard errors", True]],
        "here": "x",
    }
    claim = Claim.from_json(old)  # 2.5 SE: beyond two standard errors, inside t(2 df) = 4.30
    assert claim.paper == "not distinguishable" and claim.targets == (
        ("ahead of GRPO beyond its 95 % t interval", False),
    )
    assert claim.detail.startswith(": not distinguishable from 0 (95 % t interval ±0.052, 2 df)")
    assert "two standard errors" not in claim.line()
    kept = {**old, "detail": ": measured", "targets": []}
    assert Claim.from_json(kept) == Claim.from_json(kept).restated() and Claim.from_json(kept).paper == "reproduced"
