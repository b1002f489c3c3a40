"""A step's scorer AUCs (:func:`arrol_pl.train.step.metrics.scorer_metrics`): over every rollout before pruning,
exact where every outcome is known and estimated from the survivors where not, with the survivors' own beside them;
and the warning of a step skipped because a rank's rollouts were all pruned (``skip_warning``)."""

import pytest
import torch

from arrol_pl.train.step.metrics import scorer_metrics, skip_warning
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync

# one group of five, three right (scores 3, 1, 1.5) and two wrong (0, 2): 4 of its 6 pairs ordered right
EVERY = (
    torch.zeros(5, dtype=torch.long),
    torch.tensor([3.0, 1.0, 0.0, 2.0, 1.5]),
    torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0]),
)


def test_the_survivors_pairs_weighted_by_their_chance_to_survive_estimate_every_rollouts_auc():
    # the two right rollouts in the middle each survived with p = 1/2, and one of them did
    group_ids, scores, labels = (t[:4] for t in EVERY)
    survival = torch.tensor([1.0, 0.5, 1.0, 1.0])
    m = scorer_metrics(scores, labels, group_ids, survival)
    assert m["scorer/within_auc_survivors"] == m["scorer/auc_survivors"] == pytest.approx(3 / 4)
    assert m["scorer/within_auc"] == m["scorer/auc"] == pytest.approx(2 / 3), "the survivor at p = 1/2 counts twice"
    exact = scorer_metrics(scores, labels, group_ids, survival, EVERY)
    assert exact["scorer/within_auc"] == exact["scorer/auc"] == pytest.approx(4 / 6)
    assert exact["scorer/within_auc_survivors"] == pytest.approx(3 / 4)


def test_with_nothing_pruned_the_estimate_is_every_rollouts_auc():
    group_ids, scores, labels = EVERY
    m = scorer_metrics(scores, labels, group_ids, torch.ones(5))
    assert m == scorer_metrics(scores, labels, group_ids, torch.ones(5), EVERY)
    assert m["scorer/within_auc"] == m["scorer/within_auc_survivors"] == pytest.approx(4 / 6)
    # one outcome among the survivors: no AUC of theirs, left out of the row
    assert scorer_metrics(scores[:2], labels[:2], group_ids[:2], torch.ones(2)) == {}


def test_the_skip_warning_names_the_rank_whose_rollouts_were_all_pruned():
    alone = skip_warning(3, "no_survivors", 8, ONE_RANK, 1)
    assert alone == "step 3 skipped (no_survivors): all 8 rollouts were pruned; 1 steps skipped so far"
    second = skip_warning(5, "no_survivors", 4, RankSync(1, 2), 2)
    assert second == "step 5 skipped (no_survivors): all 4 rollouts of rank 1 were pruned; 2 steps skipped so far"
