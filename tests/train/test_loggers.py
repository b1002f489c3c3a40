"""trainer.logger (arrol_pl.train.loggers): Lightning's own loggers; a missing optional one is a config error
naming the install command, before any model loads."""

import csv
import importlib.util
from pathlib import Path

import pytest

from arrol_pl.train.config import TrainerConfig
from arrol_pl.train.config_loader import ConfigError
from arrol_pl.train.loggers import LOGGERS, make_logger


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
