"""The run's metrics logger (``trainer.logger``): TensorBoard by default, or the CSV, Weights & Biases or MLflow
logger, each Lightning's own.

Decisions:
- **The history file is the record whatever the logger.** ``history.jsonl`` and ``summary.json`` are written the
  same way with every logger, and every script here (the summary, sweep tables, the wall-clock plot) reads them:
  a logger is for watching a run, not for its results.
- **Optional loggers are extras.** ``wandb`` and ``mlflow`` are not installed by the set-up; choosing one that is
  missing is a config error naming the install command, before any model loads (:func:`check_logger`).
- **Where each writes.** TensorBoard ``<run>/tb/`` (a resumed run purges the steps after its checkpoint, so no
  step is drawn twice), CSV ``<run>/csv/metrics.csv``, MLflow a file store ``<run>/mlruns`` (``mlflow ui
  --backend-store-uri <run>/mlruns``), W&B its own service (``WANDB_MODE=offline`` keeps it under ``<run>/wandb``),
  project ``arrol-pl``, the run named by ``name``.
- **Text samples** (``trainer.sample_texts``) go to TensorBoard's text tab and W&B; the CSV and MLflow loggers get
  the scalars only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

LOGGERS = ("tensorboard", "csv", "wandb", "mlflow")
"""The values of ``trainer.logger``."""

PACKAGES = {"tensorboard": "tensorboard", "csv": None, "wandb": "wandb", "mlflow": "mlflow"}
"""The package each logger needs beyond Lightning (None: none)."""


def check_logger(name: str) -> None:
    """ValueError naming the choices or the install command when ``name`` cannot log here."""
    if name not in LOGGERS:
        raise ValueError(f"trainer.logger={name!r}; choose one of {list(LOGGERS)}")
    package = PACKAGES[name]
    if package and importlib.util.find_spec(package) is None:
        raise ValueError(f"trainer.logger={name} needs the {package} package, which the set-up does not install: "
                         f"pip install {package} (or the package's extra, pip install 'arrol-pl[{package}]')")


def make_logger(name: str, out_dir: Path, run_name: str, resumed_step: int = 0) -> Any:
    """The Lightning logger ``name`` writing under ``out_dir`` (see the module docstring)."""
    check_logger(name)
    out_dir = Path(out_dir)
    if name == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(str(out_dir), name="tb", version="", purge_step=resumed_step)
    if name == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(str(out_dir), name="csv", version="")
    if name == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        return WandbLogger(project="arrol-pl", name=run_name, save_dir=str(out_dir))
    from lightning.pytorch.loggers import MLFlowLogger

    return MLFlowLogger(experiment_name="arrol-pl", run_name=run_name, tracking_uri=f"file:{out_dir / 'mlruns'}")


def log_text(logger: Any, tag: str, text: str, step: int) -> None:
    """``text`` in the logger's text view where it has one (TensorBoard, W&B); nothing otherwise."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_text(tag, text, step)
    elif isinstance(logger, WandbLogger):
        logger.log_text(key=tag, columns=["text"], data=[[text]], step=step)
