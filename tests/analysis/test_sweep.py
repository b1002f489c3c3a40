"""The sweep aggregation over seeds (arrol_pl/analysis/sweep.py): per-arm mean ± sd, standard error, paired
differences."""

import math

import pytest

from arrol_pl.analysis.sweep import seed_table
from arrol_pl.train.records.summary import RunSummary


def row(arm: str, seed: int, before: float, after: float) -> RunSummary:
    return RunSummary(
        overrides=[f"pruning={arm}", f"trainer.seed={seed}", "data.num_heldout=256"],
        heldout_accuracy_before=before,
        heldout_accuracy_after=after,
        seconds_per_step=0.5,
    )


def test_seed_table_means_spreads_and_pairs_by_seed():
    rows = [
        row("none", 0, 0.2, 0.30),
        row("none", 1, 0.3, 0.34),
        row("none", 2, 0.1, 0.26),
        row("arrol", 0, 0.2, 0.28),
        row("arrol", 1, 0.3, 0.28),
        row("arrol", 2, 0.1, 0.22),
    ]
    markdown, records = seed_table(rows, "pruning=none")
    by_arm = {r["arm"]: r for r in records}
    assert set(by_arm) == {"pruning=none", "pruning=arrol"}  # the shared override is not part of an arm's name
    gains = by_arm["pruning=arrol"]["gain_per_seed"]
    assert gains == pytest.approx([0.08, -0.02, 0.12])
    mean, sd, se = by_arm["pruning=arrol"]["gain"]
    assert mean == pytest.approx(0.06) and sd == pytest.approx(math.sqrt((0.02**2 + 0.08**2 + 0.06**2) / 2))
    assert se == pytest.approx(sd / math.sqrt(3))
    paired = by_arm["pruning=arrol"]["vs_baseline"]
    assert paired[0] == pytest.approx((-0.02 - 0.06 - 0.04) / 3)
    assert by_arm["pruning=none"]["vs_baseline"] is None
    assert "| pruning=arrol | 3 | 0.260 ± 0.035 (SE 0.020) |" in markdown
    # each seed's gain carries the standard error of its before/after difference (NaN where a run has none)
    assert all(math.isnan(se) for se in by_arm["pruning=arrol"]["gain_se_per_seed"])
    rows[3].heldout_accuracy_se_before, rows[3].heldout_accuracy_se_after = 0.03, 0.04
    _, records = seed_table(rows, "pruning=none")
    assert next(r for r in records if r["arm"] == "pruning=arrol")["gain_se_per_seed"][0] == pytest.approx(0.05)


def test_seed_table_is_empty_without_repeated_seeds():
    assert seed_table([row("none", 0, 0.2, 0.3), row("arrol", 0, 0.2, 0.3)], None) == ("", [])


def test_seed_table_leaves_out_a_run_without_held_out_figures_and_says_so():
    """A sweep aggregated while a job still runs (its summary.json written as it goes) or after one stopped."""
    rows = [
        row("none", 0, 0.2, 0.30),
        row("none", 1, 0.3, 0.34),
        row("arrol", 0, 0.2, 0.28),
        row("arrol", 1, 0.3, 0.28),
    ]
    running = RunSummary(overrides=["pruning=arrol", "trainer.seed=2", "data.num_heldout=256"], seconds_per_step=0.5)
    markdown, records = seed_table([*rows, running], "pruning=none")
    assert next(r for r in records if r["arm"] == "pruning=arrol")["seeds"] == ["0", "1"]
    assert markdown.rstrip().endswith(
        "1 run(s) without held-out figures before and after (still running, stopped, or no held-out set) left out"
    )
