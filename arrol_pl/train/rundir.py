"""A run's directory: what in it a training run wrote, one run per directory, and the history file.

Decisions:
- **One run per directory.** A run refuses a directory that already holds another run's history, summary,
  checkpoints, TensorBoard events or export, before any model loads, naming the two ways on: resume that run, or
  pass a new directory. Resuming continues only from the directory's newest checkpoint: branching from an older
  one there would leave later, stale files beside it. Hydra's own ``.hydra/`` and log are not a run's; Hydra is
  told not to write ``.hydra/`` itself (``hydra.output_subdir: null``), so a refused run cannot overwrite another
  run's record: the script writes it (:func:`save_hydra_record`) once the directory is accepted.
- **The history file is the record.** ``history.jsonl`` holds one JSON row per finished step; whole-file writes go
  to a temporary file renamed over it, and a last line cut short by a crash is left out when read. A resumed run
  starts from the rows before its checkpoint's step, read from the file of the run that wrote the checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from arrol_pl.train.config_loader import ConfigError

logger = logging.getLogger(__name__)


STEP_CHECKPOINT = re.compile(r"step(\d+)\.ckpt")
"""The name of a step checkpoint (``step00042.ckpt``); the group is its step."""


def step_checkpoints(dirpath: Path) -> dict[int, Path]:
    """The step checkpoints in ``dirpath``, by step (empty if it does not exist)."""
    if not Path(dirpath).is_dir():
        return {}
    return {int(m.group(1)): p for p in Path(dirpath).iterdir() if (m := STEP_CHECKPOINT.fullmatch(p.name))}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as JSON lines, replacing ``path`` whole (a temporary file renamed over it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``history.jsonl``; a last line cut short by a crash mid-write is left out."""
    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}: line {i + 1} is not JSON") from None
            logger.warning("%s: its last line was cut short (a crash mid-write); left out", path)
    return rows


def run_files(out_dir: Path) -> list[str]:
    """What in ``out_dir`` a training run wrote: its history, summary, checkpoints, TensorBoard events, export
    (Hydra's ``.hydra/`` and log are not a run's)."""
    out_dir = Path(out_dir)
    found = [name for name in ("history.jsonl", "summary.json") if (out_dir / name).exists()]
    for folder, pattern in (("checkpoints", "*.ckpt"), ("tb", "events.out.tfevents.*"), ("export", "*")):
        if (out_dir / folder).is_dir() and any((out_dir / folder).glob(pattern)):
            found.append(f"{folder}/")
    return found


def check_output_dir(out_dir: Path, resume: str | None, ckpt: dict | None) -> None:
    """One run per directory (module docstring): refuse ``out_dir`` if it holds a run that ``resume`` (the path
    of ``ckpt``) does not continue from its newest checkpoint. Reads names only, writes nothing."""
    found = run_files(out_dir)
    if not found:
        return
    checkpoints = Path(out_dir) / "checkpoints"
    last = checkpoints / "last.ckpt"
    if resume is None or Path(resume).resolve().parent != checkpoints.resolve():
        way = f"resume it with trainer.resume={last}" if last.is_file() else "it has no checkpoint to resume"
        raise ConfigError(f"output directory {out_dir} already holds another run's files ({', '.join(found)}): {way}, "
                          "or pass a new directory (trainer.output_dir=<dir> or hydra.run.dir=<dir>)")
    step = int(ckpt["global_step"])
    later = [k for k in step_checkpoints(checkpoints) if k > step]
    if later:
        raise ConfigError(f"trainer.resume={resume}: {out_dir} holds this run's later checkpoint "
                          f"step{max(later):05d}.ckpt; continue the run with trainer.resume={last}, or branch from "
                          f"step {step} into a new directory (trainer.output_dir=<dir> or hydra.run.dir=<dir>)")


def history_before(checkpoint: str | Path, ckpt: dict) -> list[dict[str, float]]:
    """The history rows of the steps ``ckpt`` (read from ``checkpoint``) holds, ``step`` < its ``global_step``,
    unique and in order: from the ``history.jsonl`` of the run that wrote it (the directory above its
    ``checkpoints/``), or from the checkpoint itself if it predates the history file. Missing rows are logged:
    the summary's figures then cover the rows there are. A file broken before its last line: ConfigError."""
    step = int(ckpt["global_step"])
    source = Path(checkpoint).resolve().parent.parent / "history.jsonl"
    rows = ckpt["arrol"].get("history")
    if rows is None and source.is_file():
        try:
            rows = read_rows(source)
        except ValueError as exc:
            raise ConfigError(f"trainer.resume={checkpoint}: {exc}") from None
    by_step = {int(r["step"]): r for r in rows or [] if r["step"] < step}
    kept = [dict(by_step[k]) for k in sorted(by_step)]
    if len(kept) < step:
        logger.warning("trainer.resume=%s: %d of the %d steps before it have a history row (%s); the summary "
                       "covers those", checkpoint, len(kept), step, source if source.is_file() else f"no {source}")
    return kept


def only_hydra(path: Path) -> bool:
    """Whether ``path`` is a directory holding nothing but what Hydra writes before a job starts: its ``.hydra/``,
    its log, a sweep's ``multirun.yaml`` (or nothing)."""
    return path.is_dir() and all(p.name in (".hydra", "multirun.yaml") or p.suffix == ".log" for p in path.iterdir())


def remove_if_only_hydra(run_dir: Path, existed: Path | None = None) -> None:
    """Hydra creates the run directory (its ``.hydra/`` and log) before a script checks its config: a refused
    config leaves nothing behind (a directory holding anything else is left as it is). ``existed``: the deepest
    directory of the run directory's path that existed before the command started; the parents below it that hold
    nothing but Hydra's files (an ``outputs/runs/`` that Hydra created, a sweep's directory) go too."""
    run_dir = Path(run_dir).absolute()
    if only_hydra(run_dir):
        shutil.rmtree(run_dir)
    if existed is None:
        return
    existed = Path(existed).absolute()
    for parent in run_dir.parents:
        if existed not in parent.parents or not only_hydra(parent):
            break
        shutil.rmtree(parent)


def save_hydra_record(run_dir: Path, task_cfg: Any, hydra_cfg: Any, overrides: list[str]) -> None:
    """Hydra's record of an invocation in ``run_dir/.hydra/``, as Hydra writes it (``config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``), written by the script once the directory is accepted (module docstring)."""
    from omegaconf import OmegaConf

    record = Path(run_dir) / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    for name, value in (("config.yaml", task_cfg), ("hydra.yaml", {"hydra": hydra_cfg}),
                        ("overrides.yaml", list(overrides))):
        OmegaConf.save(OmegaConf.create(value) if not OmegaConf.is_config(value) else value, record / name)
