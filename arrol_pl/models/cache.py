"""The model cache: one directory per user where tokenizers, tiny policies, warm starts and converted pretrained
policies are built once and found by every later run, from any working directory.

Decisions:
- **Where.** ``model.cache_dir`` when set; otherwise ``$ARROL_CACHE``, else ``$XDG_CACHE_HOME/arrol-pl``, else
  ``~/.cache/arrol-pl`` (:func:`default_cache_dir`), as Hugging Face keeps one hub cache per user.
- **Entries are published whole.** Each entry is built in a temporary directory beside it (``.<kind>-<pid>@<host>-*``)
  and renamed into place (:func:`cache_entry`); when two processes build the same entry at once, the first rename
  wins and the other's copy is removed, so a reader never sees half of one. A build that fails or is stopped
  removes its temporary directory.
- **Leftovers of a killed build are removed at the next start** (:func:`remove_stale`): a temporary directory whose
  owning process (on this host) is gone, or, when its owner cannot be checked (another host, an older name), one
  untouched for :data:`STALE_SECONDS`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

STALE_SECONDS = 6 * 3600
"""Age after which a temporary directory whose owner cannot be checked is taken for a killed build's."""

KINDS = ("tokenizer", "qwen3", "warm", "smollm2")
"""The first word of each entry's name: its temporary directory is ``.<kind>-<pid>@<host>-<8 characters>``."""

_TEMP = re.compile(rf"^\.(?:{'|'.join((*KINDS, 'tok', 'model'))})-(?:(?P<pid>\d+)@(?P<host>.+)-)?[a-z0-9_]{{8}}$")
"""A build's temporary directory; ``.tok-``, ``.model-`` and names without an owner are earlier versions'."""


def default_cache_dir() -> Path:
    """The user's model cache: ``$ARROL_CACHE``, else ``$XDG_CACHE_HOME/arrol-pl``, else ``~/.cache/arrol-pl``."""
    if os.environ.get("ARROL_CACHE"):
        return Path(os.environ["ARROL_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "arrol-pl"
    return Path.home() / ".cache" / "arrol-pl"


def resolve_cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    """``cache_dir`` when given (``model.cache_dir``), else :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def process_alive(pid: int) -> bool:
    """Whether a process of this host with ``pid`` still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def is_stale(path: Path, now: float | None = None) -> bool:
    """Whether ``path``, a build's temporary directory, was left by a build that no longer runs."""
    match = _TEMP.match(path.name)
    if match is None:
        return False
    if match["pid"] is not None and match["host"] == socket.gethostname():
        return not process_alive(int(match["pid"]))
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:  # its owner published or removed it meanwhile
        return False
    return age > STALE_SECONDS


def remove_stale(cache: Path) -> list[Path]:
    """Remove the temporary directories in ``cache`` that killed builds left behind; returns them."""
    removed = [p for p in cache.glob(".*-*") if p.is_dir() and is_stale(p)] if cache.is_dir() else []
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def publish(tmp: Path, final: Path, marker: str = "done") -> Path:
    """Rename the finished build ``tmp`` to ``final``; if another process published ``final`` first (its ``marker``
    file exists), keep theirs and remove ``tmp``."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / marker).exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextmanager
def cache_entry(final: Path, marker: str = "done") -> Iterator[Path]:
    """A temporary directory to build the entry ``final`` in, published by :func:`publish` when the block ends and
    removed if it raises (an error, or a stop on a signal); stale temporary directories beside it go first. The
    block writes ``marker`` into it last: a published entry is complete when its marker exists."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final.parent)
    kind = final.name.split("-", 1)[0]
    if kind not in KINDS:
        raise ValueError(f"cache entry {final.name}: its name must start with one of {KINDS}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{os.getpid()}@{socket.gethostname()}-", dir=final.parent))
    try:
        yield tmp
        if not (tmp / marker).exists():
            raise RuntimeError(f"the build of {final} wrote no {marker}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish(tmp, final, marker)
