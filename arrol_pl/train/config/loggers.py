"""What ``trainer.logger`` may name, checked before any model loads: a missing optional logger (``wandb``,
``mlflow``: extras the set-up does not install) is a config error naming the install command
(:func:`check_logger`). The loggers themselves are made in :mod:`arrol_pl.train.records.loggers`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Sequence

LOGGERS = ("tensorboard", "csv", "wandb", "mlflow")
"""The values of ``trainer.logger``."""

PACKAGES = {"tensorboard": "tensorboard", "csv": None, "wandb": "wandb", "mlflow": "mlflow"}
"""The package each logger needs beyond Lightning (None: none)."""


@dataclass
class WandbConfig:
    """Where a Weights & Biases run goes (``trainer.logger=wandb``)."""

    project: str = "arrol-pl"
    """The W&B project."""
    entity: str | None = None
    """The team or user the project belongs to (None: the logged-in account's default)."""
    tags: list[str] = field(default_factory=list)
    """Tags of the run (e.g. ``[grpo, tiny]``)."""


def logger_names(value: str | Sequence[str]) -> list[str]:
    """``trainer.logger`` as a list of names: one name, or a list of them (several loggers at once; an empty list:
    none, the history file alone)."""
    return [value] if isinstance(value, str) else list(value)


def check_logger(value: str | Sequence[str]) -> None:
    """ValueError naming the choices or the install command when a logger of ``value`` (a name or a list of names)
    cannot log here, or is named twice."""
    names = logger_names(value)
    for name in names:
        if name not in LOGGERS:
            raise ValueError(f"trainer.logger={name!r}; choose one of {list(LOGGERS)}, or a list of them")
        package = PACKAGES[name]
        if package and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"trainer.logger={name} needs the {package} package, which the set-up does not install: "
                f"pip install {package} (or the package's extra, pip install 'arrol-pl[{package}]')"
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"trainer.logger names {', '.join(twice)} twice: list each logger once")
