"""RunSummary: the typed record of summary.json that the report, sweep tables and results page read."""

import json

import pytest

from arrol_pl.analysis import sweep
from arrol_pl.train.summary import RunSummary


def test_the_file_keeps_its_keys_and_old_runs_load(tmp_path):
    s = RunSummary(name="arrol", steps=3, seconds_per_step=2.0, overrides=["pruning.keep_ratio=0.5"],
                   config={"pruning": {"keep_ratio": 0.5}}, run_dir="elsewhere")
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
        RunSummary(name="arrol", seconds_per_step=sps, keep_ratio_mean=kappa,
                   overrides=[f"pruning.keep_ratio={kappa}", "trainer.max_steps=3"]).write(tmp_path / str(job))
    markdown, records = sweep.table(sweep.collect(tmp_path), baseline="pruning.keep_ratio=1.0")
    assert [r["run"] for r in records] == ["pruning.keep_ratio=1.0", "pruning.keep_ratio=0.5"]
    assert [r["speedup"] for r in records] == [1.0, 2.0]
    assert "every run: `trainer.max_steps=3`" in markdown
