"""The ``data=`` presets from the command line: each preset's options are its own, every key is checked
before any model loads, and a run's training and held-out sets load from the composed config."""

import logging
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from arrol_pl.tasks.problem import DatasetUnavailableError
from arrol_pl.tasks.registry import load_data
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config

CONF = str(Path(__file__).resolve().parents[2] / "conf")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "datasets"
GSM8K = FIXTURES / "gsm8k.jsonl"


def compose_run(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = compose("config", overrides=list(overrides))
    return load_run_config(cfg)


def test_jsonl_preset_reads_any_file_with_its_fields_and_answer_pattern():
    run = compose_run(
        "data=jsonl",
        f"data.path={GSM8K}",
        "data.prompt_field=question",
        "data.answer_field=answer",
        "data.answer_pattern='#### (.+)$'",
        f"data.heldout_path={FIXTURES / 'gsm8k_hub' / 'main'}",
    )
    train, heldout = load_data(run.data)
    assert [p.answer for p in train] == ["18", "3", "1250", "41"]
    assert [p.answer for p in heldout] == ["18", "3", "1250"]  # the folder's test split, read with the same fields
    assert train.report()["skipped"] == {"no_pattern_match": 1}


def test_heldout_fields_read_a_heldout_file_of_another_shape():
    run = compose_run(
        "data=jsonl",
        f"data.path={FIXTURES / 'broken_lines.jsonl'}",
        f"data.heldout_path={FIXTURES / 'generic.jsonl'}",
        "data.heldout_fields.prompt_field=q",
        "data.heldout_fields.answer_field=meta.gold",
        "model.warm_start.steps=0",
    )
    train, heldout = load_data(run.data)
    assert [p.answer for p in train] == ["5", "3"] and [p.answer for p in heldout] == ["27", "\\frac{3}{4}"]
    with pytest.raises(ConfigError, match=r"data\.heldout_fields\.question is not a row field"):
        compose_run("data=jsonl", f"data.path={GSM8K}", "+data.heldout_fields.question=q")


def test_heldout_prompts_that_are_training_prompts_are_counted_in_one_warning(tmp_path, caplog):
    rows = [f'{{"prompt": "What is {i} + 1?", "answer": "{i + 1}"}}\n' for i in range(6)]
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(rows))
    test.write_text("".join(rows[4:]) + '{"prompt": "New?", "answer": "0"}\n')
    overlap = f"jsonl: 2 of the 3 held-out prompts ({test}) are also training prompts ({train})"
    for heldout, said in (
        ("train.jsonl", f"jsonl: held-out data is the training data ({train})"),
        ("test.jsonl", overlap),
    ):
        caplog.clear()
        run = compose_run(
            "data=jsonl", f"data.path={train}", f"data.heldout_path={tmp_path / heldout}", "model.warm_start.steps=0"
        )
        with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
            problems, held = load_data(run.data)
        assert [r.getMessage() for r in caplog.records] == [said]
        assert len(problems) == 6 and len(held) == {"train.jsonl": 6, "test.jsonl": 3}[heldout]  # nothing dropped
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
        load_data(compose_run().data)  # the built-in task holds out problems it never trains on
    assert caplog.records == []


def test_gsm8k_preset_trains_on_train_and_holds_out_test():
    main = FIXTURES / "gsm8k_hub" / "main"
    run = compose_run("data=gsm8k", f"data.path={main}", f"data.heldout_path={main}", "data.num_heldout=2")
    train, heldout = load_data(run.data)
    assert [p.answer for p in train] == ["72", "10"] and [p.answer for p in heldout] == ["18", "3"]
    assert all(p.solution for p in train)  # what the tiny policy's warm start trains on


def test_arithmetic_options_do_not_leak_into_another_adapter():
    with pytest.raises(ConfigError) as info:
        compose_run("data.name=jsonl", f"data.path={GSM8K}")
    message = str(info.value)
    assert "data.options.min_operands is not an option of data.name=jsonl" in message
    assert "hub_id, hub_config" in message and "data=jsonl" in message
    with pytest.raises(ConfigError, match="data.options.seed is not an option of data.name=gsm8k .it takes none"):
        compose_run("data=gsm8k", "+data.options.seed=1")


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["data=jsonl"], "data.path must be set"),
        (["data.prompt_field=question"], "data.prompt_field does not apply to data.name=arithmetic"),
        (["data=jsonl", f"data.path={GSM8K}", "data.answer_pattern='####'"], "data.answer_pattern"),
        (["data=jsonl", f"data.path={GSM8K}", "data.name=gsm9k"], "data.name"),
        (["data=dapo_math", "data.heldout_name=math501"], "data.heldout_name"),
        (["data.num_heldout=-1"], "data.num_heldout"),
        (["data.options.max_digits=0"], "data.options of data.name=arithmetic: need 1 <= min_digits <= max_digits"),
    ],
)
def test_bad_data_keys_fail_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        compose_run(*overrides)


def test_tiny_policy_needs_a_dataset_with_worked_solutions():
    with pytest.raises(ConfigError) as info:
        compose_run("data=dapo_math")
    message = str(info.value)
    assert "data.name=dapo_math" in message and "model=hf model.path=" in message
    assert "data.solution_field" in message and "model.warm_start.steps=0" in message
    compose_run("data=dapo_math", "model.warm_start.steps=0")
    compose_run("data=gsm8k")  # GSM8K's answers are worked solutions
    compose_run("data=jsonl", f"data.path={GSM8K}", "data.answer_pattern='#### (.+)$'")
    compose_run("data=dapo_math", "model=hf", "model.path=/models/any")


def test_heldout_errors_name_the_heldout_key(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = compose_run("data=dapo_math", "model.warm_start.steps=0", f"data.path={FIXTURES / 'dapo_math.parquet'}")
    with pytest.raises(DatasetUnavailableError, match="no data.heldout_path is set"):
        load_data(run.data)
    run = compose_run("data=gsm8k", f"data.path={GSM8K}", f"data.heldout_path={FIXTURES / 'gsm8k_hub'}")
    with pytest.raises(DatasetUnavailableError, match="set data.heldout_path to the one to read"):
        load_data(run.data)


def test_no_heldout_source_is_an_empty_set():
    run = compose_run(
        "data=jsonl", f"data.path={GSM8K}", "data.prompt_field=question", "data.answer_pattern='#### (.+)$'"
    )
    train, heldout = load_data(run.data)
    assert len(train) == 4 and len(heldout) == 0 and heldout.report()["rows"] is None
