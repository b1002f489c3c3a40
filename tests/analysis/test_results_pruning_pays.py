"""The results page's section 13 (arrol_pl.analysis.results.pruning_pays) from synthetic runs of +exp=pruning_pays:
arms by their overrides, paired with GRPO G = 8 by seed and by problem, the break-even AUC of the oracle ladder,
the time to GRPO's final accuracy on the oracle's credited clock, the figures and the verdicts."""

import importlib.util
import json
from pathlib import Path

import pytest

from arrol_pl.analysis.results.page import SECTION_KEYS, build_page
from arrol_pl.analysis.results.pruning_pays import break_even, section_pruning_pays, study_arms
from arrol_pl.analysis.runs import sweep_runs

ROOT = Path(__file__).resolve().parents[2]
GRPO_AFTER = 0.40
GRPO_CURVE = [(100, 0.30), (200, 0.35), (300, GRPO_AFTER)]
ARMS = {  # arm → (pruning config, held-out after minus GRPO's, realised scorer AUC)
    "grpo_g4": ({"policy": "none"}, -0.02, None),
    "random": ({"policy": "random"}, -0.03, 0.70),  # the head's AUC: random pruning ignores it
    "arrol": ({"policy": "arrol", "scorer": "head"}, +0.01, 0.62),
    "arrol_confidence": ({"policy": "arrol", "scorer": "confidence"}, -0.05, 0.55),
    "arrol_checker": ({"policy": "arrol", "scorer": "checker"}, +0.05, 0.85),
}
LADDER = {0.6: -0.05, 0.7: -0.02, 0.8: +0.04, 0.9: +0.06}  # oracle AUC → difference; the bare arm=oracle: 1.0
ORACLE_AFTER = GRPO_AFTER + 0.08


def write_job(sweep: Path, arm: str, seed: int, after: float, *, pruning: dict | None = None, extra: tuple = (),
              auc: float | None = None, history: list[dict] | None = None, group_size: int = 8,
              per_problem: list[float] | None = None, **summary) -> None:
    """A job of the sweep as Hydra names it, with its summary and its held-out history (training seconds)."""
    overrides = ["+exp=pruning_pays", f"arm={arm}", *extra, f"trainer.seed={seed}"]
    job = sweep / ",".join(overrides[1:])
    job.mkdir(parents=True)
    config = {"pruning": {"policy": "none", "scorer": "head", "oracle_auc": 1.0, **(pruning or {})},
              "algo": {"prompts_per_step": 8, "group_size": group_size, "max_response_tokens": 128},
              "trainer": {"seed": seed, "max_minutes": 5, "eval_every": 25},
              "engine": {"detect_length": 16, "max_num_seqs": 32}}
    job.joinpath("summary.json").write_text(json.dumps({
        "config": config, "overrides": overrides, "steps": 100, "heldout_accuracy_before": 0.2,
        "heldout_accuracy_after": after, "heldout_accuracy_se_after": 0.01, "heldout_problems": 256,
        "heldout_samples": 8, "scorer_auc_after_cold_start": auc, "keep_ratio_mean": 0.5 if pruning else 1.0,
        "heldout_per_problem_after": per_problem or [], "positive_ratio_mean": 0.3 if pruning else 0.25,
        "zero_advantage_fraction": 0.4, **summary}))
    rows = history if history is not None else [{"time/wall": 150, "heldout/accuracy": after - 0.05},
                                                 {"time/wall": 300, "heldout/accuracy": after}]
    job.joinpath("history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def oracle_history(reach_at: float) -> list[dict]:
    """An oracle run's evaluations on the measured clock and the credited one (wall minus the credit so far, 150 s
    in all): it passes GRPO's final 0.40 at ``reach_at`` credited seconds, ``reach_at`` + 75 measured."""
    credited = [(reach_at - 50, 0.38), (reach_at, 0.42), (300, ORACLE_AFTER)]
    return [{"time/wall": t + 150 * i / 2, "time/credit": 75 if i else 0, "time/wall_credited": t,
             "heldout/accuracy": acc} for i, (t, acc) in enumerate(credited)]


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A results directory whose pruning_pays/ sweep holds every arm over seeds 0 and 1, the differences to GRPO the
    same on both seeds (their SE: hypot(0.01, 0.01) per seed, 0.010 over the two)."""
    root = tmp_path / "results"
    sweep = root / "pruning_pays"
    grpo_history = [{"time/wall": t, "heldout/accuracy": acc} for t, acc in GRPO_CURVE]
    for seed in (0, 1):
        write_job(sweep, "grpo", seed, GRPO_AFTER, history=grpo_history)
        for arm, (pruning, diff, auc) in ARMS.items():
            write_job(sweep, arm, seed, GRPO_AFTER + diff, pruning=pruning if pruning["policy"] != "none" else None,
                      auc=auc, group_size=4 if arm == "grpo_g4" else 8)
        write_job(sweep, "oracle", seed, ORACLE_AFTER, pruning={"policy": "arrol", "scorer": "oracle"}, auc=1.0,
                  history=oracle_history(150 if seed == 0 else 200), credited_seconds=150.0)
        for level, diff in LADDER.items():
            write_job(sweep, "oracle", seed, GRPO_AFTER + diff, extra=(f"pruning.oracle_auc={level}",), auc=level,
                      pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level})
        write_job(sweep, "oracle", seed, GRPO_AFTER + 0.12, extra=("pruning.balance_target=group",), auc=1.0,
                  pruning={"policy": "arrol", "scorer": "oracle", "balance_target": "group"})
    return root


def claim_lines(text: str, start: str) -> list[str]:
    """The page's summary of claims of section 13 that start with ``start``."""
    claims = [line.split(") ", 1)[1] for line in text.split("## 1.")[0].splitlines() if line.startswith("- [§13]")]
    return [claim for claim in claims if claim.startswith(start)]


def section_of(text: str) -> str:
    return text.split("\n## 13. ")[1]


def test_the_section_is_the_pages_thirteenth_and_says_how_to_run_the_study(tmp_path: Path):
    assert SECTION_KEYS.index("pruning_pays") == 12
    text = build_page(tmp_path / "results", tmp_path / "page.md")
    section = section_of(text)
    assert section.startswith("When does pruning pay? Scorers at L_detect, the oracle ladder and the cost-matched "
                              "control (beyond the paper)\n")
    assert "The study was not run" in section
    assert "`python experiments/reproduce.py --only pruning_pays page`" in section
    assert not claim_lines(text, "") and "Not run" not in section  # a line, no claims (the smoke run counts "Not run")
    assert not (tmp_path / "figures" / "pruning_pays_break_even.png").exists()


def test_arms_are_the_overrides_without_the_seed_and_pair_with_grpo_by_seed(study: Path, tmp_path: Path):
    arms = study_arms(sweep_runs(study / "pruning_pays"))
    assert [a.label for a in arms] == [
        "arm=grpo", "arm=grpo_g4", "arm=random", "arm=arrol", "arm=arrol_confidence", "arm=arrol_checker",
        "arm=oracle", "arm=oracle pruning.oracle_auc=0.9", "arm=oracle pruning.oracle_auc=0.8",
        "arm=oracle pruning.oracle_auc=0.7", "arm=oracle pruning.oracle_auc=0.6",
        "arm=oracle pruning.balance_target=group"]  # Eq. 2's ladder from the top, then each other rule's
    assert all(sorted(a.runs) == [0, 1] for a in arms)
    auc = {a.label: a.auc() for a in arms}
    assert auc["arm=grpo"] is None and auc["arm=random"] == 0.5  # random reads no score, whatever the head's AUC
    assert auc["arm=arrol"] == pytest.approx(0.62) and auc["arm=oracle pruning.oracle_auc=0.7"] == pytest.approx(0.7)
    text = build_page(study, tmp_path / "docs" / "page.md")
    section = section_of(text)
    # differences equal on both seeds: SE = the evaluations' hypot(0.01, 0.01) / sqrt(2) = 0.010
    assert "| `arm=arrol_checker` | 2 | 0.450 ± 0.000 (SE 0.000) | 0.250 ± 0.000 (SE 0.000) | +0.050 ± 0.010 (2 " \
           "seeds; evaluation SE 0.010, paired by problem on 0 of 2) | 0.850 | 0.50 | 0.300 | 0.40 | — |" in section
    grpo = "| `arm=grpo` | 2 | 0.400 ± 0.000 (SE 0.000) | 0.200 ± 0.000 (SE 0.000) | — | n/a | 1.00 | 0.250 | 0.40 | — |"
    assert grpo in section
    # the oracle's credit: 150 s of its 450 measured seconds
    assert "| `arm=oracle` | 2 | 0.480 ± 0.000 (SE 0.000) |" in section and "| 1.000 | 0.50 | 0.300 | 0.40 | 0.33 |" in section


def test_seeds_pair_with_their_own_grpo_run_and_evaluations_by_problem(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    grpo = [0.4, 0.4, 0.4, 0.4]
    write_job(sweep, "grpo", 0, 0.40, per_problem=grpo)
    write_job(sweep, "grpo", 1, 0.30, per_problem=[0.3] * 4)
    write_job(sweep, "arrol", 0, 0.45, pruning={"policy": "arrol"}, auc=0.7, per_problem=[0.4, 0.5, 0.4, 0.5])
    write_job(sweep, "arrol", 1, 0.35, pruning={"policy": "arrol"}, auc=0.7, per_problem=[0.3, 0.4, 0.3, 0.4])
    write_job(sweep, "arrol", 2, 0.99, pruning={"policy": "arrol"}, auc=0.7)  # no GRPO run of seed 2: left out
    section = section_of(build_page(tmp_path / "results", tmp_path / "page.md"))
    # per problem: differences 0, 0.1, 0, 0.1 → SE 0.0289 per seed, 0.0289 / sqrt(2) = 0.020 over the two seeds
    assert "| +0.050 ± 0.020 (2 seeds; per-problem SE 0.020) |" in section
    write_job(sweep, "grpo", 2, 0.90, per_problem=[0.9] * 4)
    write_job(sweep, "arrol", 3, 0.50, pruning={"policy": "arrol"}, auc=0.7)  # and no seed 3 of GRPO
    section = section_of(build_page(tmp_path / "results", tmp_path / "page.md"))
    # seeds 0, 1, 2: +0.05, +0.05, +0.09; seed SE 0.0133 < evaluation SE sqrt(2 · 0.0289² + 0.0141²) / 3 = 0.0144
    assert "| +0.063 ± 0.014 (3 seeds; evaluation SE 0.014, paired by problem on 2 of 3) |" in section


def test_the_break_even_auc_is_interpolated_where_the_oracle_ladder_crosses_zero(study: Path, tmp_path: Path):
    page = tmp_path / "docs" / "page.md"
    text = build_page(study, page)
    section = section_of(text)
    # −0.02 at AUC 0.7, +0.04 at 0.8: 0.7 + 0.1 · 0.02 / 0.06
    crossing = 0.7 + 0.1 * 0.02 / 0.06
    assert f"crosses 0 at AUC {crossing:.3f}, interpolated between its points at AUC 0.700 (-0.020) and 0.800 " \
           "(+0.040)" in section
    located = claim_lines(text, "Break-even of the oracle ladder:")
    assert len(located) == 1
    assert f"at scorer AUC {crossing:.3f}, between its points at AUC 0.700 and 0.800" in located[0]
    assert "project target (break-even AUC located to ±0.05): **met**" in located[0]
    assert "the learned head at AUC 0.620 (+0.010 ± 0.010); DeepConf at AUC 0.550 (-0.050 ± 0.010); the checker " \
           "at AUC 0.850 (+0.050 ± 0.010); random pruning at AUC 0.500 (-0.030 ± 0.010); GRPO G = 4, the " \
           "cost-matched control, -0.020 ± 0.010 (dashed)" in section
    # an oracle pruning by another rule is a ladder of its own, not a point of Eq. 2's
    assert "The oracle ladder under group survival has 1 point(s), too few to locate a break-even." in section
    assert len(claim_lines(text, "Break-even of the oracle ladder under group survival")) == 0
    headline = [line for line in text.split("### Every claim")[0].splitlines() if "(Fig. 4) | tiny |" in line][0]
    assert "Break-even AUC, oracle ladder: Eq. 2 ≈ 0.73; group survival not run; learned head at 0.62" in headline
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
        write_job(sweep, "oracle", 0, GRPO_AFTER + diff, extra=(f"pruning.oracle_auc={level}",), auc=level,
                  pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level})
    _, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")]
    assert "at scorer AUC 0.700, between its points at AUC 0.600 and 0.800" in located[0].text
    assert located[0].targets == (("break-even AUC located to ±0.05", False),)
    for job in sweep.glob("arm=oracle,pruning.oracle_auc=0.6*"):
        summary = json.loads((job / "summary.json").read_text())
        summary["heldout_accuracy_after"] = GRPO_AFTER + 0.01  # now ahead at both points: no crossing
        (job / "summary.json").write_text(json.dumps(summary))
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "does not cross 0 going up within the ladder (AUC 0.600–0.800)" in located.text
    assert not located.targets[0][1]
    assert located.here == "Break-even AUC, oracle ladder: Eq. 2 none in 0.60–0.80"  # ahead at both, within noise at one


def test_a_crossing_within_noise_does_not_locate_the_break_even(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    write_job(sweep, "grpo", 0, GRPO_AFTER)
    for level, diff in ((0.7, -0.01), (0.8, 0.02)):  # one seed: SE hypot(0.01, 0.01) = 0.014, so +0.02 is noise
        write_job(sweep, "oracle", 0, GRPO_AFTER + diff, extra=(f"pruning.oracle_auc={level}",), auc=level,
                  pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level})
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "crosses 0 at scorer AUC 0.733, between its points at AUC 0.700 and 0.800" in located.text
    assert located.targets == (("break-even AUC located to ±0.05", False),)  # 0.1 apart, but nothing ahead of noise
    assert located.here == "Break-even AUC, oracle ladder: Eq. 2 ≈ 0.73, within noise"
    assert "(+0.020); no point at or above it is ahead of GRPO G = 8 by more than two standard errors, so the " \
           "crossing is within noise." in "\n".join(lines)


def test_an_uncrossed_ladder_states_its_slope_within_seeds(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    ladder = {0: {0.6: 0.01, 0.7: 0.02, 0.8: 0.03}, 1: {0.6: 0.03, 0.7: 0.02, 0.8: 0.01}}  # seed → AUC → difference
    for seed, points in ladder.items():
        write_job(sweep, "grpo", seed, GRPO_AFTER)
        for level, diff in points.items():
            write_job(sweep, "oracle", seed, GRPO_AFTER + diff, extra=(f"pruning.oracle_auc={level}",), auc=level,
                      pruning={"policy": "arrol", "scorer": "oracle", "oracle_auc": level})
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    # within seeds the two slopes cancel: 0; residuals 4 × 0.01² on 6 - 2 - 1 dof over Σx² = 0.04, per 0.1 of AUC
    expected = "per 0.1 of AUC the difference moves by +0.000 ± 0.006 (within seeds: flat within two standard errors)"
    located = [c for c in claims if c.text.startswith("Break-even")][0]
    assert "does not cross 0 going up within the ladder (AUC 0.600–0.800); " + expected in located.text
    assert "0.600: +0.020, 0.700: +0.020, 0.800: +0.020; " + expected + "." in "\n".join(lines)


def test_without_the_ladder_the_section_says_how_to_run_it_and_headlines_the_oracle(tmp_path: Path):
    sweep = tmp_path / "results" / "pruning_pays"
    write_job(sweep, "grpo", 0, GRPO_AFTER)
    write_job(sweep, "arrol", 0, GRPO_AFTER, pruning={"policy": "arrol"}, auc=None, head_auc_after_cold_start=0.66)
    write_job(sweep, "oracle", 0, ORACLE_AFTER, pruning={"policy": "arrol", "scorer": "oracle"}, auc=1.0,
              history=[{"time/wall": 150, "heldout/accuracy": 0.35}, {"time/wall": 300, "heldout/accuracy": 0.48}])
    lines, claims = section_pruning_pays(tmp_path / "results", tmp_path / "figures", tmp_path)
    text = "\n".join(lines)
    assert "The oracle ladder has 1 point(s), too few to locate a break-even: `python experiments/run.py " \
           "+exp=pruning_pays arm=oracle pruning.oracle_auc=0.6,0.7,0.8,0.9" in text
    assert not [c for c in claims if c.text.startswith("Break-even")]
    goal = [c for c in claims if c.targets and "oracle at AUC 1.0" in c.targets[0][0]]
    # one seed: the evaluations' SE hypot(0.01, 0.01); GRPO's final 0.40 first reached at 300 s of GRPO's 300
    assert len(goal) == 1 and "+0.080 ± 0.014" in goal[0].text and "median 1.00" in goal[0].text
    assert goal[0].targets[0][1] is False  # ahead, but not in 0.6 of GRPO's time
    # the head-scored run that predates the scorer's AUC stands at its head's
    assert goal[0].here == "Break-even AUC, oracle ladder: Eq. 2 not run; learned head at 0.66"
    assert (tmp_path / "figures" / "pruning_pays_break_even.png").exists()


def test_the_oracle_reaches_grpos_final_accuracy_on_its_credited_clock(study: Path, tmp_path: Path):
    text = build_page(study, tmp_path / "page.md")
    section = section_of(text)
    # credited seconds 150 and 200 of GRPO's 300 (the measured clock: 225 and 275)
    assert "| `arm=oracle` | 0: 0.50, 1: 0.67 | 0.58 |" in section
    assert "| `arm=random` | 0: never, 1: never | never |" in section  # 0.37 never reaches 0.40
    assert "| `arm=arrol` | 0: 1.00, 1: 1.00 | 1.00 |" in section  # 0.41 at 300 s, 0.36 before
    goal = claim_lines(text, "The oracle at AUC 1.0 (`arm=oracle`) against GRPO G = 8:")
    assert len(goal) == 1 and "+0.080 ± 0.010 at equal training time over 2 seed(s)" in goal[0]
    assert "at a median 0.58 of GRPO's training time (seed 0: 0.50, seed 1: 0.67)" in goal[0] and "**met**" in goal[0]


def test_the_fig4_and_control_verdicts_follow_the_paired_differences(study: Path, tmp_path: Path):
    text = build_page(study, tmp_path / "page.md")
    fig4 = {line.split(", ")[1].split(" (`")[0]: line for line in claim_lines(text, "Fig. 4 on the long-chain task")}
    assert set(fig4) == {"the learned head", "DeepConf", "the checker", "the oracle at AUC 1.0", "random pruning",
                         "the oracle at AUC 1.0 (group survival)"}
    head = fig4["the learned head"]
    assert "+0.010 ± 0.010 over 2 seed(s) — **tied within noise**: within two standard errors" in head
    assert "-0.050 ± 0.010 over 2 seed(s) — **not reproduced**: behind" in fig4["DeepConf"]
    assert "+0.050 ± 0.010 over 2 seed(s) — **reproduced**: ahead" in fig4["the checker"]
    assert "**reproduced**" in fig4["the oracle at AUC 1.0"] and "L_detect = 16" in fig4["the checker"]
    # random pruning is the paper's baseline: stated, not judged
    assert fig4["random pruning"].endswith("-0.030 ± 0.010 over 2 seed(s): behind by more than two standard errors.")
    control = [c for c in claim_lines(text, "") if "cost-matched control, at equal" in c]
    assert len(control) == 10  # random, the three scorers and six oracle arms; not GRPO G = 8 or G = 4
    met = [c for c in control if "**met**" in c]
    assert {c.split(" (`")[0] for c in met} == {"The learned head", "The checker", "The oracle at AUC 1.0",
                                                "The oracle at AUC 0.9", "The oracle at AUC 0.8",
                                                "The oracle at AUC 1.0 (group survival)"}
    assert any(c.startswith("The learned head (`arm=arrol`) against GRPO G = 4") and "+0.030 ± 0.010" in c
               for c in met)
    random = [c for c in control if c.startswith("Random pruning")][0]
    assert "-0.010 ± 0.010 over 2 seed(s): within two standard errors." in random and "**" not in random
    headline = [line for line in text.split("### Every claim")[0].splitlines() if "(Fig. 4) | tiny |" in line][0]
    assert "ahead of GRPO G = 4, the cost-matched control, by more than two standard errors: met on 6 of 9" in headline


def test_reproduce_runs_the_study_as_an_opt_in_part_feeding_section_13(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "experiments" / "reproduce.py")
    reproduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce)
    assert "pruning_pays" in reproduce.OPT_IN and reproduce.PART_SECTIONS["pruning_pays"] == ("pruning_pays",)
    argv = reproduce.commands(reproduce.parse_args(["--out", str(tmp_path)]))["pruning_pays"]
    assert argv[:3] == ["env", *reproduce.ONE_CORE], "an equal-time sweep runs on one core, one thread"
    assert argv[4:] == ["experiments/run.py", "+exp=pruning_pays", f"hydra.sweep.dir={tmp_path / 'pruning_pays'}"]
    page = tmp_path / "results.md"
    page.write_text("# Results\n")
    args = reproduce.parse_args(["--out", str(tmp_path), "--page", str(page), "--only", "pruning_pays", "page"])
    assert reproduce.page_sections(args) == ["--sections", "pruning_pays"]
