"""RunSummary: the typed record of summary.json that the report, sweep tables and results page read."""

import json

import pytest

from arrol_pl.analysis import sweep
from arrol_pl.analysis.runs import sweep_runs
from arrol_pl.train.records.summary import RunSummary


def test_the_file_keeps_its_keys_and_old_runs_load(tmp_path):
    s = RunSummary(
        name="arrol",
        steps=3,
        seconds_per_step=2.0,
        overrides=["pruning.keep_ratio=0.5"],
        config={"pruning": {"keep_ratio": 0.5}},
        run_dir="elsewhere",
    )
    s.write(tmp_path)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert "run_dir" not in on_disk and list(on_disk)[:2] == ["name", "heldout_accuracy_before"]
    assert list(on_disk)[-1] == "config"
    back = RunSummary.read(tmp_path)
    assert back.run_dir == str(tmp_path) and back.to_json() == on_disk
    # A run written before a key existed (here: only three of them) still loads, with the defaults.
    (tmp_path / "summary.json").write_text(json.dumps({"name": "old", "steps": 5, "config": {}}))
    old = RunSummary.read(tmp_path)
    assert old.steps == 5 and old.heldout_accuracy_se_after is None and old.data_rows == {}


def test_an_unknown_key_is_named(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"name": "x", "speedup": 2.0}))
    with pytest.raises(ValueError, match=r"summary\.json has keys RunSummary does not know: \['speedup'\]"):
        RunSummary.read(tmp_path)


def test_sweep_table_reads_the_records(tmp_path):
    for job, (kappa, sps) in enumerate([(1.0, 4.0), (0.5, 2.0)]):
        (tmp_path / str(job)).mkdir()
        RunSummary(
            name="arrol",
            seconds_per_step=sps,
            keep_ratio_mean=kappa,
            overrides=[f"pruning.keep_ratio={kappa}", "trainer.max_steps=3"],
        ).write(tmp_path / str(job))
    markdown, records = sweep.table(sweep_runs(tmp_path), baseline="pruning.keep_ratio=1.0")
    assert [r["run"] for r in records] == ["pruning.keep_ratio=1.0", "pruning.keep_ratio=0.5"]
    assert [r["speedup"] for r in records] == [1.0, 2.0]
    assert "every run: `trainer.max_steps=3`" in markdown


def test_the_held_out_gain_pairs_by_problem_and_says_whether_it_clears_two_standard_errors():
    before, after = [0.0, 0.25, 0.5, 0.25] * 8, [0.25, 0.5, 0.75, 0.25] * 8
    s = RunSummary(
        heldout_accuracy_before=sum(before) / 32,
        heldout_accuracy_after=sum(after) / 32,
        heldout_accuracy_se_before=0.05,
        heldout_accuracy_se_after=0.05,
        heldout_per_problem_before=before,
        heldout_per_problem_after=after,
    )
    gain, se = s.heldout_gain()
    diffs = [a - b for a, b in zip(after, before)]  # 0.25 on three problems of four, 0 on the fourth
    mean = sum(diffs) / 32
    assert gain == pytest.approx(mean) and gain == pytest.approx(0.1875)
    assert se == pytest.approx((sum((d - mean) ** 2 for d in diffs) / 31) ** 0.5 / 32**0.5)
    assert se < 0.05 and s.learned() is True  # the problems' shared difficulty cancels in the pairs
    # Without per-problem records (runs written before them) the two standard errors combine as if independent.
    old = RunSummary(
        heldout_accuracy_before=0.2,
        heldout_accuracy_after=0.3,
        heldout_accuracy_se_before=0.03,
        heldout_accuracy_se_after=0.04,
    )
    assert old.heldout_gain() == pytest.approx((0.1, 0.05)) and old.learned() is False
    assert RunSummary(heldout_accuracy_after=0.3).heldout_gain() is None and RunSummary().learned() is None


@pytest.mark.parametrize(
    "after, verdict",
    [
        (0.5, "rose beyond two standard errors"),
        (0.1, "fell beyond two standard errors"),
        (0.32, "within two standard errors"),
    ],
)
def test_the_printed_gain_says_which_way_it_cleared_two_standard_errors(after, verdict):
    from arrol_pl.analysis.report import gain_text

    s = RunSummary(
        heldout_accuracy_before=0.3,
        heldout_accuracy_after=after,
        heldout_accuracy_se_before=0.03,
        heldout_accuracy_se_after=0.04,
    )
    assert gain_text(s).endswith(f"(unpaired): {verdict}")


@pytest.mark.parametrize("gate", [0.6, None])
def test_the_printout_says_how_often_the_gate_let_the_run_prune_and_the_heads_auc_within_groups(gate, tmp_path, capsys):
    from arrol_pl.analysis.report import print_summary

    s = RunSummary(
        config={"pruning": {"gate_auc": gate}},
        pruning_active_fraction=0.25,
        head_auc_after_cold_start=0.7,
        head_within_auc_after_cold_start=0.51,
    )
    print_summary(s, tmp_path)
    out = capsys.readouterr().out
    assert "quality-head AUC after cold start (within groups)  0.700 (0.510)" in out
    assert "train further" not in out  # no checkpoint to go on from
    assert ("steps the gate let prune after cold start" in out) == (gate is not None)
    if gate is not None:
        assert "steps the gate let prune after cold start          0.25" in out


def test_the_summary_records_the_scorers_auc_within_groups_beside_its_pooled_one():
    """The results page places each scorer by its AUC within groups (``scorer/within_auc``, logged every step):
    the summary keeps its mean after the cold start as it keeps the pooled ``scorer/auc``'s."""
    from arrol_pl.core.pruning import PruningConfig
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.run.finish import summarise

    # two cold-start steps, left out; then a head that orders prompts (pooled 0.8) and not a group's rollouts (0.5)
    history = [{"scorer/auc": 0.99, "scorer/within_auc": 0.99}] * 2
    history += [
        {"scorer/auc": 0.8, "scorer/within_auc": 0.5, "scorer/within_auc_survivors": 0.56},
        {"scorer/auc": 0.7, "scorer/within_auc": 0.55, "scorer/within_auc_survivors": 0.6},
        {"scorer/auc": 0.75},
    ]  # a step whose groups were all of one outcome logs no AUC within groups
    s = summarise(RunConfig(pruning=PruningConfig(cold_start_steps=2)), history, None, None, wall=1.0)
    assert s.scorer_auc_after_cold_start == pytest.approx(0.75)
    assert s.scorer_within_auc_after_cold_start == pytest.approx(0.525)
    assert s.scorer_within_auc_survivors_after_cold_start == pytest.approx(0.58), "the survivors' own, beside it"
    assert RunSummary.from_json(s.to_json()).scorer_within_auc_after_cold_start == pytest.approx(0.525)
    assert RunSummary.from_json({"name": "old"}).scorer_within_auc_after_cold_start is None  # written before it


def test_a_run_that_never_left_its_cold_start_reports_no_figures_after_it(tmp_path, capsys):
    """Two steps of a ten-step cold start: the figures "after the cold start" are None in summary.json (not the
    cold start's, under that name), and the printout says there were no such steps."""
    from arrol_pl.analysis.report import print_summary
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.run.finish import summarise

    history = [
        {
            "step": i,
            "pruning/keep_ratio": 1.0,
            "head/accuracy": 1.0,
            "reward/accuracy": 0.0,
            "time/step": 2.0,
            "balance/zero_advantage_fraction": 1.0,
        }
        for i in range(2)
    ]
    s = summarise(RunConfig(), history, None, None, wall=5.0)
    assert s.config["pruning"]["cold_start_steps"] == 10 and s.steps == 2
    for key in (
        "keep_ratio_mean",
        "head_accuracy_after_cold_start",
        "head_majority_after_cold_start",
        "zero_advantage_fraction",
        "seconds_per_step",
    ):
        assert getattr(s, key) is None, key
    assert s.train_accuracy_first == 0.0  # the figures over every step stay
    s.checkpoint = str(tmp_path / "checkpoints" / "last.ckpt")
    print_summary(RunSummary.from_json(json.loads(json.dumps(s.to_json()))), tmp_path)
    out = capsys.readouterr().out
    assert "no steps after the cold start (2 of its 10 steps ran)" in out
    assert f"  train further: trainer.resume={tmp_path} trainer.max_steps=<more>" in out  # in place, as resumes go
    assert "after cold start" not in out and "keep ratio" not in out


def test_a_short_run_without_held_out_data_prints_only_rows_with_a_value(tmp_path, capsys):
    """No held-out set: no held-out rows (no ``avg@0``, no ``n/a``); one step: ``1 step`` and its accuracy alone; the
    wall seconds say they are this command's."""
    from arrol_pl.analysis.report import print_summary

    cold = {"pruning": {"cold_start_steps": 10}}
    print_summary(
        RunSummary(
            name="r", steps=1, train_accuracy_first=0.25, train_accuracy_last10=0.25, wall_seconds=3.0, config=cold
        ),
        tmp_path,
    )
    out = capsys.readouterr().out
    assert "r: 1 step\n" in out and "held-out" not in out and "avg@0" not in out and "n/a" not in out
    assert "train accuracy (the one step)" in out and "wall seconds (this command)" in out
    print_summary(
        RunSummary(
            name="r",
            steps=2,
            train_accuracy_first=0.25,
            train_accuracy_last10=0.5,
            config=cold,
            heldout_samples=4,
            heldout_accuracy_before=0.3,
            heldout_accuracy_after=0.4,
        ),
        tmp_path,
    )
    out = capsys.readouterr().out
    assert "r: 2 steps\n" in out and "train accuracy (first step → all 2 steps)  0.250 → 0.500" in out
    assert "held-out accuracy (avg@4, T=1)" in out


def test_the_seconds_cover_every_session_of_a_resumed_run(tmp_path, capsys):
    """A run resumed at step 2: its history holds the first session's steps too, and ``time/wall`` continues their
    clock, so the training seconds printed are the whole run's; the wall seconds beside them are this command's."""
    from arrol_pl.analysis.report import print_summary
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.run.finish import summarise

    history = [{"step": i, "reward/accuracy": 0.5, "time/step": 4.0, "time/wall": 4.0 * (i + 1)} for i in range(3)]
    s = summarise(RunConfig(), history, None, None, wall=6.5)  # this command ran the third step only
    assert s.training_seconds == 12.0 and s.wall_seconds == 6.5
    print_summary(RunSummary.from_json(json.loads(json.dumps(s.to_json()))), tmp_path)
    out = capsys.readouterr().out
    assert "seconds: training over the whole run / this command  12.0 / 6.5\n" in out
    assert summarise(RunConfig(), [], None, None, wall=1.0).training_seconds is None


def test_rows_without_a_value_are_left_out_and_counts_agree_with_their_nouns(tmp_path, capsys):
    """Past its cold start, a run whose summary has no head or zero-advantage figures prints no row for them
    (never ``n/a`` alone); a one-step cold start is ``1 step``; a run with no step prints no accuracy."""
    from arrol_pl.analysis.report import print_summary

    print_summary(
        RunSummary(
            name="r",
            steps=20,
            train_accuracy_first=0.25,
            train_accuracy_last10=0.5,
            keep_ratio_mean=0.5,
            keep_ratio_target=0.5,
            seconds_per_step=1.0,
            wall_seconds=30.0,
            training_seconds=20.0,
            config={"pruning": {"cold_start_steps": 10}},
        ),
        tmp_path,
    )
    out = capsys.readouterr().out
    assert "n/a" not in out and "quality-head" not in out and "zero-advantage" not in out
    assert "keep ratio after cold start (target)" in out and "seconds per step (after cold start)" in out
    print_summary(
        RunSummary(
            name="r", steps=1, train_accuracy_first=0.0, config={"pruning": {"cold_start_steps": 1}}, wall_seconds=3.0
        ),
        tmp_path,
    )
    assert "(1 of its 1 step ran)" in capsys.readouterr().out
    print_summary(
        RunSummary(name="r", steps=0, wall_seconds=3.0, config={"pruning": {"cold_start_steps": 10}}), tmp_path
    )
    out = capsys.readouterr().out
    assert "r: 0 steps\n" in out and "n/a" not in out and "train accuracy" not in out and "cold start" not in out
