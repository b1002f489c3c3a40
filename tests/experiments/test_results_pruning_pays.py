"""The results page's section 13 (results_page.pruning_pays) from synthetic runs of +exp=pruning_pays:
arms by their overrides, paired with GRPO G = 8 by seed and by problem, the break-even AUC of the oracle ladder on
the AUC within groups, the time to GRPO's final accuracy (a share of GRPO's own time to it) on the oracle's credited
clock, the figures and the verdicts, each judged on its 95 % t interval over the seeds."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from arrol_pl.analysis.runs import sweep_runs
from arrol_pl.train.records.summary import RunSummary

from results_page.page import SECTION_KEYS, build_page
from results_page.probe_ladder import ADVICE
from results_page.pruning_pays import (
    Arm,
    break_even,
    named,
    oracle_ladders,
    point_label,
    reach_shares,
    scorer_points,
    section_pruning_pays,
    study_arms,
    versus,
)

ROOT = Path(__file__).resolve().parents[2]
GRPO_AFTER = 0.40
GRPO_CURVE = [(100, 0.30), (200, 0.35), (300, GRPO_AFTER)]
SEEDS = (0, 1, 2, 3)
"""Four seeds: a mean over them is judged on t with 3 df (3.18 SE); over two (1 df, 12.7 SE) nothing here would be."""
RULE = {"balance_target": "anchored"}
"""What a run records of the default survival rule."""
ARMS = {  # arm → (pruning config, held-out after minus GRPO's, realised scorer AUC pooled, within groups)
    "grpo_g4": ({"policy": "none"}, -0.02, None, None),
    "random": ({"policy": "random"}, -0.03, 0.70, 0.52),  # the head's AUC: random pruning ignores it
    "arrol": ({"policy": "arrol", "scorer": "head", **RULE}, +0.01, 0.62, 0.53),
    "arrol_confidence": ({"policy": "arrol", "scorer": "confidence", **RULE}, -0.05, 0.55, 0.51),
    "arrol_checker": ({"policy": "arrol", "scorer": "checker", **RULE}, +0.05, 0.85, 0.75),
}
LADDER = {0.6: -0.05, 0.7: -0.02, 0.8: +0.04, 0.9: +0.06}  # oracle AUC → difference; the bare arm=oracle: 1.0
ORACLE_AFTER = GRPO_AFTER + 0.08
SE_4 = 0.01 * 2**0.5 / 2
"""The SE of a difference equal on the four seeds: the evaluations' hypot(0.01, 0.01) per seed, combined over 4."""
MARGIN_4, DETECT_4 = 3.1824 * SE_4, (3.1824 + 0.9785) * SE_4  # t_{0.975, 3}·SE = 0.023; (t_{0.975} + t_{0.80})·SE


def write_job(
    sweep: Path,
    arm: str,
    seed: int,
    after: float,
    *,
    pruning: dict | None = None,
    extra: tuple = (),
    auc: float | None = None,
    within: float | None = None,
    history: list[dict] | None = None,
    group_size: int = 8,
    per_problem: list[float] | None = None,
    **summary,
) -> None:
    """A job of the sweep as Hydra names it, with its summary and its held-out history (training seconds)."""
    overrides = ["+exp=pruning_pays", f"arm={arm}", *extra, f"trainer.seed={seed}"]
    job = sweep / ",".join(overrides[1:])
    job.mkdir(parents=True)
    config = {
        "pruning": {"policy": "none", "scorer": "head", "oracle_auc": 1.0, **(pruning or {})},
        "algo": {"prompts_per_step": 8, "group_size": group_size, "max_response_tokens": 128},
        "trainer": {"seed": seed, "max_minutes": 5, "eval_every": 25},
        "engine": {"detect_length": 16, "max_num_seqs": 32},
    }
    job.joinpath("summary.json").write_text(
        json.dumps(
            {
                "config": config,
                "overrides": overrides,
                "steps": 100,
                "heldout_accuracy_before": 0.2,
                "heldout_accuracy_after": after,
                "heldout_accuracy_se_after": 0.01,
                "heldout_problems": 256,
                "heldout_samples": 8,
                "scorer_auc_after_cold_start": auc,
                "scorer_within_auc_after_cold_start": within,
                "keep_ratio_mean": 0.5 if pruning else 1.0,
                "heldout_per_problem_after": per_problem or [],
                "positive_ratio_mean": 0.3 if pruning else 0.25,
                "zero_advantage_fraction": 0.4,
                **summary,
            }
        )
    )
    rows = (
        history
        if history is not None
        else [{"time/wall": 150, "heldout/accuracy": after - 0.05}, {"time/wall": 300, "heldout/accuracy": after}]
    )
    job.joinpath("history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def oracle_history(reach_at: float) -> list[dict]:
    """An oracle run's evaluations on the measured clock and the credited one (wall minus the credit so far, 150 s
    in all): it passes GRPO's final 0.40 at ``reach_at`` credited seconds, ``reach_at`` + 75 measured."""
    credited = [(reach_at - 50, 0.38), (reach_at, 0.42), (300, ORACLE_AFTER)]
    return [
        {"time/wall": t + 150 * i / 2, "time/credit": 75 if i else 0, "time/wall_credited": t, "heldout/accuracy": acc}
        for i, (t, acc) in enumerate(credited)
    ]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`write_study`'s results directory, written once for the module: a test that adds to it works on a copy."""
    return write_study(tmp_path_factory.mktemp("study") / "results")


def write_study(root: Path) -> Path:
    """``root``, a results directory, with a pruning_pays/ sweep that holds every arm over :data:`SEEDS`, the
    differences to GRPO the same on every seed (their SE: :data:`SE_4`); the oracle ladder's realised AUC within
    groups is its set AUC, its pooled one 0.05 higher."""
    sweep = root / "pruning_pays"
    grpo_history = [{"time/wall": t, "heldout/accuracy": acc} for t, acc in GRPO_CURVE]
    for seed in SEEDS:
        write_job(sweep, "grpo", seed, GRPO_AFTER, history=grpo_history)
        for arm, (pruning, diff, auc, within) in ARMS.items():
            write_job(
                sweep,
                arm,
                seed,
                GRPO_AFTER + diff,
                pruning=pruning if pruning["policy"] != "none" else None,
                auc=auc,
                within=within,
                group_size=4 if arm == "grpo_g4" else 8,
            )
        write_job(
            sweep,
            "oracle",
            seed,
            ORACLE_AFTER,
            pruning={"policy": "arrol", "scorer": "oracle", **RULE},
            auc=1.0,
            within=1.0,
            history=oracle_history(150 if seed < 2 else 200),
            credited_seconds=150.0,
        )
        for level, diff in LADDER.items():
            write_job(
                sweep,
                "oracle",
                seed,
                GRPO_AFTER + diff,
                extra=(f"pruning.oracle_auc={level}",),
                auc=level + 0.05,
                within=level,
                pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level, **RULE},
            )
        write_job(
            sweep,
            "oracle",
            seed,
            GRPO_AFTER + 0.12,
            extra=("pruning.balance_target=global",),
            auc=1.0,
            within=1.0,
            pruning={"policy": "arrol", "scorer": "oracle", "balance_target": "global"},
        )
    return root


@pytest.fixture(scope="module")
def study_page(study: Path) -> tuple[str, Path]:
    """The results page built from :func:`study` (its figures beside it) and its path: built once for the tests
    that read it (a build draws the section's figures, most of its time)."""
    page = study.parent / "docs" / "page.md"
    return build_page(study, page), page


def claim_lines(text: str, start: str) -> list[str]:
    """The page's summary of claims of section 13 that start with ``start``."""
    claims = [line.split(") ", 1)[1] for line in text.split("## 1.")[0].splitlines() if line.startswith("- [§13]")]
    return [claim for claim in claims if claim.startswith(start)]


def section_of(text: str) -> str:
    return text.split("\n## 13. ")[1].split("\n## 14. ")[0]


def test_the_section_is_the_pages_thirteenth_and_says_how_to_run_the_study(tmp_path: Path):
    assert SECTION_KEYS.index("pruning_pays") == 12
    text = build_page(tmp_path / "results", tmp_path / "page.md")
    section = section_of(text)
    assert section.startswith(
        "When does pruning pay? Scorers at L_detect, the oracle ladder and the cost-matched "
        "control (beyond the paper)\n"
    )
    assert "The study was not run" in section
    assert "`python experiments/reproduce.py --only pruning_pays page`" in section
    assert not claim_lines(text, "") and "Not run" not in section  # a line, no claims (the smoke run counts "Not run")
    assert not (tmp_path / "figures" / "pruning_pays_break_even.png").exists()


def test_arms_are_the_overrides_without_the_seed_and_pair_with_grpo_by_seed(study: Path, study_page):
    arms = study_arms(sweep_runs(study / "pruning_pays"))
    assert [a.label for a in arms] == [
        "arm=grpo",
        "arm=grpo_g4",
        "arm=random",
        "arm=arrol",
        "arm=arrol_confidence",
        "arm=arrol_checker",
        "arm=oracle",
        "arm=oracle pruning.oracle_auc=0.9",
        "arm=oracle pruning.oracle_auc=0.8",
        "arm=oracle pruning.oracle_auc=0.7",
        "arm=oracle pruning.oracle_auc=0.6",
        "arm=oracle pruning.balance_target=global",
    ]  # the default rule's ladder from the top, then each other rule's
    assert all(sorted(a.runs) == list(SEEDS) for a in arms)
    # a run that recorded no survival rule predates the anchored default: it pruned by Eq. 2 as written
    assert Arm("legacy", {0: RunSummary(config={"pruning": {"policy": "arrol"}})}).rule == "global"
    auc = {a.label: a.auc() for a in arms}
    assert auc["arm=grpo"] is None and auc["arm=random"] == 0.5  # random reads no score, whatever the head's AUC
    assert auc["arm=arrol"] == pytest.approx(0.53) and auc["arm=oracle pruning.oracle_auc=0.7"] == pytest.approx(0.7)
    section = section_of(study_page[0])
    # differences equal on every seed: SE = the evaluations' hypot(0.01, 0.01) / sqrt(4) = 0.007
    assert (
        "| `arm=arrol_checker` | 4 | 0.450 ± 0.000 (SE 0.000) | 0.250 ± 0.000 (SE 0.000) | +0.050 ± 0.007 (4 "
        "seeds; evaluation SE 0.007, paired by problem on 0 of 4) | 0.750 | 0.50 | 0.300 | 0.40 | — |" in section
    )
    grpo = (
        "| `arm=grpo` | 4 | 0.400 ± 0.000 (SE 0.000) | 0.200 ± 0.000 (SE 0.000) | — | n/a | 1.00 | 0.250 | 0.40 | — |"
    )
    assert grpo in section
    # the oracle's credit: 150 s of its 450 measured seconds
    assert (
        "| `arm=oracle` | 4 | 0.480 ± 0.000 (SE 0.000) |" in section
        and "| 1.000 | 0.50 | 0.300 | 0.40 | 0.33 |" in section
    )


def test_seeds_pair_with_their_own_grpo_run_and_evaluations_by_problem(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    grpo = [0.4, 0.4, 0.4, 0.4]
    write_job(sweep, "grpo", 0, 0.40, per_problem=grpo)
    write_job(sweep, "grpo", 1, 0.30, per_problem=[0.3] * 4)
    write_job(sweep, "arrol", 0, 0.45, pruning={"policy": "arrol", **RULE}, auc=0.7, per_problem=[0.4, 0.5, 0.4, 0.5])
    write_job(sweep, "arrol", 1, 0.35, pruning={"policy": "arrol", **RULE}, auc=0.7, per_problem=[0.3, 0.4, 0.3, 0.4])
    write_job(sweep, "arrol", 2, 0.99, pruning={"policy": "arrol", **RULE}, auc=0.7)  # no GRPO run of seed 2: left out
    section = section_of(build_page(tmp_path / "results", tmp_path / "page.md"))
    # per problem: differences 0, 0.1, 0, 0.1 → SE 0.0289 per seed, 0.0289 / sqrt(2) = 0.020 over the two seeds
    assert "| +0.050 ± 0.020 (2 seeds; per-problem SE 0.020) |" in section
    write_job(sweep, "grpo", 2, 0.90, per_problem=[0.9] * 4)
    write_job(sweep, "arrol", 3, 0.50, pruning={"policy": "arrol", **RULE}, auc=0.7)  # and no seed 3 of GRPO
    section = section_of(build_page(tmp_path / "results", tmp_path / "page.md"))
    # seeds 0, 1, 2: +0.05, +0.05, +0.09; seed SE 0.0133 < evaluation SE sqrt(2 · 0.0289² + 0.0141²) / 3 = 0.0144
    assert "| +0.063 ± 0.014 (3 seeds; evaluation SE 0.014, paired by problem on 2 of 3) |" in section


def test_the_break_even_auc_is_interpolated_where_the_oracle_ladder_crosses_zero(study_page):
    text, page = study_page
    section = section_of(text)
    # −0.02 at AUC 0.7, +0.04 at 0.8: 0.7 + 0.1 · 0.02 / 0.06
    crossing = 0.7 + 0.1 * 0.02 / 0.06
    assert (
        f"crosses 0 at AUC {crossing:.3f}, interpolated between its points at AUC 0.700 (-0.020) and 0.800 "
        "(+0.040)" in section
    )
    located = claim_lines(text, "Break-even of the oracle ladder:")
    assert len(located) == 1
    assert f"at scorer AUC {crossing:.3f} within groups, between its points at AUC 0.700 and 0.800" in located[0]
    assert "project target (break-even AUC located to ±0.05): **met**" in located[0]  # +0.04 at 0.8 > 0.023
    # each scorer stands at its AUC within groups (0.53, 0.51, 0.75), not its pooled one (0.62, 0.55, 0.85)
    assert (
        "the learned head at AUC 0.530 (+0.010 ± 0.007); DeepConf at AUC 0.510 (-0.050 ± 0.007); the checker "
        "at AUC 0.750 (+0.050 ± 0.007); random pruning at AUC 0.500 (-0.030 ± 0.007); GRPO G = 4, the "
        "cost-matched control, -0.020 ± 0.007 (dashed)" in section
    )
    # the span the ladder covers, from its points: it stops at 0.6, short of chance
    assert (
        "The oracle ladder spans AUC 0.600–1.000 within groups, not down to chance (0.5): a scorer below 0.600 "
        "falls beside no point of it." in section
    )
    # an oracle pruning by another rule is a ladder of its own, not a point of the default rule's
    assert "The oracle ladder under Eq. 2 has 1 point(s), too few to locate a break-even." in section
    assert len(claim_lines(text, "Break-even of the oracle ladder under Eq. 2")) == 0
    headline = [line for line in text.split("### Every claim")[0].splitlines() if "(Fig. 4) | tiny |" in line][0]
    assert (
        "Break-even AUC within groups, oracle ladder: anchored survival ≈ 0.73; Eq. 2 not run; learned head at "
        "0.53" in headline
    )
    for name in ("pruning_pays_break_even.png", "pruning_pays_wallclock.png"):
        figure = page.parent / "figures" / name
        assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"](figures/{name})" in section


def test_break_even_takes_the_highest_upward_crossing_or_none():
    assert break_even([(0.8, 0.04), (0.7, -0.02)]) == pytest.approx((0.7 + 0.1 / 3, 0.7, 0.8))
    assert break_even([(0.6, -0.1), (0.7, 0.1), (0.8, -0.1), (0.9, 0.1)]) == pytest.approx((0.85, 0.8, 0.9))
    assert break_even([(0.6, -0.1), (0.7, 0.0), (0.8, 0.1)]) == pytest.approx((0.7, 0.7, 0.8))
    assert break_even([(0.6, 0.01), (0.9, 0.02)]) is None  # ahead everywhere
    assert break_even([(0.6, 0.02), (0.9, -0.01)]) is None  # only downward
    assert break_even([(0.6, -0.02)]) is None


def test_a_coarse_or_uncrossed_ladder_misses_the_location_target(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    write_job(sweep, "grpo", 0, GRPO_AFTER)
    for level, diff in ((0.6, -0.03), (0.8, 0.03)):  # crosses at 0.7, but the points are 0.2 apart
        write_job(
            sweep,
            "oracle",
            0,
            GRPO_AFTER + diff,
            extra=(f"pruning.oracle_auc={level}",),
            auc=level,
            pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level, **RULE},
        )
    _, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")]
    assert "at scorer AUC 0.700 within groups, between its points at AUC 0.600 and 0.800" in located[0].text
    assert located[0].targets == (("break-even AUC located to ±0.05", False),)
    for job in sweep.glob("arm=oracle,pruning.oracle_auc=0.6*"):
        summary = json.loads((job / "summary.json").read_text())
        summary["heldout_accuracy_after"] = GRPO_AFTER + 0.01  # now ahead at both points: no crossing
        (job / "summary.json").write_text(json.dumps(summary))
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "does not cross 0 going up within the ladder (AUC 0.600–0.800 within groups)" in located.text
    assert not located.targets[0][1]
    # one seed: the evaluation's SE 0.014 on 255 df, t = 1.97: +0.03 is ahead, +0.01 is not
    assert located.here == "Break-even AUC within groups, oracle ladder: anchored survival none in 0.60–0.80"


def test_a_crossing_within_noise_does_not_locate_the_break_even(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    write_job(sweep, "grpo", 0, GRPO_AFTER)
    for level, diff in ((0.7, -0.01), (0.8, 0.02)):  # one seed: SE 0.014 on 255 df, so +0.02 is inside ±0.028
        write_job(
            sweep,
            "oracle",
            0,
            GRPO_AFTER + diff,
            extra=(f"pruning.oracle_auc={level}",),
            auc=level,
            pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level, **RULE},
        )
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "crosses 0 at scorer AUC 0.733 within groups, between its points at AUC 0.700 and 0.800" in located.text
    assert located.targets == (("break-even AUC located to ±0.05", False),)  # 0.1 apart, but nothing ahead of noise
    # what the point above could have detected: (t_{0.975, 255} + t_{0.80, 255}) · 0.0141 = 0.040
    assert (
        located.here == "Break-even AUC within groups, oracle ladder: anchored survival ≈ 0.73, not distinguishable "
        "(could "
        "detect ±0.040)"
    )
    assert (
        "(+0.020); no point at or above it is ahead of GRPO G = 8 beyond its 95 % t interval (they could detect "
        "±0.040 at 80 % power), so the crossing is not distinguishable from one by chance." in "\n".join(lines)
    )
    assert "no point at or above it is ahead of GRPO G = 8 by more than two standard errors" not in "\n".join(lines)


def test_an_uncrossed_ladder_states_its_slope_within_seeds(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    ladder = {0: {0.6: 0.01, 0.7: 0.02, 0.8: 0.03}, 1: {0.6: 0.03, 0.7: 0.02, 0.8: 0.01}}  # seed → AUC → difference
    for seed, points in ladder.items():
        write_job(sweep, "grpo", seed, GRPO_AFTER)
        for level, diff in points.items():
            write_job(
                sweep,
                "oracle",
                seed,
                GRPO_AFTER + diff,
                extra=(f"pruning.oracle_auc={level}",),
                auc=level,
                pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level, **RULE},
            )
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    # within seeds the two slopes cancel: 0; residuals 4 × 0.01² on 6 - 2 - 1 = 3 dof over Σx² = 0.04, per 0.1 of
    # AUC: SE 0.0058, t_{0.975, 3} = 3.18 of it ±0.018, (3.18 + 0.98) of it detectable: ±0.024
    expected = (
        "per 0.1 of AUC the difference moves by +0.000 ± 0.006 (within seeds, 95 % t interval ±0.018, 3 df: "
        "not distinguishable from flat; the ladder could detect ±0.024 at 80 % power)"
    )
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "does not cross 0 going up within the ladder (AUC 0.600–0.800 within groups); " + expected in located.text
    assert "0.600: +0.020, 0.700: +0.020, 0.800: +0.020; " + expected + "." in "\n".join(lines)


def test_without_the_ladder_the_section_says_how_to_run_it_and_headlines_the_oracle(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    write_job(sweep, "grpo", 0, GRPO_AFTER)
    write_job(
        sweep, "arrol", 0, GRPO_AFTER, pruning={"policy": "arrol", **RULE}, auc=None, head_auc_after_cold_start=0.66
    )
    write_job(
        sweep,
        "oracle",
        0,
        ORACLE_AFTER,
        pruning={"policy": "arrol", "scorer": "oracle", **RULE},
        auc=1.0,
        history=[{"time/wall": 150, "heldout/accuracy": 0.35}, {"time/wall": 300, "heldout/accuracy": 0.48}],
    )
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    text = "\n".join(lines)
    assert (
        "The oracle ladder has 1 point(s), too few to locate a break-even: `python experiments/run.py "
        "+exp=pruning_pays arm=oracle pruning.oracle_auc=0.6,0.7,0.8,0.9" in text
    )
    assert not [c for c in claims if c.text.startswith("Break-even")]
    goal = [c for c in claims if c.targets and "oracle at AUC 1.0" in c.targets[0][0]]
    # one seed: the evaluations' SE hypot(0.01, 0.01); GRPO's final 0.40 first reached at 300 s of GRPO's 300
    assert len(goal) == 1 and "+0.080 ± 0.014" in goal[0].text and "median 1.00" in goal[0].text
    assert goal[0].targets[0][1] is False  # ahead, but not in 0.6 of GRPO's time
    # the head-scored run that predates the scorer's AUC (and any AUC within groups) stands at its head's pooled one
    assert goal[0].here == (
        "Break-even AUC within groups, oracle ladder: anchored survival not run; learned head at 0.66 (pooled)"
    )
    assert (tmp_path / "figures" / "pruning_pays_break_even.png").exists()


def test_the_oracle_reaches_grpos_final_accuracy_on_its_credited_clock(study_page):
    text = study_page[0]
    section = section_of(text)
    # credited seconds 150 and 200 of the 300 GRPO took to its final 0.40 (the measured clock: 225 and 275)
    assert "| `arm=oracle` | 0: 0.50, 1: 0.50, 2: 0.67, 3: 0.67 | 0.58 |" in section
    assert "| `arm=random` | 0: never, 1: never, 2: never, 3: never | never |" in section  # 0.37 never reaches 0.40
    assert "| `arm=arrol` | 0: 1.00, 1: 1.00, 2: 1.00, 3: 1.00 | 1.00 |" in section  # 0.41 at 300 s, 0.36 before
    goal = claim_lines(text, "The oracle at AUC 1.0 (`arm=oracle`) against GRPO G = 8:")
    assert (
        len(goal) == 1
        and "+0.080 ± 0.007 at equal training time over 4 seed(s), ahead beyond its 95 % t interval (±0.023, 3 df)"
        in goal[0]
    )
    assert (
        "at a median 0.58 of the time GRPO took to reach it (seed 0: 0.50, seed 1: 0.50, seed 2: 0.67, seed 3: 0.67)"
        in goal[0]
        and "**met**" in goal[0]
    )


def test_time_to_grpos_final_accuracy_is_a_share_of_the_time_grpo_took_to_reach_it(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    # GRPO peaks at 0.41 at 200 s and ends at 0.40: it first stood at its final accuracy at 200 s, not at 300 s
    grpo = [(0, 0.20), (100, 0.30), (200, 0.41), (300, 0.40)]
    write_job(sweep, "grpo", 0, 0.40, history=[{"time/wall": t, "heldout/accuracy": a} for t, a in grpo])
    arrol = [(0, 0.20), (150, 0.40), (300, 0.42)]  # reaches 0.40 at 150 s: 150 / 200 = 0.75 (not 150 / 300 = 0.50)
    write_job(
        sweep,
        "arrol",
        0,
        0.42,
        pruning={"policy": "arrol", **RULE},
        auc=0.7,
        history=[{"time/wall": t, "heldout/accuracy": a} for t, a in arrol],
    )
    arms = study_arms(sweep_runs(sweep))
    base, ours = named(arms, "grpo"), named(arms, "arrol")
    assert reach_shares(ours, base) == [(0, pytest.approx(0.75))]
    # GRPO compared with itself (a copy of its arm: the section leaves the baseline out) reaches in exactly its time
    assert reach_shares(Arm("arm=grpo", dict(base.runs)), base) == [(0, 1.0)]
    lines, _ = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    assert "| `arm=arrol` | 0: 0.75 | 0.75 |" in lines


def test_the_break_even_axis_is_each_scorers_auc_within_groups(study: Path, study_page):
    arms = study_arms(sweep_runs(study / "pruning_pays"))
    base = named(arms, "grpo")
    diffs = {a.label: d for a in arms if (d := versus(a, base)) is not None}
    # what the figure draws: the realised AUC within groups, never the pooled one the runs also recorded
    points = {title: (reading.value, reading.basis) for title, reading, _ in scorer_points(arms, diffs)}
    assert points == {
        "the learned head": (pytest.approx(0.53), "within groups"),
        "DeepConf": (pytest.approx(0.51), "within groups"),
        "the checker": (pytest.approx(0.75), "within groups"),
        "random pruning": (0.5, "no score"),
    }
    ladder = [x for x, _ in oracle_ladders(arms, diffs)["anchored"]]
    assert ladder == pytest.approx([0.6, 0.7, 0.8, 0.9, 1.0])  # within groups; pooled they were recorded 0.05 higher
    section = section_of(study_page[0])
    assert "| scorer AUC within groups |" in section.split("\n")[4]
    assert "| +0.010 ± 0.007 (4 seeds; evaluation SE 0.007, paired by problem on 0 of 4) | 0.530 |" in section


def test_runs_without_the_auc_within_groups_stand_at_their_pooled_auc_marked_so(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    for seed in (0, 1):
        write_job(sweep, "grpo", seed, GRPO_AFTER)
        # seed 1's run recorded the AUC within groups, seed 0's predates it: the arm is not mixed, it reads pooled
        write_job(
            sweep,
            "arrol",
            seed,
            GRPO_AFTER,
            pruning={"policy": "arrol", **RULE},
            auc=0.62,
            within=0.53 if seed else None,
        )
        # an oracle that recorded neither stands at its set AUC, which its AUC within groups equals in expectation
        write_job(sweep, "oracle", seed, GRPO_AFTER, pruning={"policy": "arrol", "scorer": "oracle", **RULE})
    arms = study_arms(sweep_runs(sweep))
    head, oracle = named(arms, "arrol").auc_reading(), named(arms, "oracle").auc_reading()
    assert (head.value, head.basis, head.text()) == (pytest.approx(0.62), "pooled", "0.620 (pooled)")
    assert (oracle.value, oracle.basis, oracle.text()) == (1.0, "set", "1.000 (set)")
    assert point_label("the learned head", head) == "the learned head (pooled AUC)"  # its legend in the figure
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    text = "\n".join(lines)
    assert "| 0.620 (pooled) |" in text and "| 1.000 (set) |" in text
    assert "Beside it: the learned head at AUC 0.620 (pooled) (+0.000 ± 0.010)" in text
    assert claims[-1].here.endswith("learned head at 0.62 (pooled)")


def test_the_fig4_and_control_verdicts_follow_the_paired_differences(study_page):
    text = study_page[0]
    fig4 = {line.split(", ")[1].split(" (`")[0]: line for line in claim_lines(text, "Fig. 4 on the long-chain task")}
    assert set(fig4) == {
        "the learned head",
        "DeepConf",
        "the checker",
        "the oracle at AUC 1.0",
        "random pruning",
        "the oracle at AUC 1.0 (Eq. 2)",
    }
    head = fig4["the learned head"]
    # 4 seeds: t_{0.975, 3} · 0.0071 = ±0.023; +0.01 is inside it, and what it could detect is stated, no "tied"
    assert (
        "+0.010 ± 0.007 over 4 seed(s) — **not distinguishable**: not distinguishable from 0 (95 % t interval "
        "±0.023, 3 df); the comparison could detect ±0.029 at 80 % power" in head
    )
    assert f"±{MARGIN_4:.3f}" == "±0.023" and f"±{DETECT_4:.3f}" == "±0.029"
    assert "-0.050 ± 0.007 over 4 seed(s) — **not reproduced**: behind beyond its 95 % t interval" in fig4["DeepConf"]
    assert "+0.050 ± 0.007 over 4 seed(s) — **reproduced**: ahead" in fig4["the checker"]
    assert "**reproduced**" in fig4["the oracle at AUC 1.0"] and "L_detect = 16" in fig4["the checker"]
    # random pruning is the paper's baseline: stated, not judged
    assert fig4["random pruning"].endswith(
        "-0.030 ± 0.007 over 4 seed(s): behind beyond its 95 % t interval (±0.023, 3 df)."
    )
    control = [c for c in claim_lines(text, "") if "cost-matched control, at equal" in c]
    assert len(control) == 10  # random, the three scorers and six oracle arms; not GRPO G = 8 or G = 4
    met = [c for c in control if "**met**" in c]
    assert {c.split(" (`")[0] for c in met} == {
        "The learned head",
        "The checker",
        "The oracle at AUC 1.0",
        "The oracle at AUC 0.9",
        "The oracle at AUC 0.8",
        "The oracle at AUC 1.0 (Eq. 2)",
    }
    assert any(c.startswith("The learned head (`arm=arrol`) against GRPO G = 4") and "+0.030 ± 0.007" in c for c in met)
    random = [c for c in control if c.startswith("Random pruning")][0]
    assert (
        "-0.010 ± 0.007 over 4 seed(s): not distinguishable from 0 (95 % t interval ±0.023, 3 df); the "
        "comparison could detect ±0.029 at 80 % power."
        in random
        and "**" not in random
    )
    headline = [line for line in text.split("### Every claim")[0].splitlines() if "(Fig. 4) | tiny |" in line][0]
    assert (
        "ahead of GRPO G = 4, the cost-matched control, beyond its 95 % t interval over the seeds: met on 6 of "
        "9" in headline
    )


def test_reproduce_runs_the_study_as_an_opt_in_part_feeding_section_13(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "experiments" / "reproduce.py")
    reproduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce)
    assert "pruning_pays" in reproduce.OPT_IN and reproduce.PART_SECTIONS["pruning_pays"] == ("pruning_pays",)
    sweep, ladder, advice = reproduce.commands(reproduce.parse_args(["--out", str(tmp_path)]))["pruning_pays"]
    for argv in (sweep, ladder):
        assert argv[:3] == ["env", *reproduce.ONE_CORE], "an equal-time sweep runs on one core, one thread"
        assert argv[4:7] == ["experiments/run.py", "+exp=pruning_pays", "trainer.seed=0,1,2"]
        assert f"hydra.sweep.dir={tmp_path / 'pruning_pays'}" in argv  # the ladder joins the study's sweep
    assert ladder[-2:] == ["arm=oracle", "pruning.oracle_auc=0.9,0.7"]
    assert advice[1:3] == ["experiments/advise.py", "+exp=pruning_pays"]
    assert advice[-1] == f"hydra.run.dir={tmp_path / 'pruning_pays_advice'}"
    page = tmp_path / "results.md"
    page.write_text("# Results\n")
    args = reproduce.parse_args(["--out", str(tmp_path), "--page", str(page), "--only", "pruning_pays", "page"])
    assert reproduce.page_sections(args) == ["--sections", "pruning_pays"]


def write_advice(root: Path, probe_diffs: dict[str, tuple[float, float]]) -> None:
    """``arrol advise``'s record on the study's setting: its verdict and its probe's cosine differences to the
    cost-matched G' (subset → mean, SE over 40 batches)."""
    out = root / ADVICE
    out.mkdir(parents=True)
    (out / "advice.json").write_text(
        json.dumps(
            {
                "command": "python experiments/advise.py +exp=pruning_pays",
                "verdict_line": "Undecided: measure more batches.",
            }
        )
    )
    scorers = {"head": 0.55, "oracle_1": 1.0, "oracle_0.9": 0.9, "oracle_0.7": 0.7}
    # random κG is a baseline: the probe records its cosine per batch, not its difference to G'
    mean, se = probe_diffs.pop("random")
    spread = se * 39**0.5  # ± spread on alternate batches: SE spread·√(40/39)/√40
    per_batch = {"random": [0.5 + mean + spread * (-1) ** i for i in range(40)], "fresh_cost": [0.5] * 40}
    (out / "grad_probe.json").write_text(
        json.dumps(
            {
                "default_rule": "anchored",
                "settings": {"keep_ratio": 0.5, "measured_batches": 40},
                "costs": {"by_kappa": {"0.5": {"cost_matched": 4.7}}},
                "scorers": {name: {"auc": auc, "within_auc": auc} for name, auc in scorers.items()},
                "differences": {
                    "fresh_cost": {
                        key: {"cosine": {"mean": mean, "se": se, "n": 40, "df": 39}}
                        for key, (mean, se) in probe_diffs.items()
                    }
                },
                "subsets": {key: {"per_batch": {"cosine": values}} for key, values in per_batch.items()},
            }
        )
    )


def test_the_advice_is_set_beside_the_training_runs_and_disagreements_are_named(study: Path, tmp_path: Path):
    """Against GRPO G = 4 the runs stand at: oracle 1.0 +0.10, 0.9 +0.08, 0.8 +0.06, 0.7 0.00, the head +0.03 (all
    ahead beyond ±0.023 but 0.7), random -0.01 (inside)."""
    study = Path(shutil.copytree(study, tmp_path / "results"))
    write_advice(
        study,
        {
            "anchored/oracle_1": (0.10, 0.01),
            "anchored/oracle_0.9": (0.05, 0.01),
            "anchored/oracle_0.7": (-0.005, 0.01),
            "anchored/head": (-0.01, 0.02),
            "random": (-0.02, 0.01),
        },
    )
    lines, _ = section_pruning_pays(study, tmp_path / "figures", tmp_path)
    text = "\n".join(lines)
    part = text.split("### The advice against the training runs")[1]
    assert '"Undecided: measure more batches."' in part and "G' = 4.70 rollouts without pruning" in part
    rows = {line.split(" | ")[0].strip("| `"): line for line in part.splitlines() if line.startswith("| `arm=")}
    assert list(rows) == [
        "arm=oracle",
        "arm=oracle pruning.oracle_auc=0.9",
        "arm=oracle pruning.oracle_auc=0.7",
        "arm=arrol",
        "arm=random",
    ]
    assert rows["arm=oracle"].endswith("| agree |") and "+0.100 ± 0.010: **ahead**" in rows["arm=oracle"]
    assert rows["arm=oracle pruning.oracle_auc=0.9"].endswith("| agree |")
    assert rows["arm=oracle pruning.oracle_auc=0.7"].endswith("| agree (both nulls) |")
    assert rows["arm=arrol"].endswith("| **disagrees** |")  # the probe's null below 0, the runs ahead
    assert "not distinguishable (could detect ±" in rows["arm=arrol"]
    assert rows["arm=random"].endswith("| agree (both nulls) |")  # -0.02 inside t₀.₉₇₅(39)·0.01 = ±0.020
    assert "the probe 1 > 0.9 > 0.7, training 1 > 0.9 > 0.7 (the same order;" in part
    assert (
        "Opposite signs, one side beyond its interval: `arm=arrol`. The same sign, one side beyond its interval "
        "and the other not: none. Of 5 rows, 2 agree on a difference both sides distinguish and 2 only in that "
        "neither side distinguishes one."
    ) in part


def test_without_the_advice_the_part_says_how_to_run_it(study_page):
    part = section_of(study_page[0]).split("### The advice against the training runs")[1]
    assert "Not run (`pruning_pays_advice/` holds no advice" in part
    assert "`python experiments/reproduce.py --only pruning_pays page`" in part
