"""The gradient probe (arrol_pl.analysis.grad_probe): its measures on hand-built cases, the subsets' parts, the
survival rules on a constructed group, the gradients against training's own loss on a tiny real policy, and the whole
command on that policy with the real engine (the results page renders its JSON in
tests/experiments/test_results_grad_probe.py)."""

import json
import math
import sys
from pathlib import Path

import pytest
import warm_python
import torch

from arrol_pl.analysis.grad_probe.config import load_grad_probe_config
from arrol_pl.analysis.grad_probe.gradients import after_step, prompt_log_probs, subset_gradient
from arrol_pl.analysis.grad_probe.measures import cosine, likelihood_margin, paired_difference
from arrol_pl.analysis.grad_probe.config import GradProbeConfig
from arrol_pl.analysis.grad_probe.choice import choose_subsets
from arrol_pl.analysis.grad_probe.subsets import (
    Parts,
    balance,
    compared_rules,
    cost_matched_size,
    decoded_tokens,
    first_of,
    fresh_counts,
    is_control,
    pruner_params,
    subset_rows,
    survivors,
)
from arrol_pl.analysis.head_probe.fit import fit_calibrator
from arrol_pl.core.advantages import grpo_advantages
from arrol_pl.core.losses import ppo_clip_loss
from arrol_pl.core.pruning import BALANCE_TARGETS
from arrol_pl.core.scorers import oracle_scores
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.policy.logprobs import make_micro_batches, response_log_probs

ROOT = Path(__file__).resolve().parents[2]
PROBE_FIXTURE = ROOT / "tests" / "fixtures" / "grad_probe.json"
"""A real run's JSON that the results page's test renders (tests/experiments/test_results_grad_probe.py)."""
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
RESPONSES = [[20, 21, 22], [23, 24, 25, 26, 27], [28], [30, 31, 32, 33], [34, 35], [36, 37, 38]]
GROUPS = [0, 0, 0, 1, 1, 1]


@pytest.fixture(scope="module")
def policy(tiny_model_dirs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dirs["policy"], dtype=torch.float32).eval()


def gradient(policy, rows, rewards):
    params = list(policy.parameters())
    return subset_gradient(
        policy,
        params,
        [PROMPTS[GROUPS[i]] for i in rows],
        [RESPONSES[i] for i in rows],
        torch.tensor([rewards[i] for i in rows]),
        [GROUPS[i] for i in rows],
        0.8,
        "seq-mean-token-mean",
        16,
    )


def test_cosine_of_a_vector_with_itself_is_one_and_a_zero_vector_aligns_with_nothing():
    v = torch.randn(100)
    assert cosine(v, v) == pytest.approx(1.0) and cosine(v, -2 * v) == pytest.approx(-1.0)
    assert cosine(v, torch.zeros(100)) == 0.0


def test_identical_subsets_and_a_subset_equal_to_the_reference_set_give_cosine_one(policy):
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    reference = gradient(policy, range(6), rewards)
    assert reference.norm() > 0
    assert cosine(gradient(policy, [0, 1, 2], rewards), gradient(policy, [0, 1, 2], rewards)) == pytest.approx(1.0)
    # the same rollouts listed in another order are the same subset
    assert cosine(gradient(policy, [5, 3, 4, 2, 0, 1], rewards), reference) == pytest.approx(1.0, abs=1e-6)


def test_the_gradient_is_trainings_loss_gradient_at_ratio_one(policy):
    """One mini-batch of training's log-probs and PPO loss (π_old = π_θ) against the probe's prompt-shared forward
    that skips the zero-advantage rollouts."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # the second group has one outcome: zero advantage
    params = list(policy.parameters())
    prompts = [PROMPTS[g] for g in GROUPS]
    batch = make_micro_batches(prompts, RESPONSES, 10**6, 0)[0]
    lp = response_log_probs(policy, batch, 0.8)
    adv = grpo_advantages(rewards, torch.tensor(GROUPS))[batch.indices]
    loss = ppo_clip_loss(lp, lp.detach(), adv, batch.response_mask.float()).loss
    expected = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
    got = gradient(policy, range(6), rewards.tolist())
    assert torch.allclose(got, expected, atol=1e-6 * float(expected.abs().max()))


def test_prompt_shared_log_probs_are_trainings(policy):
    prompts = [PROMPTS[g] for g in GROUPS]
    batch = make_micro_batches(prompts, RESPONSES, 10**6, 0)[0]
    with torch.no_grad():
        expected = response_log_probs(policy, batch, 0.7)[torch.argsort(torch.tensor(batch.indices))]
        for g, prompt in enumerate(PROMPTS):
            rows = [i for i in range(6) if GROUPS[i] == g]
            got = prompt_log_probs(policy, prompt, [RESPONSES[i] for i in rows], 0.7)
            assert torch.allclose(got, expected[rows, : got.shape[1]], atol=1e-5)


def test_a_step_is_measured_and_undone(policy):
    params = list(policy.parameters())
    before = [p.detach().clone() for p in params]
    grad = torch.randn(sum(p.numel() for p in params))
    moved = after_step(
        params, grad, lambda ps: torch.optim.SGD(ps, lr=0.5), lambda: float(params[0].detach().flatten()[0])
    )
    assert moved == pytest.approx(float(before[0].flatten()[0] - 0.5 * grad[0]), abs=1e-6)
    assert all(torch.equal(p, b) and p.grad is None for p, b in zip(params, before))


def test_likelihood_margin_hand_built():
    # problem 0: right answers at -1 and -2 (mean -1.5), a wrong one at -3: gap 1.5; problem 1: gap -0.5;
    # problem 2 has one outcome and does not count
    logps = torch.tensor([-1.0, -2.0, -3.0, -2.5, -2.0, -1.0, -1.0])
    correct = torch.tensor([1, 1, 0, 1, 0, 1, 1])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    assert likelihood_margin(logps, correct, groups) == pytest.approx((1.5 - 0.5) / 2)
    assert math.isnan(likelihood_margin(logps[5:], correct[5:], groups[5:]))


def test_paired_differences_by_batch():
    d = paired_difference([1.0, 2.0, 4.0], [0.0, 1.0, 1.0])
    assert d["mean"] == pytest.approx(5 / 3) and d["df"] == 2
    assert d["se"] == pytest.approx(2 / 3)  # the differences 1, 1, 3: sd √(4/3), over √3
    # a batch where the measure is undefined (a zero reference gradient's cosine) is left out of the pair
    d = paired_difference([1.0, math.nan, 4.0], [0.0, 1.0, 1.0])
    assert (d["mean"], d["n"], d["df"]) == (pytest.approx(2.0), 2, 1)


def test_the_parts_are_disjoint_and_cover_every_rollout():
    parts = Parts.of(8, 32, "fresh")
    assert parts == Parts(8, 8, 32) and parts.controls == parts.fresh
    prompts = [3, 4]
    rows = {
        name: set(subset_rows(parts, prompts, part, torch.ones(2, part.stop - part.start, dtype=torch.bool)))
        for name, part in (("group", parts.group), ("fresh", parts.fresh), ("reference", parts.reference))
    }
    assert (len(rows["group"]), len(rows["fresh"]), len(rows["reference"])) == (16, 16, 64)
    assert not rows["group"] & rows["fresh"] and not rows["group"] & rows["reference"]
    assert not rows["fresh"] & rows["reference"]
    assert set.union(*rows.values()) == set(range(3 * 48, 5 * 48))
    keep = torch.tensor([[True, False, True, False, False, False, False, True]] * 2)
    assert subset_rows(parts, prompts, parts.group, keep) == [144, 146, 151, 192, 194, 199]


def test_shared_controls_read_the_group_and_sample_no_more():
    parts = Parts.of(8, 32)
    assert (parts.fresh_size, parts.samples, parts.controls) == (0, 40, parts.group)
    assert subset_rows(parts, [1], parts.controls, first_of(torch.tensor([3]), 8)) == [40, 41, 42]
    assert is_control("fresh_cost") and is_control("fresh_count@0.25") and not is_control("anchored/head@0.25")


def _chosen_on_coin_groups(controls: str, prompts: int = 3000):
    """The subsets of ``prompts`` groups of 8 whose rollouts are right with the prompt's own pass rate (and, with
    fresh controls, 8 more of the same), chosen by the default rule reading a perfect oracle."""
    gen = torch.Generator().manual_seed(3)
    cfg = GradProbeConfig(
        policy="tiny", oracle_aucs=[1.0], paper_rule=False, controls=controls, detect_length=4, max_tokens=32
    )
    parts = cfg.parts
    rate = torch.rand(prompts, 1, generator=gen)
    correct = (torch.rand(prompts, parts.samples, generator=gen) < rate).float()
    pool = (torch.rand(4096, generator=gen) < 0.5).float()
    noise = torch.Generator().manual_seed(4)
    calibrator = fit_calibrator(oracle_scores(pool, 1.0, noise), pool, 64)
    group = correct[:, parts.group]
    scorers = {"head": (calibrator, oracle_scores(group.flatten(), 1.0, noise).view(group.shape))}
    lengths = torch.full(group.shape, 32)
    chosen = choose_subsets(cfg, parts, scorers, torch.ones(group.shape, dtype=torch.bool), lengths, cfg.compared_rules)
    return chosen, correct


def _positive_share(part_keep, correct):
    part, keep = part_keep
    sub = correct[:, part]
    return (sub * keep).sum(1) / keep.sum(1)


@pytest.mark.slow  # thousands of simulated probe batches (about 6 s): outside the quick tier
def test_a_shared_control_measures_what_a_fresh_one_does_with_less_noise_in_the_difference():
    """Rollouts sampled alike are exchangeable: the first G' of a group are distributed as G' of the control's
    own, so its mean measure is the fresh control's; paired with the rule on the same draws, the per-prompt
    difference to the rule varies less."""
    shared, correct_s = _chosen_on_coin_groups("shared")
    fresh, correct_f = _chosen_on_coin_groups("fresh")
    # G' is measured on the rule's decisions, whatever part the controls read (the draws differ: 8 + 8 per prompt)
    assert shared.cost_matched[0.5] == pytest.approx(fresh.cost_matched[0.5], rel=0.01)
    rule = compared_rules()[0] + "/head"
    spreads = {}
    for name, chosen, correct in (("shared", shared, correct_s), ("fresh", fresh, correct_f)):
        control = _positive_share(chosen.subsets["fresh_cost"], correct)
        group = correct[:, chosen.subsets["all"][0]].mean(1)
        # the control's positive share is unbiased for the prompt's own pass rate, as the whole group's is
        assert float((control - group).mean()) == pytest.approx(0.0, abs=0.015), name
        spreads[name] = float((_positive_share(chosen.subsets[rule], correct) - control).std())
    assert spreads["shared"] < 0.8 * spreads["fresh"]


def test_the_cost_matched_control_decodes_what_pruning_decodes():
    lengths = torch.tensor([[40, 40, 40, 40], [10, 30, 50, 70]])
    eligible = lengths > 8
    keep = torch.tensor([[True, True, False, False], [True, False, True, False]])
    # survivors whole, pruned rollouts up to L_detect = 8: 40 + 40 + 8 + 8 and 10 + 8 + 50 + 8
    assert decoded_tokens(lengths, keep, eligible, 8).tolist() == [96.0, 76.0]
    # the mean length is 40: G' = 86 / 40, between κG = 2 and G = 4
    assert cost_matched_size(lengths, keep, eligible, 8) == pytest.approx(86 / 40)
    # a rollout that finished before L_detect costs its own length, pruned or not
    short = torch.tensor([[4, 40]])
    assert decoded_tokens(short, torch.tensor([[False, True]]), short > 8, 8).tolist() == [44.0]


def test_fresh_counts_meet_a_fractional_size_on_average():
    counts = fresh_counts(4000, 5.3, seed=0)
    assert set(counts.tolist()) == {5, 6} and counts.double().mean() == pytest.approx(5.3, abs=0.03)
    assert torch.equal(counts, fresh_counts(4000, 5.3, seed=0))
    assert first_of(torch.tensor([1, 3]), 4).tolist() == [[True, False, False, False], [True, True, True, False]]


def test_the_default_rule_reading_a_perfect_oracle_keeps_more_balanced_groups_than_random():
    """Groups of 8 with 6 right answers: random pruning keeps about that share; the default rule (whatever it is
    now), reading an oracle of AUC 1.0, keeps groups nearer half right."""
    assert compared_rules()[-1] == "global" and set(compared_rules()) <= set(BALANCE_TARGETS)
    noise = torch.Generator().manual_seed(0)
    pool = (torch.rand(2048, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    calibrator = fit_calibrator(oracle_scores(pool, 1.0, noise), pool, 64)
    correct = torch.tensor([[1.0] * 6 + [0.0] * 2] * 64)
    scores = oracle_scores(correct.flatten(), 1.0, noise).view(64, 8)
    eligible = torch.ones(64, 8, dtype=torch.bool)
    prompts = list(range(64))
    random = survivors(pruner_params("random", calibrator, 0.5, 0), scores, eligible, prompts)
    rule = survivors(pruner_params("arrol", calibrator, 0.5, 0, compared_rules()[0]), scores, eligible, prompts)
    by_random, by_rule = balance(random, correct, 8), balance(rule, correct, 8)
    assert by_random["positive_ratio"] == pytest.approx(0.75, abs=0.08)
    assert abs(by_rule["positive_ratio"] - 0.5) < abs(by_random["positive_ratio"] - 0.5) - 0.1
    assert by_rule["zero_advantage"] <= by_random["zero_advantage"]
    assert 0.3 < by_rule["kept_share"] < 0.7


def compose_probe(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return load_grad_probe_config(compose("grad_probe", overrides=list(overrides)))


def test_the_preset_takes_the_trainers_defaults():
    cfg = compose_probe("policy=tiny")
    assert (cfg.group_size, cfg.count_matched_size(cfg.keep_ratio), cfg.detect_length, cfg.max_tokens) == (8, 4, 12, 48)
    assert cfg.reward.function == "math_verify" and cfg.data.num_heldout == 32
    assert cfg.loss_agg_mode == "seq-mean-token-mean" and cfg.rules == []


@pytest.mark.parametrize(
    "override,message",
    [
        ("keep_ratio=0.3", "keep_ratio=0.3 of group_size=8 gives κG=2.4"),
        ("rules=[group,nope]", "rules=['group', 'nope']: choose among"),
        ("oracle_aucs=[0.4]", "oracle_aucs=[0.4]: distinct AUCs in [0.5, 1]"),
        ("controls=both", "controls='both'; choose one of ['shared', 'fresh']"),
        ("detect_length=48", "detect_length must be >= 1 and < max_tokens=48"),
        ("policy=/nonexistent", "policy='/nonexistent': not a transformers model directory"),
    ],
)
def test_a_bad_value_is_named(override, message):
    args = [override] if override.startswith("policy=") else ["policy=tiny", override]
    with pytest.raises(ConfigError) as err:
        compose_probe(*args)
    assert message in str(err.value)


REWARD = '''import zlib


def coin(prompt, completion, answer):
    """Right for half the texts, whatever they say: a random policy's groups come out mixed."""
    return float(zlib.crc32(completion.encode()) % 2)
'''


@pytest.mark.slow
def test_the_command_writes_every_subsets_measures(tmp_path, tiny_model_dirs):
    (tmp_path / "coin_reward.py").write_text(REWARD)
    out = tmp_path / "probe"
    args = [
        sys.executable,
        str(ROOT / "experiments" / "grad_probe.py"),
        f"policy={tiny_model_dirs['policy']}",
        "reward.function=coin_reward:coin",
        "reward.workers=0",
        "group_size=4",
        "reference_rollouts=6",
        "batches=2",
        "prompts_per_batch=2",
        "head_prompts=8",
        "head.steps=20",
        "data.num_heldout=4",
        "heldout_samples=6",
        "max_tokens=12",
        "detect_length=4",
        "oracle_aucs=[0.9,1.0]",
        "extra_keep_ratios=[0.75]",
        f"hydra.run.dir={out}",
    ]
    run = warm_python.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((out / "grad_probe.json").read_text())
    rules = compared_rules()
    per_kappa = [
        "random",
        *(f"{r}/{s}" for r in rules for s in ("head", "oracle_0.9", "oracle_1")),
        "fresh_count",
        "fresh_cost",
    ]
    keys = ["all", *per_kappa, *(f"{k}@0.75" for k in per_kappa), "reference"]
    assert list(result["subsets"]) == keys and result["default_rule"] == rules[0]
    assert set(result["differences"]) == {"random", "fresh_count", "fresh_cost"}
    assert set(result["differences"]["random"]) == {k for k in keys if not k.startswith(("random", "fresh"))}
    for key, subset in result["subsets"].items():
        for measure in (
            "cosine",
            "margin_unit",
            "margin_adamw",
            "grad_norm",
            "cost",
            "kept_share",
            "positive_ratio",
            "zero_advantage",
        ):
            values = subset["per_batch"][measure]
            assert len(values) == 2 and all(isinstance(v, float) and math.isfinite(v) for v in values), (key, measure)
            assert math.isfinite(subset[measure]["mean"]), (key, measure)
    assert result["subsets"]["reference"]["per_batch"]["cosine"] == pytest.approx([1.0, 1.0])
    assert result["subsets"]["fresh_count"]["kept_share"]["mean"] == pytest.approx(0.5)
    assert result["subsets"]["fresh_count@0.75"]["kept_share"]["mean"] == pytest.approx(0.75)
    # the cost-matched control decodes what the default rule decodes, in expectation over its draws
    costs = result["costs"]["by_kappa"]
    assert 2 <= costs["0.5"]["cost_matched"] <= 4 and costs["0.5"]["count_matched"] == 2
    assert result["subsets"]["all"]["cost"]["mean"] == pytest.approx(4.0, rel=0.35)
    # a control decodes only its own rollouts: the count-matched κG = 2, the cost-matched about G'
    assert result["subsets"]["fresh_count"]["cost"]["mean"] == pytest.approx(2.0, rel=0.35)
    assert result["subsets"]["fresh_cost"]["cost"]["mean"] == pytest.approx(costs["0.5"]["cost_matched"], rel=0.35)
    assert math.isfinite(result["margin"]["base"]) and result["margin"]["problems"] >= 1
    assert "| subset | cosine to reference ± SE |" in run.stdout
    fixture = json.loads(PROBE_FIXTURE.read_text())
    assert key_paths(result) == key_paths(fixture), (
        f"the probe's JSON changed shape: rewrite {PROBE_FIXTURE} (the results page's test renders it) from this run"
    )


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key path of nested dicts (``subsets/all/cosine/mean``): a JSON's shape apart from its numbers."""
    if not isinstance(value, dict):
        return set()
    return {path for key, item in value.items() for path in {f"{prefix}{key}"} | key_paths(item, f"{prefix}{key}/")}
