"""Prefix scorers inside the real engine (``pruning.scorer``): the score the decision reads is the scorer's, on the
rollout's first L_detect tokens, the head's logit is still returned beside it, and each engine step's time and the
requests it advanced are recorded for the decode-cost model."""

from __future__ import annotations

import pytest

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.scorers import ConfidenceScorer, Prefix

pytestmark = pytest.mark.engine

PROMPTS = [f"{a} + {a + 2} =" for a in range(4)]
DETECT = 5


class TextScorer:
    """A prefix scorer that records what it was shown and scores by the prefix's token sum."""

    topk, needs_text = None, True

    def __init__(self):
        self.seen = []

    def __call__(self, prefix: Prefix) -> float:
        self.seen.append((prefix.prompt_index, list(prefix.tokens), prefix.text))
        return float(sum(prefix.tokens) % 97)


def test_confidence_scores_the_first_l_detect_tokens_and_the_head_still_scores(engine):
    sampling = dict(max_tokens=12, temperature=0.0, ignore_eos=True)
    head = engine.generate(PROMPTS, 2, sampling, DETECT, logprobs_topk=20)
    conf = engine.generate(PROMPTS, 2, sampling, DETECT, scorer=ConfidenceScorer(), logprobs_topk=20)
    scorer = ConfidenceScorer()
    for a, b in zip(head.rollouts, conf.rollouts):
        assert a.response_token_ids == b.response_token_ids, "greedy: the same rollouts"
        assert a.score == pytest.approx(a.head_score) and b.head_score == pytest.approx(a.head_score, abs=1e-5)
        expected = scorer(Prefix(b.prompt_index, b.response_token_ids[:DETECT], b.logprobs[:DETECT]))
        assert b.score == pytest.approx(expected) and b.score != pytest.approx(b.head_score)


def test_the_decision_reads_the_scorers_score(engine):
    """The rank-only rule keeps each group's highest- and lowest-scored rollouts: the scorer's, not the head's."""
    scorer = TextScorer()
    pruner = PrunerParams(
        policy="arrol", balance_target="spread", keep_ratio=0.5, p_min=0.0, min_keep_per_group=0, seed=1
    )
    result = engine.generate(
        PROMPTS, 6, dict(max_tokens=14, temperature=1.0, ignore_eos=True), DETECT, pruner, scorer=scorer
    )
    assert len(scorer.seen) == len(result.rollouts)
    by_prefix = {(p, tuple(t)): text for p, t, text in scorer.seen}
    for r in result.rollouts:
        tokens = tuple(r.response_token_ids[:DETECT])
        assert by_prefix[(r.prompt_index, tokens)] == engine.tokenizer.decode(list(tokens), skip_special_tokens=True)
        assert r.score == float(sum(tokens) % 97)
    for p in range(len(PROMPTS)):
        group = [r for r in result.rollouts if r.prompt_index == p]
        scores = sorted({r.score for r in group})
        if len(scores) > 1:  # sampled scores can tie: of the rollouts sharing an extreme score, one survives
            for extreme in (scores[0], scores[-1]):
                assert any(not r.pruned for r in group if r.score == extreme), "the group's extremes survive"
    assert any(r.pruned for r in result.rollouts)


def test_each_engine_step_is_timed_with_the_requests_it_advanced(engine):
    result = engine.generate(PROMPTS, 3, dict(max_tokens=9, temperature=1.0, ignore_eos=True))
    assert len(result.step_seconds) == len(result.step_requests) == result.steps
    assert all(t > 0 for t in result.step_seconds)
    assert sum(result.step_requests) == result.generated_tokens == 4 * 3 * 9, "one token per request and step"
    assert max(result.step_requests) == 12


def test_a_prefix_scorer_needs_l_detect(engine):
    with pytest.raises(ValueError, match="a prefix scorer scores at detect_length"):
        engine.generate(PROMPTS, 2, dict(max_tokens=6), scorer=ConfidenceScorer())
