"""The data an evaluation scores when told none: what the run that trained the policy held out, read from what the
run recorded (:func:`trained_data`), loaded as the run loaded it (:meth:`TrainedData.load`).

Decisions:
- **The run's held-out set, else its training problems, said so.** A run that defined a held-out set (a generated
  task's held-out split, whatever ``data.num_heldout`` it evaluated; ``data.heldout_name`` or
  ``data.heldout_path``) is scored on it, with the run's fields, split and options. A run that defined none is
  scored on its training problems (the guide's first run: one JSONL file, ``data.num_heldout: 0``), and the
  evaluation says so in its first line and in ``metrics.json``: a score on problems the policy trained on measures
  what it learned of them, not how it does on new ones. Scoring a task the run never saw, as a fixed default would,
  answers no question about the run.
- **Names and paths, never code.** The record gives an adapter's name, a file, a split, row fields and options,
  which load as they did in training; a reward function it names is never imported (:mod:`.trained_reward`).
- **Where the record is.** An export's own ``data_config.json`` (:data:`~arrol_pl.tasks.prompts.DATA_RECORD`,
  written beside the policy, so a moved or pushed export keeps it), else its run's ``summary.json`` one directory
  up (an export written before the record); a training checkpoint's own config. No record: the evaluation is
  refused naming ``datasets``, before any model loads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from arrol_pl.analysis.trained_reward import trained_config
from arrol_pl.tasks import registry
from arrol_pl.tasks.problem import ProblemSet
from arrol_pl.tasks.prompts import DATA_RECORD
from arrol_pl.train.config.loader import ConfigError, load_typed
from arrol_pl.train.config.sections import DataConfig

ALL = 10**9
"""A held-out size that keeps every problem of the source (``limit`` null)."""


@dataclasses.dataclass(frozen=True)
class TrainedData:
    """The data a run trained on and held out, as it recorded it, and which of the two an evaluation scores."""

    data: DataConfig
    heldout: bool
    """Whether the run defined a held-out set (scored), else its training problems are."""
    record: str
    """Where the record was read."""

    @property
    def name(self) -> str:
        """The adapter that reads the scored set (its dataset's name in the evaluation's tables)."""
        return registry.canonical_name((self.data.heldout_name if self.heldout else None) or self.data.name)

    def load(self, limit: int | None) -> ProblemSet:
        """The scored set, its first ``limit`` problems (None: all), read with the run's fields and options."""
        if self.heldout:
            return registry.load_heldout(dataclasses.replace(self.data, num_heldout=limit or ALL))
        loaded = registry.load_train(self.data)
        return dataclasses.replace(loaded, problems=loaded.problems[:limit] if limit else loaded.problems)

    def describe(self) -> str:
        """What is scored, for the evaluation's first line and ``metrics.json``: which set, its source (adapter,
        file, split) and where the run recorded it."""
        d = self.data
        path, split = (d.heldout_path, d.heldout_split) if self.heldout else (d.path, d.split)
        if self.heldout and registry.is_generated(self.name):
            path, split = None, "heldout"
        source = ", ".join([self.name, *([path] if path else []), *([f"split {split}"] if split else [])])
        which = (
            "the run's held-out set"
            if self.heldout
            else "the run's training problems (it held none out: these were trained on)"
        )
        return f"{which}: {source} (recorded in {self.record})"


def trained_data(checkpoint: Path) -> TrainedData:
    """The data of the run that trained ``checkpoint`` (an export directory or a training checkpoint; module
    docstring); ConfigError naming ``checkpoint`` and ``datasets`` when nothing records it."""
    record = checkpoint / DATA_RECORD
    if checkpoint.is_dir() and record.is_file():
        data, where = json.loads(record.read_text()), record
    else:
        data = trained_config(checkpoint).get("data")
        where = checkpoint if checkpoint.is_file() else checkpoint.parent / "summary.json"
    if not data:
        raise ConfigError(
            f"checkpoint={str(checkpoint)!r} records no data of its run (no {DATA_RECORD} in it, no "
            "summary.json beside it): name what to score, e.g. +datasets.arithmetic.split=heldout or "
            "+datasets.jsonl.path=<file>"
        )
    try:
        config: DataConfig = load_typed(data, DataConfig)
    except ConfigError as exc:
        raise ConfigError(
            f"checkpoint={str(checkpoint)!r}: its run's data ({where}): {exc}; name what to score with "
            "+datasets.<name>..."
        ) from None
    heldout = registry.is_generated(config.name) or config.heldout_name is not None or config.heldout_path is not None
    return TrainedData(config, heldout, str(where))
