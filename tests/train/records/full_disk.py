"""``python full_disk.py FILE NTH [overrides]``: ``experiments/run.py [overrides]`` in a process whose disk fills
while it writes ``FILE`` (``last.ckpt`` or ``history.jsonl``) for the ``NTH`` time: that write and every later one of
the file fail as the kernel fails them (``OSError`` ENOSPC) once :data:`ROOM` bytes of it are written. A checkpoint is
written through a temporary file beside it (``.last.ckpt.<pid>.tmp``), which counts as the file.

With ``$FULL_DISK_HOLD`` set, the first failing write creates that file and waits until ``$FULL_DISK_HOLD.go``
exists before it fails, so a test can send signals while the run is inside the write (inside ``torch.save`` for a
checkpoint).

The run's own code is unchanged: the ``open`` of the two modules that write these files is replaced in this process
(:mod:`arrol_pl.train.records.checkpoint`, :mod:`arrol_pl.train.run.callbacks`), as a full disk cannot be made here.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys
import time
from pathlib import Path

from arrol_pl.cli.train import main
from arrol_pl.train.records import checkpoint
from arrol_pl.train.run import callbacks

ROOM = 1024
"""Bytes of a failing write that reach the disk before it is full."""


class FullDisk(io.FileIO):
    """A file on a disk that holds :data:`ROOM` more bytes."""

    room = ROOM
    held = False

    def write(self, data) -> int:
        self.room -= len(data)
        if self.room < 0:
            hold()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def hold() -> None:
    marker = os.environ.get("FULL_DISK_HOLD")
    if marker is None or FullDisk.held:
        return
    FullDisk.held = True
    Path(marker).touch()
    while not Path(f"{marker}.go").exists():
        time.sleep(0.01)


class Writes:
    """The ``open`` of a module whose writes of ``name`` fail from the ``nth`` on."""

    def __init__(self, name: str, nth: int) -> None:
        self.name, self.nth, self.count = name, nth, 0

    def __call__(self, file, mode: str = "r", *args, **kwargs):
        name = Path(file).name
        if "r" in mode or not (name == self.name or name.startswith(f".{self.name}.")):
            return builtins.open(file, mode, *args, **kwargs)
        self.count += 1
        if self.count < self.nth:
            return builtins.open(file, mode, *args, **kwargs)
        raw = FullDisk(file, mode.replace("t", "").replace("b", ""))
        return raw if "b" in mode else io.TextIOWrapper(io.BufferedWriter(raw))


if __name__ == "__main__":
    writes = Writes(sys.argv[1], int(sys.argv[2]))
    checkpoint.open = callbacks.open = writes
    sys.exit(main(sys.argv[3:], prog="python experiments/run.py"))
