"""Checkpoints that survive faults: atomic writes, safe reads, and checks before any model loads.

Decisions:
- **Atomic writes.** A checkpoint is ``torch.save``d into a temporary file beside its target, flushed and
  fsynced, then renamed over it (``os.replace``). A reader sees the old file or the whole new one, never
  a prefix, whether the writer is killed (``kill -9``) or the disk fills up. A failed write removes the
  temporary file and raises :class:`~arrol_pl.train.records.rundir.RecordWriteError` naming the target, the file
  system's reason (``No space left on device``, not torch's ``unexpected pos``) and the last good checkpoint.
- **Plain contents, safe reads.** Everything the module adds (calibrator, replay window, head optimizer,
  generator state, history, the run's config as a dict) is tensors and built-in types, as is Lightning's
  own part, so every read uses ``torch.load(weights_only=True)``: a checkpoint from someone else cannot
  run code when it is loaded. Tensors' contents are not validated beyond their types.
- **Checked before any model loads.** :func:`read_checkpoint` fails in one line naming the key and the
  file for a missing, truncated or foreign file (it memory-maps the archive, so a multi-GB checkpoint
  costs no full read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.records.rundir import RecordWriteError

REQUIRED_ENTRIES = {
    "state_dict": "the model weights",
    "optimizer_states": "the policy optimizer",
    "arrol": "the calibrator, replay window, head optimizer and the training clock",
    "PromptDataModule": "the prompt stream's position",
}
"""What a training checkpoint must hold to resume exactly (and what each entry is, for the message)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO with temporary-file-and-rename writes and ``weights_only`` reads."""

    def __init__(self, last_good: Path | None = None) -> None:
        super().__init__()
        self.last_good = last_good
        """The newest checkpoint known to be complete (the resumed one until this run writes its own)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, Exception):
                raise RecordWriteError("checkpoint", path, exc, self.last_good) from exc
            raise  # KeyboardInterrupt / SystemExit mid-write: the target is untouched
        self.last_good = path

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        if weights_only is False:
            raise ValueError("arrol-pl checkpoints are read with weights_only=True only")
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)


def read_checkpoint(
    path: str | os.PathLike, key: str = "trainer.resume", required: dict[str, str] | None = None
) -> dict:
    """Load ``path`` safely (``weights_only=True``, memory-mapped) or fail in one line naming ``key``.

    ``required`` maps entries the checkpoint must hold to what they are (default: a resumable training
    checkpoint, :data:`REQUIRED_ENTRIES`).
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}={str(path)!r}: no such file")
    try:
        ckpt = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # truncated archive, unsafe pickle, not a torch file: all mean "cannot use it"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0]
        raise ConfigError(
            f"{key}={str(path)!r} cannot be read, truncated or not a safe torch checkpoint ({reason})"
        ) from None
    if not isinstance(ckpt, dict):
        raise ConfigError(f"{key}={str(path)!r} holds a {type(ckpt).__name__}, not a training checkpoint")
    missing = [
        f"{name!r} ({what})"
        for name, what in (REQUIRED_ENTRIES if required is None else required).items()
        if name not in ckpt
    ]
    if missing:
        raise ConfigError(f"{key}={str(path)!r} is not a resumable arrol-pl checkpoint: it lacks {', '.join(missing)}")
    return ckpt
