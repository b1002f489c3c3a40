"""Data checked like the config, before any model loads: a training or held-out source that cannot give a problem (a
missing, empty or unreadable file, rows without the fields looked for, a hub dataset while offline) is one line naming
the key, the file and what was expected, exit 2, with no run directory left; ``--cfg job`` checks as a run does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from omegaconf import OmegaConf

from arrol_pl.cli.hydra_app import compose
from arrol_pl.tasks.problem import DatasetUnavailableError
from arrol_pl.tasks.registry import PROBE_ROWS, check_sources
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config
from arrol_pl.train.run.prelaunch import check_run_config, load_splits

ROOT = Path(__file__).resolve().parents[2]
NO_WARM = "model.warm_start.steps=0"


def rows_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refusal(*overrides: str) -> str:
    """The one-line error of the training command line ``overrides`` (its typed config and its data)."""
    with pytest.raises(ConfigError) as caught:
        check_run_config(compose("config", [*overrides]))
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_a_missing_file_is_named_with_its_key(tmp_path):
    message = refusal("data=jsonl", f"data.path={tmp_path / 'nope.jsonl'}", NO_WARM)
    assert f"data.path='{tmp_path / 'nope.jsonl'}' does not exist" in message
    assert "set data.path= to a json, jsonl or parquet file" in message


def test_an_empty_file_is_named_with_its_key(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    message = refusal("data=jsonl", f"data.path={tmp_path / 'empty.jsonl'}", NO_WARM)
    assert "no usable problem in" in message and "empty.jsonl (data.path): 0 rows" in message
    assert "the source is empty" in message


def test_rows_without_the_fields_looked_for_name_the_fields_they_have(tmp_path):
    data = rows_file(tmp_path / "qa.jsonl", [{"question": f"{i}+1", "solution": str(i + 1)} for i in range(5)])
    message = refusal("data=jsonl", f"data.path={data}", NO_WARM)
    assert "qa.jsonl (data.path): 5 rows, looked for prompt in prompt; answer in answer" in message
    assert "its rows have the fields question, solution: set data.prompt_field / data.answer_field" in message
    # a field named but missing from every row
    message = refusal("data=jsonl", f"data.path={data}", "data.prompt_field=question", NO_WARM)
    assert "answer in answer" in message and "missing_answer 5" in message
    # the same rows as a held-out set: the held-out keys
    train = rows_file(tmp_path / "train.jsonl", [{"prompt": "1+1", "answer": "2"}])
    message = refusal("data=jsonl", f"data.path={train}", f"data.heldout_path={data}", "data.num_heldout=4", NO_WARM)
    assert "(data.heldout_path)" in message and "data.heldout_fields.prompt_field / answer_field" in message


def test_an_unreadable_parquet_file_is_named_with_its_key(tmp_path):
    (tmp_path / "rows.parquet").write_text("prompt,answer\n1+1,2\n")  # a CSV under a parquet name
    message = refusal("data=jsonl", f"data.path={tmp_path / 'rows.parquet'}", NO_WARM)
    assert f"data.path='{tmp_path / 'rows.parquet'}' is not a readable parquet file (" in message
    assert "expected a parquet table of rows" in message


def test_a_hub_dataset_while_offline_names_the_key_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    train = rows_file(tmp_path / "train.jsonl", [{"prompt": "1+1", "answer": "2"}])
    message = refusal("data=jsonl", f"data.path={train}", "data.heldout_name=math500", "data.num_heldout=4", NO_WARM)
    assert message.startswith("math500: the hub is offline") and "no data.heldout_path is set" in message
    message = refusal("data=gsm8k")
    assert message.startswith("gsm8k: the hub is offline") and "no data.path is set" in message


def test_the_check_reads_on_when_the_first_rows_are_all_bad(tmp_path):
    """A usable row after the rows the check reads first: the source is accepted, as the run's load accepts it."""
    rows = [{"question": "x"}] * PROBE_ROWS + [{"prompt": "1+1", "answer": "2"}]
    data = rows_file(tmp_path / "late.jsonl", rows)
    run = load_run_config(compose("config", ["data=jsonl", f"data.path={data}", NO_WARM]))
    check_sources(run.data)
    with pytest.raises(DatasetUnavailableError):  # what the first rows alone give
        from arrol_pl.tasks.registry import load_train

        load_train(run.data, limit=PROBE_ROWS)


def test_the_run_refuses_a_source_that_fails_when_it_loads_in_one_line(tmp_path):
    """The job's own load (a file removed after the check) fails as the check does."""
    run = load_run_config(
        OmegaConf.create(
            {"data": {"name": "jsonl", "path": str(tmp_path / "gone.jsonl")}, "model": {"warm_start": {"steps": 0}}}
        )
    )
    with pytest.raises(ConfigError, match=r"^jsonl: data\.path='.*gone\.jsonl' does not exist"):
        load_splits(run)


def refused_in_one_line(out: subprocess.CompletedProcess, cwd: Path) -> str:
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: "), out.stderr[-3000:]
    left = sorted(p.name for p in cwd.iterdir() if p.name != "wrong.jsonl")
    assert left == [], f"a refused run left {left}"
    return lines[0]


def test_the_command_refuses_bad_data_and_cfg_job_checks_as_a_run_does(tmp_path, command_main):
    wrong = rows_file(tmp_path / "wrong.jsonl", [{"question": "1+1", "solution": "2"}])
    line = refused_in_one_line(command_main(tmp_path, "train", "data=jsonl", f"data.path={wrong}", NO_WARM), tmp_path)
    assert "wrong.jsonl (data.path)" in line
    for shown in ("job", "all"):
        line = refused_in_one_line(command_main(tmp_path, "train", "pruning.keep_ratio=7.0", "--cfg", shown), tmp_path)
        assert line == "config error: pruning.keep_ratio (κ) must be in (0, 1], got 7.0"
    out = command_main(tmp_path, "train", "pruning.keep_ratio=0.25", "--cfg", "job")
    assert out.returncode == 0 and "keep_ratio: 0.25" in out.stdout


def test_presets_added_with_config_dir_are_checked_before_hydra_starts(tmp_path, command_main):
    (tmp_path / "extra" / "pruning").mkdir(parents=True)
    (tmp_path / "extra" / "pruning" / "wide.yaml").write_text("policy: arrol\nkeep_ratio: 7.0\n")
    out = command_main(tmp_path, "train", "--config-dir", str(tmp_path / "extra"), "pruning=wide")
    assert out.returncode == 2 and out.stderr.splitlines() == [
        f"config error: {tmp_path / 'extra' / 'pruning' / 'wide.yaml'}: pruning.keep_ratio (κ) must be in (0, 1], got "
        "7.0"
    ], out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extra"]  # no outputs/runs/


@pytest.mark.subprocess
def test_the_script_refuses_a_file_with_the_wrong_fields_in_one_line_and_leaves_no_run_directory(tmp_path):
    wrong = rows_file(tmp_path / "wrong.jsonl", [{"question": "1+1", "solution": "2"}])
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "run.py"),
            "data=jsonl",
            f"data.path={wrong}",
            NO_WARM,
            f"model.cache_dir={tmp_path / 'cache'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = refused_in_one_line(out, tmp_path)
    assert "its rows have the fields question, solution" in line
