"""The results page's section 10 (results_page.online.section_online_balance) from synthetic sweeps of
+exp=smollm2_balance: whichever of ARRoL's survival rules ran, each against random pruning seed by seed and over the
seeds on its 95 % t interval with seeds − 1 degrees of freedom, the direction against the paper's Table 4, and the
claim the headline row reads (the default rule's)."""

import json
import math
import shutil
import statistics
from pathlib import Path

from results_page.online import section_online_balance
from results_page.page import anchor, build_page
from test_results import write_run

RULES = {
    "anchored": {"balance_target": "anchored"},
    "global": {"balance_target": "global"},
    "spread": {"balance_target": "spread"},
    "random": {"policy": "random"},
}
"""What each arm's summary records of ``config.pruning`` (``policy`` is ``arrol`` unless named)."""
RANDOM = {"rho": 0.25, "bal": 0.05, "zero": 0.70, "after": 0.30}
"""Random pruning's figures, the same on every seed."""
OFFSETS = {"anchored": (0.02, 0.03, 0.04), "global": (-0.01, -0.02, -0.03)}
"""Each rule's difference to random per seed (0, 1, 2), added to E[ρ̂], E[ρ̂(1−ρ̂)] (half of it) and held-out after,
taken from the zero-advantage share."""
WOBBLE = 0.001
"""Each step's figure is its mean ± this, alternating over the four steps after the cold start: a per-step standard
error of 0.001·sqrt(4/3)/2 = 0.00058, far below the spread of the per-seed differences."""
T975_2, T80_2 = 4.302653, 1.060660
"""Student's t at 0.975 and 0.80 on 2 degrees of freedom (3 seeds), from the tables."""


def history(rho: float, bal: float, zero: float) -> list[dict]:
    cold = [{"balance/positive_ratio": 0.0, "balance/rho_1_minus_rho": 0.0, "balance/zero_advantage_fraction": 1.0}] * 2
    return cold + [
        {
            "balance/positive_ratio": rho + s * WOBBLE,
            "balance/rho_1_minus_rho": bal + s * WOBBLE,
            "balance/zero_advantage_fraction": zero + s * WOBBLE,
        }
        for s in (-1, 1, -1, 1)
    ]


def write_arm(root: Path, rule: str, seed: int, offset: float) -> None:
    job = root / "online_balance" / f"{rule}-{seed}"
    write_run(
        job,
        {**RULES[rule], "cold_start_steps": 2},
        {
            "heldout_accuracy_before": 0.25,
            "heldout_accuracy_se_before": 0.03,
            "heldout_accuracy_after": RANDOM["after"] + offset,
            "heldout_accuracy_se_after": 0.03,
            "heldout_problems": 128,
            "keep_ratio_mean": 0.5,
            "head_auc_after_cold_start": 0.81,
            "head_within_auc_after_cold_start": 0.70,
            "head_accuracy_after_cold_start": 0.80,
            "head_majority_after_cold_start": 0.70,
        },
        history(RANDOM["rho"] + offset, RANDOM["bal"] + offset / 2, RANDOM["zero"] - offset),
    )
    summary = json.loads((job / "summary.json").read_text())
    summary["config"]["trainer"] = {"max_steps": 60, "max_minutes": None, "seed": seed}
    summary["config"]["head"] = {"input": "stats"}
    (job / "summary.json").write_text(json.dumps(summary))


def sweep(root: Path, sign: float = 1.0, rules: tuple[str, ...] = ("anchored", "global")) -> Path:
    """Random pruning and ``rules`` over seeds 0-2; ``sign`` -1 turns every rule's differences round."""
    for seed in range(3):
        write_arm(root, "random", seed, 0.0)
        for rule in rules:
            write_arm(root, rule, seed, sign * OFFSETS.get(rule, OFFSETS["anchored"])[seed])
    return root


def test_the_section_reports_each_rule_that_ran_per_seed_and_over_the_seeds(tmp_path: Path):
    lines, claims = section_online_balance(sweep(tmp_path))
    text = "\n".join(lines)
    assert (
        lines[0] == ("## 10. Online balance on SmolLM2-135M: ARRoL's survival rules vs random pruning (paper Table 4)")
        and "arrol_spread" not in text
    )
    assert "each arm trains 60 steps, L_detect = 12" in text and "every arm prunes at the same κ = 0.5" in text
    # Table 4's columns per seed and arm, the cold start left out (steps counts it)
    assert (
        "| 0 | ARRoL, anchored (default) | `stats` | 6 | 0.500 | 0.270 ± 0.001 | 0.060 ± 0.001 | 0.680 ± 0.001 | "
        "0.810 | 0.700 | 0.250 ± 0.030 | 0.320 ± 0.030 |"
    ) in text
    assert (
        "| 2 | Eq. 2 as written | `stats` | 6 | 0.500 | 0.220 ± 0.001 | 0.035 ± 0.001 | 0.730 ± 0.001 | 0.810 | "
        "0.700 | 0.250 ± 0.030 | 0.270 ± 0.030 |"
    ) in text
    assert sum(line.startswith("| 1 | random |") for line in lines) == 1
    # each rule minus random per seed: hypot of the two per-step SEs (0.00058 each); held-out hypot(0.03, 0.03)
    assert (
        "| ARRoL, anchored (default) | 0 | +0.020 ± 0.001 | +0.0100 ± 0.0008 | -0.020 ± 0.001 | +0.020 ± 0.042 |"
        in text
    )
    # over the seeds: the mean of the per-seed differences ± the larger SE, here their spread (sd 0.01 / sqrt 3 for
    # E[ρ̂] and zero-advantage groups, 0.005 / sqrt 3 for E[ρ̂(1−ρ̂)]); held-out: the evaluations' 0.042 / sqrt 3
    assert (
        "| ARRoL, anchored (default) | mean of 3 | +0.030 ± 0.006 | +0.0150 ± 0.0029 | -0.030 ± 0.006 | +0.030 ± "
        "0.024 |" in text
    )
    assert (
        "| Eq. 2 as written | mean of 3 | -0.020 ± 0.006 | -0.0100 ± 0.0029 | +0.020 ± 0.006 | -0.020 ± 0.024 |" in text
    )
    assert "| spread |" not in text  # an arm the sweep did not run


def test_over_the_seeds_each_difference_is_judged_on_its_t_interval_with_the_seeds_degrees_of_freedom(tmp_path: Path):
    lines, _ = section_online_balance(sweep(tmp_path))
    default = next(line for line in lines if line.startswith("- ARRoL, anchored (default) − random over 3 seed(s)"))
    # E[ρ̂]: +0.030 with SE 0.01/sqrt(3) on 2 df lies beyond t_{0.975, 2}·SE = 0.0248
    se = 0.01 / math.sqrt(3)
    assert f"E[ρ̂] ahead beyond its 95 % t interval (±{T975_2 * se:.3f}, 2 df)" in default
    assert f"zero-adv. groups behind beyond its 95 % t interval (±{T975_2 * se:.3f}, 2 df)" in default
    # E[ρ̂(1−ρ̂)]: +0.015 with SE 0.005/sqrt(3) = 0.0029, beyond ±0.0124
    half = se / 2
    assert f"E[ρ̂(1−ρ̂)] ahead beyond its 95 % t interval (±{T975_2 * half:.4f}, 2 df)" in default
    # held-out after: +0.030 with SE 0.0424/sqrt(3) = 0.0245 lies inside ±0.105: the detectable effect instead
    heldout = math.hypot(0.03, 0.03) / math.sqrt(3)
    assert (
        f"held-out after not distinguishable from 0 (95 % t interval ±{T975_2 * heldout:.3f}, 2 df); the "
        f"comparison could detect ±{(T975_2 + T80_2) * heldout:.3f} at 80 % power"
    ) in default
    assert f"±{T975_2 * heldout:.3f}" == "±0.105" and f"±{(T975_2 + T80_2) * heldout:.3f}" == "±0.131"


def test_a_difference_inside_its_interval_states_the_effect_it_could_have_detected(tmp_path: Path):
    # seed 1's default rule like random on every figure: differences 0.02, 0, 0.04 (sd 0.02, SE 0.0115 over seeds)
    sweep(tmp_path)
    shutil.rmtree(tmp_path / "online_balance" / "anchored-1")
    write_arm(tmp_path, "anchored", 1, 0.0)
    lines, claims = section_online_balance(tmp_path)
    default = next(line for line in lines if line.startswith("- ARRoL, anchored (default) − random"))
    se = 0.02 / math.sqrt(3)
    assert (
        f"E[ρ̂] not distinguishable from 0 (95 % t interval ±{T975_2 * se:.3f}, 2 df); the comparison could "
        f"detect ±{(T975_2 + T80_2) * se:.3f} at 80 % power"
    ) in default
    assert "tied" not in "\n".join(lines)
    judged = [c for c in claims if c.row == "balance_smollm2" and c.paper]
    assert len(judged) == 1 and judged[0].paper == "not distinguishable"
    assert "the comparison could detect" in judged[0].detail


def test_the_direction_sentence_compares_the_default_rule_with_the_papers_table_4(tmp_path: Path):
    up, _ = section_online_balance(sweep(tmp_path / "up"))
    sentence = next(line for line in up if line.startswith("The paper's Table 4"))
    assert sentence.startswith(
        "The paper's Table 4 has ARRoL raise E[ρ̂] over random pruning (Qwen-3-4B-Base 0.32 → "
        "0.40, LLama-3.2-1B-instruct 0.14 → 0.23) and E[ρ̂(1−ρ̂)] (0.21 → 0.23, 0.11 → 0.14). "
    )
    se = 0.01 / math.sqrt(3)
    assert sentence.endswith(
        f"Here, over 3 seed(s), the default rule minus random pruning: E[ρ̂] +0.030 ± 0.006, ahead "
        f"beyond its 95 % t interval (±{T975_2 * se:.3f}, 2 df): the paper's direction. "
        f"E[ρ̂(1−ρ̂)] +0.0150 ± 0.0029, ahead beyond its 95 % t interval "
        f"(±{T975_2 * se / 2:.4f}, 2 df): the paper's direction."
    )
    down, _ = section_online_balance(sweep(tmp_path / "down", sign=-1.0))
    sentence = next(line for line in down if line.startswith("The paper's Table 4"))
    assert "E[ρ̂] -0.030 ± 0.006, behind beyond its 95 % t interval" in sentence
    assert sentence.count(": against the paper's direction") == 2


def test_a_direction_inside_its_interval_is_not_stated_but_set_beside_the_detectable_effect(tmp_path: Path):
    """Differences inside their 95 % t intervals read as not distinguishable from 0, with the effect the seeds could
    have detected beside the paper's own differences, never as the paper's direction or its opposite."""
    sweep(tmp_path)
    shutil.rmtree(tmp_path / "online_balance" / "anchored-1")
    write_arm(tmp_path, "anchored", 1, -0.07)  # per seed +0.02, -0.07, +0.04: mean -0.003, far inside
    lines, _ = section_online_balance(tmp_path)
    sentence = next(line for line in lines if line.startswith("The paper's Table 4"))
    assert "opposite" not in sentence and "paper's direction" not in sentence
    se = statistics.stdev([0.02, -0.07, 0.04]) / math.sqrt(3)  # the seeds' spread: far above the steps' SE
    assert (
        f"E[ρ̂] -0.003 ± {se:.3f}, not distinguishable from 0 (95 % t interval ±{T975_2 * se:.3f}, 2 df); the "
        f"comparison could detect ±{(T975_2 + T80_2) * se:.3f} at 80 % power, where the paper's differences are "
        "+0.08 and +0.09."
    ) in sentence
    assert sentence.endswith("at 80 % power, where the paper's differences are +0.02 and +0.03.")


def test_a_kept_direction_sentence_is_worded_again_from_the_sections_own_figures(tmp_path: Path):
    """A section 10 kept from an earlier page words its direction sentence as the section does now, from the default
    rule's figures it records (its mean row and its standings), never from a typed sentence."""
    from results_page.online import restated_direction

    lines, _ = section_online_balance(sweep(tmp_path, sign=-1.0))
    at = next(i for i, line in enumerate(lines) if line.startswith("The paper's Table 4"))
    earlier = [
        *lines[:at],
        "The paper's Table 4 has ARRoL raise E[ρ̂] (…); here the default rule's E[ρ̂] − random's is "
        "-0.030 and its E[ρ̂(1−ρ̂)] − random's -0.0150 over 3 seed(s): the opposite of the paper's on both.",
        *lines[at + 1 :],
    ]
    assert restated_direction(earlier) == lines
    assert restated_direction(lines) == lines
    assert restated_direction(lines[:at]) == lines[:at]  # no sentence to word again


def test_the_headline_row_reads_the_default_rule_and_lists_the_others(tmp_path: Path):
    _, claims = section_online_balance(sweep(tmp_path))
    balance = [c for c in claims if c.row == "balance_smollm2"]
    assert [c.paper for c in balance] == ["reproduced", None]  # fewer zero-advantage groups, more balance: beyond
    assert balance[0].text.startswith(
        "Table 4 online on SmolLM2-135M (the default rule vs random pruning at κ = 0.5, "
        "3 seed(s)): E[ρ̂] +0.030 ± 0.006, E[ρ̂(1−ρ̂)] +0.0150 ± 0.0029"
    )
    assert balance[0].here == (
        "the default rule − random online: E[ρ̂(1−ρ̂)] +0.0150 ± 0.0029, zero-adv. groups -0.030 ± 0.006 (3 seeds)"
    )
    assert "(Eq. 2 as written vs random pruning" in balance[1].text and not balance[1].here
    heads = [c for c in claims if c.row == "head_smollm2"]
    assert [c.text.split("(")[1].split(")")[0] for c in heads] == [f"anchored arm, seed {s}" for s in range(3)]
    # the rule below random: not reproduced; the page's opening table carries the default rule's row
    page = build_page(sweep(tmp_path / "down", sign=-1.0), tmp_path / "page.md")
    row = next(line for line in page.splitlines() if line.startswith("| Pruned groups") and "SmolLM2" in line)
    section = anchor("## 10. Online balance on SmolLM2-135M: ARRoL's survival rules vs random pruning (paper Table 4)")
    assert (
        "| the default rule − random online: E[ρ̂(1−ρ̂)] -0.0150 ± 0.0029, zero-adv. groups +0.030 ± 0.006 "
        f"(3 seeds) | **not reproduced** ([§](#{section})) |"
    ) in row


def test_a_sweep_without_the_default_rule_is_judged_on_the_rule_it_ran(tmp_path: Path):
    lines, claims = section_online_balance(sweep(tmp_path, rules=("spread",)))
    text = "\n".join(lines)
    assert "| 0 | spread | `stats` |" in text and "ARRoL, anchored" not in text
    assert [c.text.split(" vs ")[0] for c in claims if c.row == "balance_smollm2"] == [
        "Table 4 online on SmolLM2-135M (the spread rule"
    ]
    assert "the default rule (`pruning=arrol`) has no run here beside random pruning" in text
    # a run that recorded no rule pruned by Eq. 2 as written, as every run did before the anchored default
    legacy = tmp_path / "legacy"
    write_arm(legacy, "random", 0, 0.0)
    write_arm(legacy, "anchored", 0, 0.02)
    summary_path = legacy / "online_balance" / "anchored-0" / "summary.json"
    summary = json.loads(summary_path.read_text())
    del summary["config"]["pruning"]["balance_target"]
    summary_path.write_text(json.dumps(summary))
    assert "| 0 | Eq. 2 as written |" in "\n".join(section_online_balance(legacy)[0])


def test_a_missing_sweep_says_how_to_run_it(tmp_path: Path):
    lines, claims = section_online_balance(tmp_path)
    assert claims == [] and lines[2].startswith("Not run (`online_balance/` needs a `pruning=random` job")
    assert "`python experiments/reproduce.py --only online_balance page`" in lines[2]
    write_arm(tmp_path, "random", 0, 0.0)  # random pruning alone compares nothing
    assert section_online_balance(tmp_path)[0][2].startswith("Not run")


def test_a_run_without_a_held_out_set_shows_n_a_not_a_bare_plus_minus():
    from results_page.online import with_se

    assert with_se(None, None) == "n/a" and with_se(0.25, 0.03) == "0.250 ± 0.030"
