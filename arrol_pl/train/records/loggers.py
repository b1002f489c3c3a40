"""The run's metrics loggers (``trainer.logger``): TensorBoard by default, or the CSV, Weights & Biases or MLflow
logger, each Lightning's own, or several of them at once (``trainer.logger=[tensorboard,csv]``).

Decisions:
- **The history file is the record whatever the logger.** ``history.jsonl`` and ``summary.json`` are written the
  same way with every logger, and every script here (the summary, sweep tables, the wall-clock plot) reads them:
  a logger is for watching a run, not for its results.
- **Optional loggers are extras.** ``wandb`` and ``mlflow`` are not installed by the set-up; choosing one that is
  missing is a config error naming the install command, before any model loads (:func:`check_logger`).
- **Where each writes.** TensorBoard ``<run>/tb/`` (a resumed run purges the steps after its checkpoint, so no
  step is drawn twice), CSV ``<run>/csv/metrics.csv``, MLflow a file store ``<run>/mlruns`` (``mlflow ui
  --backend-store-uri <run>/mlruns``), W&B its own service (``WANDB_MODE=offline`` keeps it under ``<run>/wandb``),
  in ``trainer.wandb.project`` (``arrol-pl``) of ``trainer.wandb.entity`` with ``trainer.wandb.tags``, the run
  named by ``name``.
- **The whole config in every logger.** Each logger gets the run's resolved configuration as its hyperparameters
  (:func:`log_hyperparams`): ``hparams.yaml`` beside TensorBoard's events and the CSV file, W&B's run config,
  MLflow's params; TensorBoard's HParams tab shows them against ``heldout/accuracy`` and ``reward/accuracy``
  (no placeholder ``hp_metric`` is logged).
- **Text samples** (``trainer.sample_texts``) go to TensorBoard's text tab and W&B; the CSV and MLflow loggers get
  the scalars only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from arrol_pl.train.config.loggers import WandbConfig, check_logger, logger_names

HPARAM_METRICS = ("heldout/accuracy", "reward/accuracy")
"""The scalars TensorBoard's HParams tab sets the configuration against."""


def make_loggers(
    value: str | Sequence[str], out_dir: Path, run_name: str, resumed_step: int = 0, wandb: WandbConfig | None = None
) -> list[Any]:
    """The Lightning loggers ``value`` names (a name or a list), each writing under ``out_dir``."""
    check_logger(value)
    return [make_logger(name, out_dir, run_name, resumed_step, wandb) for name in logger_names(value)]


def make_logger(
    name: str, out_dir: Path, run_name: str, resumed_step: int = 0, wandb: WandbConfig | None = None
) -> Any:
    """The Lightning logger ``name`` writing under ``out_dir`` (see the module docstring)."""
    check_logger(name)
    out_dir = Path(out_dir)
    if name == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(str(out_dir), name="tb", version="", purge_step=resumed_step, default_hp_metric=False)
    if name == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(str(out_dir), name="csv", version="")
    if name == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        w = wandb or WandbConfig()
        return WandbLogger(project=w.project, entity=w.entity, tags=list(w.tags), name=run_name, save_dir=str(out_dir))
    from lightning.pytorch.loggers import MLFlowLogger

    return MLFlowLogger(experiment_name="arrol-pl", run_name=run_name, tracking_uri=f"file:{out_dir / 'mlruns'}")


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested config as ``{"algo/group_size": 8, ...}``, every value a bool, number or string (lists and None as
    their text): what TensorBoard's hyperparameters take."""
    out: dict[str, bool | int | float | str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat_params(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def log_hyperparams(loggers: Sequence[Any], config: dict[str, Any]) -> None:
    """The run's resolved configuration (built-in types, nested by section) as every logger's hyperparameters; rank 0
    writes (Lightning's loggers write on rank 0 only)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in loggers:
        logger.log_hyperparams(config)
        if isinstance(logger, TensorBoardLogger):
            tensorboard_hparams(logger, config)


def tensorboard_hparams(logger: Any, config: dict[str, Any]) -> None:
    """TensorBoard's HParams record of ``config`` against :data:`HPARAM_METRICS`, whose values are the run's own
    scalars (Lightning's logger would add a placeholder ``hp_metric`` scalar to have a metric to show)."""
    from lightning.pytorch.utilities import rank_zero_only
    from torch.utils.tensorboard.summary import hparams

    if rank_zero_only.rank != 0:
        return
    writer = logger.experiment._get_file_writer()
    for summary in hparams(flat_params(config), dict.fromkeys(HPARAM_METRICS, 0.0)):
        writer.add_summary(summary)


def log_text(logger: Any, tag: str, text: str, step: int) -> None:
    """``text`` in the logger's text view where it has one (TensorBoard, W&B); nothing otherwise."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_text(tag, text, step)
    elif isinstance(logger, WandbLogger):
        logger.log_text(key=tag, columns=["text"], data=[[text]], step=step)
