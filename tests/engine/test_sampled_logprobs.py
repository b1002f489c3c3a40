"""The engine's per-token sampling log-probs against the trainer's on the same tokens (the mismatch the
trainer reports every step)."""

from __future__ import annotations

import pytest

from arrol_pl.train.policy.logprobs import score_rows
from arrol_pl.train.step.phases import collect_survivors, logprob_mismatch

pytestmark = pytest.mark.engine


def test_sampled_token_log_probs_match_the_trainer(engine, hf_policy):
    result = engine.generate(["Compute 3 + 5 - 2.", "The quick brown fox"], 4,
                             dict(max_tokens=10, temperature=1.0, seed=3), detect_length=3, logprobs_topk=0)
    surv = collect_survivors(result.rollouts, ["6", "x"])
    assert surv.rollout_log_probs is not None
    assert [len(x) for x in surv.rollout_log_probs] == [len(r) for r in surv.response_ids]
    trainer = score_rows(hf_policy, surv.prompt_ids, surv.response_ids, 4096, pad_id=0)
    diff = logprob_mismatch(trainer, surv.rollout_log_probs)
    assert diff["engine_logprob_diff_max"] < 1e-4  # float32 engine and trainer: the same distribution
    assert all(float(x.max()) <= 0.0 for x in surv.rollout_log_probs)
