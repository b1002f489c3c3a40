"""trainer.logger (arrol_pl.train.records.loggers): Lightning's own loggers; a missing optional one is a config error
naming the install command, before any model loads."""

import csv
import importlib.util
from pathlib import Path

import pytest

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.loggers import LOGGERS
from arrol_pl.train.config.sections import TrainerConfig
from arrol_pl.train.records.loggers import make_logger


def test_the_csv_logger_writes_the_scalars_under_the_run(tmp_path: Path):
    logger = make_logger("csv", tmp_path, "a-run")
    logger.log_metrics({"reward/accuracy": 0.25, "time/step": 1.5}, step=3)
    logger.save()
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert rows == [{"reward/accuracy": "0.25", "step": "3", "time/step": "1.5"}]


def test_tensorboard_is_the_default_and_writes_under_tb(tmp_path: Path):
    assert TrainerConfig().logger == "tensorboard"
    logger = make_logger("tensorboard", tmp_path, "a-run")
    logger.log_metrics({"reward/accuracy": 0.5}, step=1)
    logger.finalize("success")
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("name", [n for n in ("wandb", "mlflow") if importlib.util.find_spec(n) is None])
def test_a_missing_optional_logger_names_its_install_command(name: str):
    with pytest.raises(ConfigError, match=rf"trainer.logger={name} needs the {name} package.*pip install {name}"):
        TrainerConfig(logger=name)


def test_an_unknown_logger_names_the_choices():
    with pytest.raises(ConfigError, match=r"trainer.logger='neptune'; choose one of"):
        TrainerConfig(logger="neptune")
    assert LOGGERS == ("tensorboard", "csv", "wandb", "mlflow")


def a_config() -> dict:
    import dataclasses
    import json

    from arrol_pl.train.config.run import RunConfig

    return json.loads(json.dumps(dataclasses.asdict(RunConfig())))


def test_several_loggers_at_once_each_get_the_whole_config(tmp_path: Path):
    import yaml
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from arrol_pl.train.records.loggers import log_hyperparams, make_loggers

    loggers = make_loggers(["tensorboard", "csv"], tmp_path, "a-run")
    config = a_config()
    log_hyperparams(loggers, config)
    for logger in loggers:
        logger.log_metrics({"reward/accuracy": 0.5}, step=0)
        logger.finalize("success")
    for folder in ("tb", "csv"):
        saved = yaml.safe_load((tmp_path / folder / "hparams.yaml").read_text())
        assert saved == config, folder  # every section, nested as the config is
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    events = EventAccumulator(str(tmp_path / "tb")).Reload()
    content = events.PluginTagToContent("hparams")  # TensorBoard's HParams tab
    start = HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["algo/group_size"].number_value == 8
    assert start.hparams["reward/function"].string_value == "math_verify"
    experiment = HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["heldout/accuracy", "reward/accuracy"]
    assert events.Tags()["scalars"] == ["reward/accuracy"]  # the run's own: no placeholder hp_metric


def test_one_name_or_a_list_each_name_once():
    assert TrainerConfig(logger="csv").logger == "csv" and TrainerConfig(logger=["tensorboard", "csv"])
    assert TrainerConfig(logger=[]).logger == []  # the history file alone
    with pytest.raises(ConfigError, match="trainer.logger names csv twice"):
        TrainerConfig(logger=["csv", "tensorboard", "csv"])
    with pytest.raises(ConfigError, match=r"trainer.logger='neptune'; choose one of"):
        TrainerConfig(logger=["csv", "neptune"])


def test_the_command_line_takes_a_list_and_the_wandb_settings():
    from test_config import compose_run

    run = compose_run("trainer.logger=[tensorboard,csv]", "trainer.wandb.project=p", "trainer.wandb.tags=[a,b]")
    assert run.trainer.logger == ["tensorboard", "csv"]
    assert (run.trainer.wandb.project, run.trainer.wandb.entity, run.trainer.wandb.tags) == ("p", None, ["a", "b"])
    assert compose_run("trainer.logger=csv").trainer.logger == "csv"


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is an extra the set-up does not install")
def test_wandb_offline_takes_project_entity_tags_and_the_config(tmp_path: Path, monkeypatch):
    from arrol_pl.train.config.loggers import WandbConfig
    from arrol_pl.train.records.loggers import log_hyperparams, make_loggers

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    [logger] = make_loggers(
        "wandb", tmp_path, "a-run", wandb=WandbConfig(project="arrol-test", entity="team", tags=["grpo", "tiny"])
    )
    log_hyperparams([logger], a_config())
    run = logger.experiment
    assert run.project == "arrol-test" and run.entity == "team" and set(run.tags) == {"grpo", "tiny"}
    assert run.config["algo"]["group_size"] == 8 and run.config["reward"]["function"] == "math_verify"
    logger.finalize("success")
