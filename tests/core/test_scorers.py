"""The scorers at L_detect apart from the engine: the oracle's noise sets its AUC, DeepConf's confidence orders
peaked prefixes above flat ones, the checker reads the prompt's problem, and the config refuses what cannot work."""

from __future__ import annotations

import math

import pytest
import torch

from arrol_pl.core.metrics import binary_auc
from arrol_pl.core.pruning import PruningConfig
from arrol_pl.core.scorers import (
    CheckerScorer,
    ConfidenceScorer,
    Prefix,
    PrefixScorer,
    oracle_scores,
    oracle_separation,
)


@pytest.mark.parametrize("auc", [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
def test_oracle_scores_reach_their_target_auc(auc):
    labels = (torch.rand(40_000, generator=torch.Generator().manual_seed(1)) < 0.3).float()
    scores = oracle_scores(labels, auc, torch.Generator().manual_seed(2))
    assert binary_auc(scores, labels) == pytest.approx(auc, abs=0.01)
    assert abs(float(scores.mean()) - (0.3 - 0.5) * oracle_separation(auc)) < 0.05, "centred on the classes' midpoint"
    if auc == 1.0:
        assert binary_auc(scores, labels) == 1.0


def test_oracle_separation_grows_with_the_auc_and_refuses_outside_its_range():
    gaps = [oracle_separation(a) for a in (0.5, 0.6, 0.75, 0.9, 0.99, 1.0)]
    assert gaps[0] == 0.0 and gaps == sorted(gaps) and gaps[-1] == 12.0
    assert 0.5 * (1 + math.erf(gaps[2] / 2)) == pytest.approx(0.75)  # Φ(d / √2)
    for bad in (0.49, 1.01):
        with pytest.raises(ValueError, match="oracle AUC must be in"):
            oracle_separation(bad)


def test_oracle_scores_are_a_function_of_the_generator():
    labels = torch.tensor([0.0, 1.0, 1.0, 0.0])
    a = oracle_scores(labels, 0.8, torch.Generator().manual_seed(7))
    assert torch.equal(a, oracle_scores(labels, 0.8, torch.Generator().manual_seed(7)))
    assert not torch.equal(a, oracle_scores(labels, 0.8, torch.Generator().manual_seed(8)))


def test_confidence_orders_a_peaked_prefix_above_a_flat_one():
    scorer = ConfidenceScorer(topk=3)
    assert isinstance(scorer, PrefixScorer) and scorer.topk == 3 and not scorer.needs_text
    peaked = [{1: -0.01, 2: -6.0, 3: -7.0, 4: -9.0}] * 4
    flat = [{1: -1.0, 2: -1.1, 3: -1.2, 4: -1.3}] * 4
    high, low = scorer(Prefix(0, [1] * 4, peaked)), scorer(Prefix(0, [1] * 4, flat))
    assert high > low
    assert low == pytest.approx(math.log((1.0 + 1.1 + 1.2) / 3)), "log of the mean top-3 confidence"
    with pytest.raises(ValueError, match="needs the prefix's log-probs"):
        scorer(Prefix(0, [1], None))


def test_checker_reads_the_problem_of_the_prompt_index():
    seen = []

    def check(problem, text):
        seen.append((problem, text))
        return 2.0 if text.startswith(problem) else -2.0

    scorer = CheckerScorer(check, ["a", "b"])
    assert scorer.needs_text and scorer.topk is None
    assert scorer(Prefix(1, [5, 6], text="b...")) == 2.0 and scorer(Prefix(0, [5], text="b")) == -2.0
    assert seen == [("b", "b..."), ("a", "b")]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(scorer="nope"), "scorer='nope' is unknown"),
        (dict(scorer="oracle"), "scorer=oracle needs oracle_auc"),
        (dict(scorer="head", oracle_auc=0.9), "oracle_auc=0.9 is the oracle's"),
        (dict(scorer="oracle", oracle_auc=0.4), "oracle_auc must be in"),
    ],
)
def test_pruning_config_refuses_a_bad_scorer(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PruningConfig(**kwargs)
