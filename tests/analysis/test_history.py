"""Phase-decomposition arithmetic of experiments/bench_phases.py (arrol_pl.analysis.history)."""

import json
import math

import pytest

from arrol_pl.analysis import history


def step(gen, ref, update, opt=0.0, reward=0.01, head=0.01, sync=0.01, extra=0.0, tokens=1000, trained=900, keep=1.0):
    total = gen + ref + update + opt + reward + head + sync + extra
    return {
        "time/generation": gen,
        "time/ref_logprob": ref,
        "time/update": update,
        "time/optimizer": opt,
        "time/reward": reward,
        "time/head": head,
        "time/sync": sync,
        "time/step": total,
        "tokens/generated": tokens,
        "policy/trained_tokens": trained,
        "pruning/keep_ratio": keep,
        "reward/accuracy": 0.3,
    }


def test_medians_skip_warmup_and_sum_timers():
    rows = [step(100.0, 1, 1)] * 2 + [
        step(2.0, 0.5, 1.0, opt=0.25),
        step(4.0, 0.5, 1.0, opt=0.25),
        step(3.0, 0.5, 1.0, opt=0.25, extra=0.1),
    ]
    m = history.step_medians(rows, warmup=2)
    assert m["generation"] == 3.0  # the warm-up's 100 s steps are not counted
    assert m["update"] == pytest.approx(1.25)  # update + optimizer
    assert m["log-prob"] == 0.5 and m["steps"] == 3
    assert m["other"] == pytest.approx(0.1)  # the median step is the one with 0.1 s outside the timers
    with pytest.raises(ValueError, match="warmup=5"):
        history.step_medians(rows, warmup=5)


def test_diagnose_names_the_phase_that_holds_back():
    base = history.step_medians([step(6.0, 1.0, 3.0, tokens=1000, trained=1000)], 0)
    fast = history.step_medians([step(3.0, 0.5, 1.5, tokens=500, trained=500, keep=0.5)], 0)
    d = history.diagnose(base, fast, goal=1.8)
    assert d["met"] and d["end_to_end"] == pytest.approx(base["step"] / fast["step"])
    assert d["generation_gap"] == pytest.approx(0.0)
    slow_gen = history.step_medians([step(5.0, 0.5, 1.5, tokens=500, trained=500, keep=0.5)], 0)
    d = history.diagnose(base, slow_gen, goal=1.8)
    assert not d["met"] and d["holding_back"] == "generation"
    assert d["holding_back_ratio"] == pytest.approx(6.0 / 5.0) and d["holding_back_limit"] == pytest.approx(2.0)
    assert d["generation_gap"] == pytest.approx(1.2 / 2.0 - 1)
    text = history.diagnosis_text(d, "ARRoL (κ=0.5)")
    assert "short" in text and "generation holds it back" in text
    met = history.diagnose(base, fast, goal=1.8)
    expected = f"ARRoL (κ=0.5): end to end {met['end_to_end']:.2f}× (goal 1.80×): met."
    assert history.diagnosis_text(met, "ARRoL (κ=0.5)") == expected


def test_table_and_json_history(tmp_path):
    base = history.step_medians([step(6.0, 1.0, 3.0)], 0)
    arm = history.step_medians([step(3.0, 0.5, 1.5, tokens=500, trained=450, keep=0.5)], 0)
    table = history.markdown_table([("GRPO", base), ("ARRoL", arm)], base)
    lines = table.splitlines()
    assert len(lines) == 4 and "(2.00×)" in lines[3] and "(2.00×)" not in lines[2]
    rows = [step(1.0, 0.1, 0.2), step(2.0, 0.1, 0.2)]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert history.read_history(tmp_path) == rows
    with pytest.raises(FileNotFoundError, match="history.jsonl"):
        history.read_history(tmp_path / "missing")


def test_ratios_of_a_zero_phase_are_nan():
    base = history.step_medians([step(6.0, 0.0, 3.0)], 0)
    r = history.ratios(base, base)
    assert math.isnan(r["log-prob"]) and r["step"] == 1.0


def test_log_prob_phase_sums_old_and_reference_log_probs():
    row = {**step(2.0, 0.5, 1.0), "time/old_logprob": 0.25}
    row["time/step"] += 0.25
    assert history.step_medians([row], 0)["log-prob"] == pytest.approx(0.75)


def test_phase_verdict_separates_fixed_cost_from_token_work():
    # update = 0.2 s fixed + 1 ms per trained token: 1000 tokens → 1.2 s; 500 → 0.7 s (1.71×, tokens 2×)
    base = history.step_medians([step(6.0, 1.0, 1.2, trained=1000)], 0)
    arm = history.step_medians([step(3.0, 0.5, 0.7, trained=500, keep=0.5)], 0)
    v = history.phase_verdict(base, arm, "update", 1.9)
    assert not v["met"] and v["ratio"] == pytest.approx(1.2 / 0.7) and v["limit"] == pytest.approx(2.0)
    assert v["fixed_seconds"] == pytest.approx(0.2)
    assert "0.200 s of its 0.700 s/step does not scale" in history.phase_verdict_text(v, "ARRoL")
    v = history.phase_verdict(base, arm, "log-prob", 1.9)  # 1.0 → 0.5 s: 2×, met
    assert v["met"] and history.phase_verdict_text(v, "ARRoL").endswith("met.")
    few = history.step_medians([step(3.0, 0.8, 0.7, trained=800, keep=0.5)], 0)
    assert "shrinks only 1.25×" in history.phase_verdict_text(
        history.phase_verdict(base, few, "log-prob", 1.9), "ARRoL"
    )


def test_curve_band_averages_seeds_on_a_common_grid_up_to_the_shortest_run():
    a = [(0.0, 0.2), (10.0, 0.4), (20.0, 0.6)]
    b = [(0.0, 0.2), (5.0, 0.2), (15.0, 0.4)]  # ends first: the grid stops at 15 s
    grid, mean, sd = history.curve_band([a, b], points=4)
    assert grid == [0.0, 5.0, 10.0, 15.0]
    # a at 5 s: halfway from 0.2 to 0.4 → 0.3; b at 10 s: halfway from 0.2 (5 s) to 0.4 (15 s) → 0.3
    assert mean == pytest.approx([0.2, 0.25, 0.35, 0.45])
    assert sd[0] == 0.0 and sd[1] == pytest.approx(0.1 / math.sqrt(2))
    assert history.curve_band([a], points=3)[2] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="no curve"):
        history.curve_band([[]])
