"""The engine's per-token sampling log-probs against the trainer's on the same tokens (the mismatch the
trainer reports every step)."""

from __future__ import annotations

import pytest

from arrol_pl.train.policy.logprobs import score_rows
from arrol_pl.train.policy.update import logprob_mismatch
from arrol_pl.train.step.survivors import collect_survivors

pytestmark = pytest.mark.engine


def test_sampled_token_log_probs_match_the_trainer(engine, hf_policy):
    result = engine.generate(
        ["Compute 3 + 5 - 2.", "The quick brown fox"],
        4,
        dict(max_tokens=10, temperature=1.0, seed=3),
        detect_length=3,
        logprobs_topk=0,
    )
    surv = collect_survivors(result.rollouts, ["6", "x"])
    assert surv.rollout_log_probs is not None
    assert [len(x) for x in surv.rollout_log_probs] == [len(r) for r in surv.response_ids]
    trainer = score_rows(hf_policy, surv.prompt_ids, surv.response_ids, 4096, pad_id=0)
    diff = logprob_mismatch(trainer, surv.rollout_log_probs)
    assert diff["engine_logprob_diff_max"] < 1e-4  # float32 engine and trainer: the same distribution
    assert all(float(x.max()) <= 0.0 for x in surv.rollout_log_probs)


def test_processed_log_probs_are_computed_only_on_the_steps_that_return_them(engine, hf_policy):
    """A training engine (``logprobs_mode=processed_logprobs``): a step whose batch asks for no log-prob samples with
    the sampler vLLM builds for raw log-probs, the same tokens on CPU; one that asks gets the temperature-scaled
    log-probs the trainer compares with."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    from arrol_pl.engine import adapter

    assert engine.sampler_paths is None  # the session engine returns raw log-probs: one sampler serves them
    sampler = adapter.model_runner(engine.llm).sampler
    mode, built = sampler.logprobs_mode, sampler.topk_topp_sampler
    sampler.logprobs_mode = "processed_logprobs"
    sampler.topk_topp_sampler = TopKTopPSampler("processed_logprobs")
    paths = adapter.LogprobsOnDemand(sampler)
    try:
        prompts, sampling = ["Compute 3 + 5 - 2.", "The quick brown fox"], dict(max_tokens=6, temperature=0.7)
        engine.seed_sampling(11)
        plain = engine.generate(prompts, 2, sampling)
        assert paths.used["processed"] == 0 and paths.used["plain"] >= 6
        engine.seed_sampling(11)
        scored = engine.generate(prompts, 2, sampling, logprobs_topk=0)
        assert paths.used["processed"] >= 6
        assert [r.response_token_ids for r in scored.rollouts] == [r.response_token_ids for r in plain.rollouts]
        surv = collect_survivors(scored.rollouts, ["6", "x"])
        trainer = score_rows(hf_policy, surv.prompt_ids, surv.response_ids, 4096, pad_id=0, temperature=0.7)
        assert logprob_mismatch(trainer, surv.rollout_log_probs)["engine_logprob_diff_max"] < 1e-4
    finally:
        paths.uninstall()
        sampler.logprobs_mode, sampler.topk_topp_sampler = mode, built
