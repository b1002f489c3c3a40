"""What ``arrol evaluate`` scores when told no datasets: the data of the checkpoint's run, read from what the run
recorded (an export's data_config.json, else its run's summary.json; a checkpoint's own config), its held-out set
if it defined one, else its training problems, said so in the first line; refused in one line when nothing records
it. (A whole run's export evaluated this way: tests/tasks/test_reward_run.py.)"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from arrol_pl.analysis.trained_data import trained_data
from arrol_pl.tasks.prompts import DATA_RECORD
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import DataConfig

ROOT = Path(__file__).resolve().parents[2]


def sums(path: Path, n: int = 5) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "prompt": f"Compute {i} + 10.", "answer": str(i + 10)}) + "\n" for i in range(n)
        )
    )
    return path


def export_dir(root: Path, record: dict | None = None, summary: dict | None = None) -> Path:
    """A directory that passes for a run's export/ (its head folder), with the run's data recorded in it or in the
    run's summary.json beside it."""
    export = root / "run" / "export"
    (export / "quality_head").mkdir(parents=True)
    (export / "quality_head" / "config.json").write_text("{}")
    if record is not None:
        (export / DATA_RECORD).write_text(json.dumps(record))
    if summary is not None:
        (root / "run" / "summary.json").write_text(json.dumps({"config": {"data": summary}}))
    return export


def jsonl(path: Path, **more) -> dict:
    return dataclasses.asdict(
        DataConfig(
            name="jsonl",
            path=str(path),
            prompt_field="prompt",
            answer_field="answer",
            id_field="id",
            num_heldout=0,
            **more,
        )
    )


def test_a_run_that_held_nothing_out_is_scored_on_its_training_problems_and_says_so(tmp_path):
    export = export_dir(tmp_path, record=jsonl(sums(tmp_path / "sums.jsonl")))
    data = trained_data(export)
    assert not data.heldout and data.name == "jsonl"
    assert [p.id for p in data.load(3).problems] == ["s0", "s1", "s2"] and len(data.load(None).problems) == 5
    assert data.describe() == (
        f"the run's training problems (it held none out: these were trained on): jsonl, "
        f"{tmp_path / 'sums.jsonl'} (recorded in {export / DATA_RECORD})"
    )


def test_a_held_out_set_is_scored_as_the_run_defined_it(tmp_path):
    """The run's own held-out file, or its generated task's held-out split with the run's options (whatever
    data.num_heldout it evaluated); from the summary beside an export written before the record, or a checkpoint."""
    held = sums(tmp_path / "held.jsonl", 4)
    export = export_dir(tmp_path, summary=jsonl(tmp_path / "absent.jsonl", heldout_path=str(held)))
    data = trained_data(export)
    assert data.heldout and [p.id for p in data.load(None).problems] == ["s0", "s1", "s2", "s3"]
    assert data.describe().startswith(f"the run's held-out set: jsonl, {held} (recorded in ")

    arithmetic = dataclasses.asdict(DataConfig(options={"max_operands": 2, "max_digits": 2}, num_heldout=0))
    checkpoint = tmp_path / "last.ckpt"
    torch.save({"arrol": {"config": {"data": arithmetic}}}, checkpoint)
    data = trained_data(checkpoint)
    problems = data.load(6).problems
    assert (
        data.heldout
        and len(problems) == 6
        and all(p.prompt.count(" + ") + p.prompt.count(" - ") == 1 for p in problems)
    )
    assert data.describe() == f"the run's held-out set: arithmetic, split heldout (recorded in {checkpoint})"


def test_an_export_that_records_no_data_is_refused_naming_what_to_pass(tmp_path):
    export = export_dir(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"records no data of its run .*: name what to score, e\.g\. "
        r"\+datasets\.arithmetic\.split=heldout",
    ):
        trained_data(export)


def test_evaluate_says_first_which_data_it_scores_and_loads_the_runs_own(tmp_path, capsys):
    from arrol_pl.analysis.eval_config import load_eval_config
    from arrol_pl.cli.evaluate import scored_sets

    export = export_dir(
        tmp_path,
        record=jsonl(
            sums(tmp_path / "sums.jsonl"), prompt_template="Q: {question}\nA:", chat_template=False, stop=["\n"]
        ),
    )
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = load_eval_config(compose("evaluate", overrides=[f"checkpoint={export}", "limit=2", "k=4"]))
        named = load_eval_config(
            compose(
                "evaluate", overrides=[f"checkpoint={export}", "limit=2", "+datasets.arithmetic.options.max_digits=2"]
            )
        )
    sets = scored_sets(cfg)
    assert capsys.readouterr().out.splitlines()[0] == (
        f"evaluating {export} on the run's training problems (it held none out: these were trained on): jsonl, "
        f"{tmp_path / 'sums.jsonl'} (recorded in {export / DATA_RECORD}): the first 2 problems, k = 4"
    )
    assert [p.id for p in sets.problems["jsonl"]] == ["s0", "s1"]
    assert dataclasses.astuple(sets.formats["jsonl"]) == ("Q: {question}\nA:", False, ("\n",))
    sets = scored_sets(named)  # datasets named: those, not the run's
    assert capsys.readouterr().out.splitlines()[0].startswith(f"evaluating {export} on datasets arithmetic: ")
    assert list(sets.problems) == ["arithmetic"] and sets.formats == {"arithmetic": None}
    assert all(p.id.startswith("arith-") for p in sets.problems["arithmetic"])
