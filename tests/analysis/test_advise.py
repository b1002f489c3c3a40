"""``arrol advise``: its configuration (the trainer's presets and checks, and ``advise.*``), the modelled saving,
the verdict from the probe's paired differences and the head's AUC interval, and the command end to end on the tiny
policy (slow)."""

import json
import math
import sys
from pathlib import Path

import pytest
import warm_python
import torch

from arrol_pl.analysis.advise.config import load_advise_config
from arrol_pl.analysis.advise.lengths import within_auc_interval
from arrol_pl.analysis.advise.savings import ratios, savings, training_step
from arrol_pl.analysis.advise.verdict import batches_to_detect, candidates, decide, judged, verdict_line
from arrol_pl.train.config.loader import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def compose_advise(*overrides: str):
    from arrol_pl.cli.hydra_app import compose

    return load_advise_config(compose("advise", overrides))


def test_the_advice_is_about_the_run_the_same_overrides_start():
    cfg = compose_advise("pruning.keep_ratio=0.75", "engine.detect_length=16", "algo.max_response_tokens=64")
    probe = cfg.probe("/some/policy")
    assert (probe.group_size, probe.keep_ratio, probe.detect_length, probe.max_tokens) == (8, 0.75, 16, 64)
    assert probe.keep_ratios == [0.75, 0.25, 0.5] and probe.default_rule == cfg.pruning.balance_target
    assert probe.compared_rules == [cfg.pruning.balance_target] and not probe.margin
    assert cfg.detect_lengths == [8, 16, 32]
    smollm2 = compose_advise("+exp=smollm2_setting")
    assert smollm2.probe("x").trainable_layers == 2 and smollm2.detect_lengths == [2, 4, 8]


@pytest.mark.parametrize(
    "override,message",
    [
        ("pruning.scorer=confidence", "pruning.scorer='confidence': arrol advise measures the quality head"),
        ("advise.batches=1", "advise.batches must be >= 2"),
        ("pruning.keep_ratio=0.3", "advise: keep_ratio=0.3 of group_size=8 gives κG=2.4"),
        ("advise.detect_lengths=[60]", "advise.detect_lengths=[60]: each below algo.max_response_tokens=48"),
        ("advise.nope=1", "advise.nope"),
    ],
)
def test_a_bad_value_is_named(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compose_advise(override)


def test_the_saving_brackets_a_gpu_between_steps_and_tokens_and_models_this_machine():
    lengths = torch.tensor([[40, 40, 40, 40]] * 4)
    pruned = torch.tensor([[False, False, True, True]] * 4)
    flat, flags = training_step(lengths, pruned, 6)  # groups cycled to fill the step's prompts
    assert len(flat) == 24 and flags[:4] == [False, False, True, True]
    # every rollout in a slot: the longest survivor sets the step count, only the tokens shrink
    r = ratios(flat, flags, 8, 64, True)
    assert r["steps"] == pytest.approx(1.0) and r["tokens"] == pytest.approx(80 / 48) and not r["detect_first"]
    assert r["trained"] == pytest.approx(2.0)
    # rollouts waiting for slots: pruning saves steps too
    assert ratios(flat, flags, 8, 4, True)["steps"] > 1.4
    s = savings(
        lengths,
        pruned,
        8,
        {"prompts": 4, "slots": 8, "detect_first": True},
        {"prompts": 64, "slots": 32},
        [0.01] * 20 + [0.02] * 20,
        [4] * 20 + [8] * 20,
    )
    assert s["machine"]["seconds"] > 1.0 and s["machine"]["step_cost"]["per_request"] == pytest.approx(0.0025)
    assert 1.0 < s["gpu"]["steps"] <= s["gpu"]["tokens"]


@pytest.mark.slow  # bootstrap intervals of 1600 rollouts: outside the quick tier
def test_the_within_auc_interval_covers_chance_for_a_head_that_cannot_rank_and_excludes_it_for_one_that_can():
    generator = torch.Generator().manual_seed(0)
    groups = torch.arange(200).repeat_interleave(8)
    correct = (torch.rand(1600, generator=generator) < 0.4).float()
    noise = torch.randn(1600, generator=generator)
    lo, hi = within_auc_interval(noise, correct, groups, seed=0)
    assert lo < 0.5 < hi and hi - lo < 0.1
    lo, hi = within_auc_interval(noise + 1.5 * correct, correct, groups, seed=0)
    assert lo > 0.75


def diff(mean: float, se: float, df: int = 15) -> dict:
    return {"cosine": {"mean": mean, "se": se, "n": df + 1, "df": df}}


def probe_result(vs_cost: dict[float, tuple[float, float]], oracle: float = 0.0) -> dict:
    """A probe's JSON cut to what the verdict reads: per κ the default rule's differences."""
    keys = {0.5: "", 0.25: "@0.25"}
    d = {"fresh_cost": {}, "random": {}, "fresh_count": {}}
    for kappa, (mean, se) in vs_cost.items():
        d["fresh_cost"][f"anchored/head{keys[kappa]}"] = diff(mean, se)
        d["fresh_cost"][f"anchored/oracle_1{keys[kappa]}"] = diff(oracle, se)
        d["random"][f"anchored/head{keys[kappa]}"] = diff(mean + 0.02, se)
        d["fresh_count"][f"anchored/head{keys[kappa]}"] = diff(mean + 0.03, se)
    return {
        "default_rule": "anchored",
        "differences": d,
        "costs": {"by_kappa": {"0.5": {"cost_matched": 5.6}, "0.25": {"cost_matched": 4.7}}},
    }


SAVING = {
    0.5: {"machine": {"seconds": 1.3, "steps": 1.2, "trained": 1.9}, "gpu": {"steps": 1.3, "tokens": 1.4}},
    0.25: {"machine": {"seconds": 1.6, "steps": 1.5, "trained": 3.5}, "gpu": {"steps": 1.5, "tokens": 1.7}},
}
RANKS = [{"detect_length": 12, "within_auc": 0.8, "within_interval": (0.76, 0.84), "auc": 0.85, "eligible_share": 1.0}]


def test_prune_at_the_kappa_that_saves_most_among_those_ahead_of_their_cost_matched_control():
    rows = candidates(probe_result({0.5: (0.05, 0.01), 0.25: (0.04, 0.01)}), [0.25, 0.5], 0.5, SAVING)
    decision = decide(rows, 0.5, 12, 16, RANKS)
    assert decision["verdict"] == "prune" and decision["keep_ratio"] == 0.25 and decision["rule"] == "anchored"
    assert verdict_line(decision).startswith("Prune: κ = 0.25, L_detect = 12, rule anchored; expected 1.60×")


def test_dont_when_the_run_kappa_trails_its_cost_matched_control_or_the_head_cannot_rank():
    rows = candidates(probe_result({0.5: (-0.05, 0.01), 0.25: (-0.01, 0.01)}), [0.25, 0.5], 0.5, SAVING)
    decision = decide(rows, 0.5, 12, 16, RANKS)
    assert decision["verdict"] == "dont" and decision["group_size"] == 6
    assert verdict_line(decision).startswith("Don't prune: train G = 6 rollouts per prompt without pruning")
    blind = [{**RANKS[0], "within_auc": 0.5, "within_interval": (0.47, 0.53)}]
    rows = candidates(probe_result({0.5: (-0.01, 0.05), 0.25: (-0.02, 0.05)}), [0.25, 0.5], 0.5, SAVING)
    decision = decide(rows, 0.5, 12, 16, blind)
    assert decision["verdict"] == "dont" and any("cannot rank" in why for why in decision["why"])
    # the gate's own threshold when the run sets one
    assert decide(rows, 0.5, 12, 16, blind, gate_auc=0.52)["verdict"] == "undecided"


def test_undecided_says_how_many_batches_would_decide_and_never_calls_a_null_a_negative():
    rows = candidates(probe_result({0.5: (-0.02, 0.03), 0.25: (0.01, 0.03)}), [0.25, 0.5], 0.5, SAVING)
    decision = decide(rows, 0.5, 12, 16, RANKS)
    assert decision["verdict"] == "undecided"
    j = rows[1]["vs_cost_matched"]
    assert j["standing"] == "undetected" and batches_to_detect(j, 16) == math.ceil(16 * (j["detectable"] / 0.02) ** 2)
    text = " ".join(decision["why"])
    assert "not detectable at ±" in text and "80 % power" in text and "does not" not in text
    # another length is suggested only where the head could pass the gate there
    better = [*RANKS, {**RANKS[0], "detect_length": 24, "within_auc": 0.9}]
    assert any("engine.detect_length=24" in why for why in decide(rows, 0.5, 12, 16, better)["why"])
    weak = [{**RANKS[0], "within_auc": 0.46}, {**RANKS[0], "detect_length": 24, "within_auc": 0.52}]
    assert not any("engine.detect_length" in why for why in decide(rows, 0.5, 12, 16, weak)["why"])


def test_several_kappas_are_judged_on_a_bonferroni_interval():
    one, two = judged(diff(0.05, 0.02)["cosine"], 1), judged(diff(0.05, 0.02)["cosine"], 2)
    assert one["margin"] < two["margin"] and one["detectable"] < two["detectable"]
    assert one["standing"] == "ahead" and two["standing"] == "ahead"
    assert judged(diff(0.05, 0.022)["cosine"], 3)["standing"] == "undetected"


@pytest.mark.slow
def test_the_command_advises_on_the_tiny_policy(tmp_path, tiny_model_dirs):
    (tmp_path / "coin_reward.py").write_text(
        "import zlib\n\n\ndef coin(prompt, completion, answer):\n"
        "    return float(zlib.crc32(completion.encode()) % 2)\n"
    )
    out = tmp_path / "advice"
    args = [
        sys.executable,
        str(ROOT / "experiments" / "advise.py"),
        "model=hf",
        f"model.path={tiny_model_dirs['policy']}",
        "reward.function=coin_reward:coin",
        "reward.workers=0",
        "algo.group_size=4",
        "algo.max_response_tokens=12",
        "engine.detect_length=4",
        "head.hidden_dim=16",
        "advise.head_prompts=8",
        "advise.batches=3",
        "advise.prompts_per_batch=2",
        "advise.reference_rollouts=4",
        "advise.keep_ratios=[0.75]",
        f"hydra.run.dir={out}",
    ]
    run = warm_python.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    advice = json.loads((out / "advice.json").read_text())
    assert advice["verdict"]["verdict"] in ("prune", "dont", "undecided")
    assert [a["detect_length"] for a in advice["detect_lengths"]] == [2, 4, 8]
    assert [c["keep_ratio"] for c in advice["candidates"]] == [0.5, 0.75]
    assert advice["settings"]["batches"] == 3 and (out / "grad_probe.json").is_file()
    text = (out / "advice.md").read_text()
    assert (
        text.startswith("# Will pruning pay?")
        and advice["verdict_line"] in text
        and advice["verdict_line"] in run.stdout
    )
    assert "| κ | rule | G' (cost-matched) |" in text


def test_a_bad_value_stops_the_command_in_one_line_before_any_model_loads(tmp_path, command_main):
    """Refused before Hydra starts the job: ``python -m arrol_pl``'s ``main`` in this process (``command_main`` in
    tests/conftest.py), on the arguments a user types."""
    run = command_main(tmp_path, "advise", "advise.batches=1", "advise.minutes=2")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["config error: advise.batches must be >= 2, got 1"]
    assert list(tmp_path.iterdir()) == []


def test_the_batches_generated_fit_half_the_minutes_left_at_the_head_prompts_rate():
    import time

    from arrol_pl.analysis.advise.run import budget_batches
    from arrol_pl.analysis.grad_probe.config import GradProbeConfig
    from arrol_pl.analysis.grad_probe.rollouts import Rollouts

    # 100 rollouts of 10 tokens in 10 s: 100 tokens/s; a batch of 8 prompts × 32 rollouts × 10 tokens takes 25.6 s
    fitting = Rollouts(
        [[1]] * 100,
        [[1] * 10] * 100,
        torch.zeros(100, 1),
        torch.ones(100, dtype=torch.bool),
        torch.zeros(100),
        torch.zeros(100),
        torch.zeros(100),
        10.0,
    )
    cfg = GradProbeConfig(policy="x", batches=16, prompts_per_batch=8)
    assert budget_batches(fitting, time.perf_counter() + 256, 32, cfg) == 4  # half of 256 s over 25.6 s each
    assert budget_batches(fitting, time.perf_counter() + 10, 32, cfg) == 2  # never fewer than 2
    assert budget_batches(fitting, time.perf_counter() + 10_000, 32, cfg) == 16  # never more than asked
