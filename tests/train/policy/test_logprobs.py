import pytest
import torch
from tiny_qwen3 import tiny_qwen3

from arrol_pl.train.policy.logprobs import length_buckets, make_micro_batches, response_log_probs


def test_length_buckets_respect_budget_and_cover_everything():
    lengths = [5, 30, 7, 28, 6, 100, 12]
    buckets = length_buckets(lengths, max_tokens=60)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for b in buckets:
        assert len(b) * max(lengths[i] for i in b) <= 60 or len(b) == 1
    assert [5] in buckets  # the over-long one stands alone
    with pytest.raises(ValueError):
        length_buckets(lengths, 0)


@pytest.fixture(scope="module")
def tiny_lm():
    return tiny_qwen3().eval()


def reference_log_probs(model, prompt, response, temperature=1.0):
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, -1)
    return [float(logp[len(prompt) - 1 + k, response[k]]) for k in range(len(response))]


def test_batched_log_probs_match_one_by_one(tiny_lm):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (3, 9, 5, 4)]
    responses = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (7, 2, 11, 1)]
    batches = make_micro_batches(prompts, responses, max_tokens=40, pad_id=0)
    assert len(batches) > 1
    seen = []
    with torch.no_grad():
        for mb in batches:
            lp = response_log_probs(tiny_lm, mb, temperature=0.7)
            for row, i in enumerate(mb.indices):
                ref = reference_log_probs(tiny_lm, prompts[i], responses[i], temperature=0.7)
                assert lp[row, : len(ref)].tolist() == pytest.approx(ref, abs=1e-4)
                assert torch.all(lp[row, len(ref) :] == 0)
                seen.append(i)
    assert sorted(seen) == [0, 1, 2, 3]
