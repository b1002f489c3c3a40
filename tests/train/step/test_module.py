from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync
from arrol_pl.train.step.module import skip_warning


def test_the_skip_warning_names_the_rank_whose_rollouts_were_all_pruned():
    alone = skip_warning(3, "no_survivors", 8, ONE_RANK, 1)
    assert alone == "step 3 skipped (no_survivors): all 8 rollouts were pruned; 1 steps skipped so far"
    second = skip_warning(5, "no_survivors", 4, RankSync(1, 2), 2)
    assert second == "step 5 skipped (no_survivors): all 4 rollouts of rank 1 were pruned; 2 steps skipped so far"
