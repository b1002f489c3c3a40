"""Detect-first scheduling (``engine.detect_first``): every rollout runs to L_detect, then only the survivors go
on as second requests. Same rollouts as one request per rollout, fewer engine steps when the rollouts outnumber the
slots."""

from __future__ import annotations

import pytest
import torch

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.screening import GroupScreen

pytestmark = pytest.mark.engine

PROMPTS = [f"{a} + {a + 3} * 2 =" for a in range(6)]


def both(engine, prompts, group_size, sampling, detect, pruner, **kw):
    one = engine.generate(prompts, group_size, sampling, detect, pruner, detect_first=False, **kw)
    two = engine.generate(prompts, group_size, sampling, detect, pruner, detect_first=True, **kw)
    return one, two


def test_greedy_rollouts_are_the_same_either_way(engine):
    """Greedy decoding makes the tokens a function of the prefix alone: both schedules give the same tokens, texts,
    features, scores, decisions and sampled log-probs; the survivors' continuations are exact."""
    pruner = PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=1, seed=5)
    one, two = both(engine, PROMPTS, 4, dict(max_tokens=20, temperature=0.0), 6, pruner, logprobs_topk=0)
    assert any(r.pruned for r in one.rollouts) and not all(r.pruned for r in one.rollouts)
    for a, b in zip(one.rollouts, two.rollouts):
        assert (a.pruned, a.finish_reason, a.response_token_ids, a.text) == (
            b.pruned,
            b.finish_reason,
            b.response_token_ids,
            b.text,
        )
        assert a.generated_tokens == b.generated_tokens and a.eligible == b.eligible
        assert torch.allclose(a.feature, b.feature, atol=1e-5) and a.score == pytest.approx(b.score, abs=1e-5)
        assert len(b.sampled_logprobs) == len(b.response_token_ids)
        assert torch.allclose(a.sampled_logprobs, b.sampled_logprobs, atol=1e-4)
    assert one.generated_tokens == two.generated_tokens
    assert not engine.llm.has_unfinished_requests()


def test_survivors_continue_from_their_first_part(engine):
    """Sampled decoding: pruned rollouts stop at L_detect, survivors reach max_tokens, and a survivor's text is its
    first part's text followed by the continuation's (nothing held back, nothing repeated)."""
    detect, max_tokens = 5, 24
    pruner = PrunerParams(policy="random", keep_ratio=0.25, min_keep_per_group=1, seed=3)
    result = engine.generate(
        PROMPTS,
        8,
        dict(max_tokens=max_tokens, temperature=1.0, ignore_eos=True),
        detect,
        pruner,
        logprobs_topk=0,
        detect_first=True,
    )
    kept = [r for r in result.rollouts if not r.pruned]
    assert kept and len(kept) < len(result.rollouts)
    for r in result.rollouts:
        assert r.eligible and r.feature is not None
        assert len(r.response_token_ids) == (detect if r.pruned else max_tokens) == r.generated_tokens
        assert len(r.sampled_logprobs) == len(r.response_token_ids)
    for r in kept:  # the first part's whole text, then the continuation's
        first = engine.tokenizer.decode(r.response_token_ids[:detect], skip_special_tokens=True)
        assert r.text.startswith(first) and len(r.text) > len(first)
    assert result.generated_tokens == sum(len(r.response_token_ids) for r in result.rollouts)


def test_fewer_engine_steps_when_rollouts_outnumber_the_slots(engine):
    """More rollouts than the engine's slots (``max_num_seqs``): with one request per rollout the survivors hold
    slots while later groups wait to reach L_detect; detect-first decides every group first."""
    slots = engine.llm.vllm_config.scheduler_config.max_num_seqs
    prompts = [f"{a} - {a % 7} =" for a in range(3 * slots // 8)]  # 3 × slots rollouts in groups of 8
    sampling = dict(max_tokens=12, temperature=1.0, ignore_eos=True)
    pruner = PrunerParams(policy="random", keep_ratio=0.25, min_keep_per_group=1, seed=1)
    one, two = both(engine, prompts, 8, sampling, 2, pruner)
    assert len(one.rollouts) == 3 * slots
    assert [r.pruned for r in one.rollouts] == [r.pruned for r in two.rollouts], "random decisions need no score"
    assert sum(len(r.response_token_ids) for r in one.rollouts) == sum(len(r.response_token_ids) for r in two.rollouts)
    # one request per rollout: each wave's survivors hold their slots, so later groups reach L_detect late (20 engine
    # steps); detect-first: three short waves of 2 tokens over every rollout (6), then the survivors, who fit in
    # the slots at once (10)
    assert two.steps <= 0.8 * one.steps, (one.steps, two.steps)


def test_audited_groups_run_on_and_dropped_groups_stop(engine):
    """The group screen under detect-first: the dropped group stops at L_detect, the audited one and the shadow
    one run to the end, the kept ones are continued."""
    detect, max_tokens, size = 3, 12, 4
    screen = GroupScreen(keep=2, seed=5, audited=frozenset({1}), shadow=frozenset({3}))
    result = engine.generate(
        PROMPTS[:4],
        size,
        dict(max_tokens=max_tokens, temperature=1.0, ignore_eos=True),
        detect,
        PrunerParams(policy="none", keep_ratio=1.0, seed=2, active=True),
        screen=screen,
        detect_first=True,
    )
    groups = [result.rollouts[k * size : (k + 1) * size] for k in range(4)]
    for k, group in enumerate(groups):
        for r in group:
            ran_on = not r.screened or r.audited
            assert r.generated_tokens == (max_tokens if ran_on else detect)
    assert sum(groups[k][0].screened for k in range(3)) == 1


def test_sampling_that_reads_the_text_so_far_keeps_one_request():
    from arrol_pl.engine import adapter

    assert adapter.continuable(adapter.sampling_params(dict(max_tokens=8, stop=["\n"])))
    for bad in (dict(stop=["\n\n"]), dict(presence_penalty=0.5), dict(repetition_penalty=1.1), dict(min_tokens=2)):
        assert not adapter.continuable(adapter.sampling_params(dict(max_tokens=8, **bad))), bad


def test_by_default_it_runs_only_when_rollouts_wait_for_slots(engine, monkeypatch):
    """``engine.detect_first`` (on) splits rollouts only when they outnumber the slots: with a slot for each, no
    rollout waits for one, and each rollout stays one request."""
    from arrol_pl.engine import adapter

    requests = []
    add = adapter.add_request
    monkeypatch.setattr(adapter, "add_request", lambda *a: requests.append(a[1]) or add(*a))
    sampling = dict(max_tokens=10, temperature=1.0, ignore_eos=True)
    pruner = PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=1, seed=2)
    auto = engine.generate(PROMPTS, 4, sampling, 3, pruner)
    assert len(auto.rollouts) < engine.config.max_num_seqs and any(r.pruned for r in auto.rollouts)
    assert len(requests) == len(auto.rollouts), "one request per rollout"
    requests.clear()
    split = engine.generate(PROMPTS, 4, sampling, 3, pruner, detect_first=True)
    assert len(requests) == len(split.rollouts) + sum(not r.pruned for r in split.rollouts)


def test_the_default_runs_the_schedule_its_measured_step_cost_models_faster(engine):
    """``engine.detect_first`` null: one pass with a slot for every rollout; otherwise the schedule the engine's step
    cost (fitted once, on its first generation long enough) models faster; its figures in ``scheduling.plan``."""
    from arrol_pl.core.decode_cost import StepCost

    pruner = PrunerParams(policy="random", keep_ratio=0.25, min_keep_per_group=1, seed=5)
    sampling = dict(max_tokens=24, temperature=0.0)
    engine.generate(PROMPTS[:2], 2, sampling)
    plans = engine.scheduling
    assert plans.block == 32, "vLLM's KV blocks: the CPU default (engine.block_size null), read back from vLLM"
    assert plans.step_cost is not None and plans.step_cost.fixed >= 0 and plans.step_cost.per_request >= 0
    setting, slots, fitted = plans.setting, plans.slots, plans.step_cost
    try:
        plans.setting, plans.slots = None, 64
        assert not engine.generate(PROMPTS, 4, sampling, 4, pruner).detect_first and plans.plan is None
        plans.slots = 8  # 24 rollouts, 8 slots
        plans.step_cost = StepCost(fixed=1.0, per_request=0.0)  # a step costs the same whatever it computes
        step_bound = engine.generate(PROMPTS, 4, sampling, 4, pruner)
        assert step_bound.detect_first and plans.plan.detect_first < plans.plan.one_pass
        plans.step_cost = StepCost(fixed=0.0, per_request=1.0)  # only tokens count: computing prompts again loses
        compute_bound = engine.generate(PROMPTS, 4, sampling, 4, pruner)
        assert not compute_bound.detect_first and plans.plan.detect_first > plans.plan.one_pass
        plans.setting = True  # set: as set
        assert engine.generate(PROMPTS, 4, sampling, 4, pruner).detect_first and plans.plan is None
        for a, b in zip(step_bound.rollouts, compute_bound.rollouts):  # greedy: the same rollouts either way
            assert (a.pruned, a.response_token_ids) == (b.pruned, b.response_token_ids)
    finally:
        plans.setting, plans.slots, plans.step_cost = setting, slots, fitted
