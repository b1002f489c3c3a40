"""The model cache: one directory per user where tokenizers, tiny policies, warm starts and converted pretrained
policies are built once and found by every later run, from any working directory.

Decisions:
- **Where.** ``model.cache_dir`` when set; otherwise ``$ARROL_CACHE``, else ``$XDG_CACHE_HOME/arrol-pl``, else
  ``~/.cache/arrol-pl`` (:func:`default_cache_dir`), as Hugging Face keeps one hub cache per user.
- **Entries are published whole.** Each entry is built in a temporary directory beside it (``.<kind>-<pid>@<host>-*``)
  and renamed into place (:func:`cache_entry`); when two processes build the same entry at once, the first rename
  wins and the other's copy is removed, so a reader never sees half of one. A build that fails or is stopped
  removes its temporary directory.
- **One process builds an entry; another that needs it waits.** A build holds a lock on the entry
  (:func:`build_lock`: ``.<entry>.lock`` beside it, while it builds): several runs started at once (a sweep's jobs,
  two ranks' launchers, runs of one command) build a warm start once, not once each. The lock goes when its holder
  ends, killed or not; on a file system without locks each builds, and the first rename wins.
- **Leftovers of a killed build are removed at the next start** (:func:`remove_stale`): a temporary directory whose
  owning process (on this host) is gone, or, when its owner cannot be checked (another host, an older name), one
  untouched for :data:`STALE_SECONDS`.
- **A cache that cannot take an entry says so in one line.** Before a run (:func:`check_writable`, which writes
  nothing): a path under a file, a read-only file system, no write permission or no free space, unless the cache
  already holds entries (a shared, read-only cache may hold every one a run needs). While building
  (:func:`cache_writes`): the same faults met by a write into the cache, a full disk included. Both raise
  :class:`CacheNotWritable`, naming the cache and the keys that move it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

logger = logging.getLogger(__name__)

STALE_SECONDS = 6 * 3600
"""Age after which a temporary directory whose owner cannot be checked is taken for a killed build's."""

KINDS = ("tokenizer", "qwen3", "warm", "smollm2")
"""The first word of each entry's name: its temporary directory is ``.<kind>-<pid>@<host>-<8 characters>``."""

_TEMP = re.compile(rf"^\.(?:{'|'.join((*KINDS, 'tok', 'model'))})-(?:(?P<pid>\d+)@(?P<host>.+)-)?[a-z0-9_]{{8}}$")
"""A build's temporary directory; ``.tok-``, ``.model-`` and names without an owner are earlier versions'."""


WRITE_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.ENOTDIR)
"""What an OSError says when the cache's file system refuses a new entry (read-only, full, over quota, no permission,
a path under a file)."""


class CacheNotWritable(RuntimeError):
    """The model cache ``cache`` cannot take a new entry; ``reason`` is the file system's word for it."""

    def __init__(self, cache: Path, reason: str) -> None:
        self.cache = cache
        super().__init__(
            f"the model cache {cache} cannot be written ({reason}): set model.cache_dir or $ARROL_CACHE "
            "to a writable directory with free space"
        )


def os_reason(exc: OSError) -> str:
    """An OSError in the file system's words, with the path it names: ``Not a directory: /data/a-file/cache``."""
    reason = exc.strerror or type(exc).__name__
    return f"{reason}: {exc.filename}" if exc.filename is not None else reason


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


def holds_entries(cache: Path) -> bool:
    """Whether ``cache`` holds a published entry (a directory named for one of :data:`KINDS`)."""
    return cache.is_dir() and any(p.is_dir() and p.name.split("-", 1)[0] in KINDS for p in cache.iterdir())


def check_writable(cache: Path) -> None:
    """Raise :class:`CacheNotWritable` when no entry could be built in ``cache`` (or, missing, in its nearest existing
    parent, where it would be made): not a directory, a read-only file system, no write permission, no free space;
    one that already holds entries passes (module docstring). Writes nothing."""
    cache = Path(cache).absolute()
    if holds_entries(cache):
        return
    where = next(p for p in (cache, *cache.parents) if p.exists())
    if not where.is_dir():
        raise CacheNotWritable(cache, f"{os.strerror(errno.ENOTDIR)}: {where}")
    space = os.statvfs(where)
    if space.f_flag & os.ST_RDONLY:
        raise CacheNotWritable(cache, os.strerror(errno.EROFS))
    if not os.access(where, os.W_OK | os.X_OK):
        raise CacheNotWritable(cache, f"{os.strerror(errno.EACCES)}: {where}")
    if space.f_bavail == 0:
        raise CacheNotWritable(cache, os.strerror(errno.ENOSPC))


@contextmanager
def cache_writes(cache: Path) -> Iterator[None]:
    """Inside, an OSError of :data:`WRITE_ERRNOS` about the cache (one naming a path in it or above it, or none, as
    a full disk's) is raised as :class:`CacheNotWritable`."""
    where = Path(cache).absolute()
    try:
        yield
    except OSError as exc:
        named = None if exc.filename is None else Path(os.fsdecode(exc.filename)).absolute()
        if exc.errno not in WRITE_ERRNOS or not (
            named is None or named.is_relative_to(where) or where.is_relative_to(named)
        ):
            raise
        raise CacheNotWritable(Path(cache), os_reason(exc)) from exc


def make_cache(cache: Path) -> None:
    """Create the cache directory ``cache`` if missing; :class:`CacheNotWritable` if it cannot be."""
    with cache_writes(cache):
        Path(cache).mkdir(parents=True, exist_ok=True)


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
def build_lock(final: Path) -> Iterator[None]:
    """Held while this process builds the entry ``final``: another process building it waits here (saying so in the
    log) until this one is done, and is then handed the published entry (:func:`cache_entry`). The lock file goes
    with the block; the kernel drops the lock of a process that dies. Where the file system has no locks, nothing
    waits."""
    path = final.parent / f".{final.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for the build of %s by another process", final)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        yield
    finally:
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:  # not a later builder's lock file
                os.unlink(path)
        except OSError:
            pass
        os.close(fd)


@contextmanager
def cache_entry(final: Path, marker: str = "done") -> Iterator[Path | None]:
    """A temporary directory to build the entry ``final`` in, published by :func:`publish` when the block ends and
    removed if it raises (an error, or a stop on a signal); stale temporary directories beside it go first. The
    block writes ``marker`` into it last: a published entry is complete when its marker exists. While another
    process builds ``final`` this one waits (:func:`build_lock`), and gets None when that build published it: the
    block then has nothing to build. A write the cache refuses, the block's included, raises
    :class:`CacheNotWritable` (:func:`cache_writes`)."""
    kind = final.name.split("-", 1)[0]
    if kind not in KINDS:
        raise ValueError(f"cache entry {final.name}: its name must start with one of {KINDS}")
    make_cache(final.parent)
    with cache_writes(final.parent), build_lock(final):
        if (final / marker).exists():
            yield None
            return
        remove_stale(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{os.getpid()}@{socket.gethostname()}-", dir=final.parent))
        try:
            yield tmp
            if not (tmp / marker).exists():
                raise RuntimeError(f"the build of {final} wrote no {marker}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        publish(tmp, final, marker)
