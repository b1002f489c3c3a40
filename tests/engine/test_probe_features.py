"""The offline probe reads the feature the engine prunes on (arrol_pl/analysis/head_probe/features.py vs
arrol_pl/engine).

One batched transformers forward (right-padded micro-batches) gives every detection length; at each L it
must equal the engine's ``Rollout.feature`` for rollouts that ran past L and for those that ended before.
"""

from __future__ import annotations

import pytest
import torch

from arrol_pl.analysis.head_probe.features import detect_features, eligible_at

pytestmark = pytest.mark.engine

PROMPTS = ["Question: What is 12 + 35? Answer:", "Compute (3 * 4) - 5.", "The quick brown fox"]


def test_probe_features_equal_the_engines_at_every_detect_length(engine, hf_policy):
    # stop on a third of the vocabulary so some rollouts end before L and lengths vary
    stop_ids = list(range(2, len(engine.tokenizer), 3))
    sampling = {"max_tokens": 10, "temperature": 1.0, "seed": 11, "stop_token_ids": stop_ids}
    by_length = {length: engine.generate(PROMPTS, 3, sampling, detect_length=length).rollouts for length in (1, 2, 5)}
    reference = by_length[5]
    responses = [r.response_token_ids for r in reference]
    assert len({len(t) for t in responses}) > 1, "test needs rollouts of different lengths"
    assert any(len(t) <= 2 for t in responses) and any(len(t) > 5 for t in responses)
    features = detect_features(
        hf_policy, [r.prompt_token_ids for r in reference], responses, [1, 2, 5], pad_id=0, batch_tokens=40
    )
    lengths = torch.tensor([len(t) for t in responses])
    for length, rollouts in by_length.items():
        # same seeds, no pruner: the same tokens whatever L the engine scores at
        assert [r.response_token_ids for r in rollouts] == responses
        engine_features = torch.stack([r.feature for r in rollouts])
        torch.testing.assert_close(features[length], engine_features, atol=1e-4, rtol=0)
        assert eligible_at(lengths, length).tolist() == [r.eligible for r in rollouts]
