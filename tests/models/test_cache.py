"""The user's model cache (arrol_pl.models.cache): where it is, an entry built once when two processes need it at
once (and published whole where both build it), a stopped build's temporary directory removed, a killed build's
removed at the next start, ``model.cache_dir`` overriding it for a real tiny policy's build, and a cache that cannot
be written refused in one line, before a run and while building."""

from __future__ import annotations

import errno
import multiprocessing
import os
import re
import socket
import time
from pathlib import Path

import pytest

from arrol_pl.models.cache import (
    STALE_SECONDS,
    CacheNotWritable,
    cache_entry,
    check_writable,
    default_cache_dir,
    publish,
    remove_stale,
    resolve_cache_dir,
)

AS_ROOT = os.geteuid() == 0
"""Root writes through a directory's mode bits: a read-only mode refuses nothing."""
ADVICE = "set model.cache_dir or $ARROL_CACHE to a writable directory with free space"


def test_the_default_cache_is_arrol_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ARROL_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "arrol-pl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "arrol-pl"
    monkeypatch.setenv("ARROL_CACHE", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert resolve_cache_dir(None) == tmp_path / "mine"
    assert resolve_cache_dir(str(tmp_path / "given")) == tmp_path / "given"  # model.cache_dir wins
    monkeypatch.setenv("ARROL_CACHE", "")  # set but empty: as unset
    assert default_cache_dir() == tmp_path / "xdg" / "arrol-pl"


def test_a_tiny_policy_goes_to_the_user_cache_unless_model_cache_dir_is_set(monkeypatch, tmp_path):
    from arrol_pl.train.config.model import ModelConfig, WarmStartConfig
    from arrol_pl.train.config.sections import DataConfig
    from arrol_pl.train.run.warmstart import prepare_tiny_policy

    monkeypatch.setenv("ARROL_CACHE", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)
    assert ModelConfig().cache_dir is None
    no_warm = WarmStartConfig(steps=0)
    built = prepare_tiny_policy(ModelConfig(warm_start=no_warm), DataConfig(), 16)
    assert built.parent == tmp_path / "user" and (built / "done").exists()
    given = prepare_tiny_policy(ModelConfig(cache_dir=str(tmp_path / "given"), warm_start=no_warm), DataConfig(), 16)
    assert given.parent == tmp_path / "given" and given.name == built.name
    assert not (tmp_path / "outputs").exists()  # nothing relative to the working directory
    assert sorted(p.name for p in (tmp_path / "user").iterdir() if p.name.startswith(".")) == []


def dead_pid() -> int:
    child = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    child.start()
    child.join()
    return child.pid


def test_stale_temporary_directories_are_removed_and_live_ones_kept(tmp_path):
    host = socket.gethostname()
    old = time.time() - STALE_SECONDS - 60
    made = {
        f".warm-{dead_pid()}@{host}-abcd1234": True,  # its owner is gone
        f".warm-{os.getpid()}@{host}-abcd1234": False,  # its owner runs (this process)
        ".qwen3-1@another-host-abcd1234": False,  # another host's, recent: cannot be checked
        ".tok-old12345": True,  # an earlier version's name, untouched for longer than STALE_SECONDS
        ".model-new12345": False,  # the same, recent
        ".vscode-server": False,  # not a build's, however old
        "warm-0123456789abcdef": False,  # a published entry
    }
    for name in made:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x")
    for name in (".tok-old12345", ".vscode-server", "warm-0123456789abcdef"):
        os.utime(tmp_path / name, (old, old))
    removed = remove_stale(tmp_path)
    assert sorted(p.name for p in removed) == sorted(n for n, stale in made.items() if stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, stale in made.items() if not stale)


def test_a_stopped_build_leaves_nothing(tmp_path):
    final = tmp_path / "warm-0123456789abcdef"
    with pytest.raises(KeyboardInterrupt):
        with cache_entry(final, marker="warm_start.json") as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="wrote no warm_start.json"):  # a build that forgot its marker
        with cache_entry(final, marker="warm_start.json") as tmp:
            (tmp / "model.safetensors").write_bytes(b"whole")
    assert list(tmp_path.iterdir()) == []


def build(final: Path, tag: str, inside, go, got) -> None:
    """Build ``final`` as ``tag``; ``inside`` is set once this process builds, which then waits for ``go``; ``got``
    says whether it had anything to build (False: another process published it while this one waited)."""
    with cache_entry(final) as tmp:
        got.value = tmp is not None
        if tmp is not None:
            inside.set()
            (tmp / "weights").write_text(tag * 10_000)
            assert go.wait(timeout=30)
            (tmp / "done").write_text(tag)


def test_a_second_build_of_an_entry_waits_for_the_first_and_builds_nothing(tmp_path):
    """Two processes that need one entry at once (two runs of one command, a sweep's jobs): the second waits while
    the first builds, then is handed the first's entry; nothing is left beside it."""
    ctx = multiprocessing.get_context("fork")
    final = tmp_path / "warm-0123456789abcdef"
    inside, go = ctx.Event(), ctx.Event()
    got = {tag: ctx.Value("b", 2) for tag in "ab"}
    first = ctx.Process(target=build, args=(final, "a", inside, go, got["a"]))
    first.start()
    assert inside.wait(timeout=30)
    second = ctx.Process(target=build, args=(final, "b", ctx.Event(), go, got["b"]))
    second.start()
    time.sleep(0.3)
    assert second.is_alive() and got["b"].value == 2, "the second build did not wait for the first"
    go.set()
    for p in (first, second):
        p.join(timeout=60)
    assert [p.exitcode for p in (first, second)] == [0, 0]
    assert (got["a"].value, got["b"].value) == (1, 0)
    assert [p.name for p in tmp_path.iterdir()] == [final.name]  # no temporary directory, no lock file
    assert (final / "done").read_text() == "a" and (final / "weights").read_text() == "a" * 10_000


def test_a_build_killed_midway_lets_the_waiting_one_build(tmp_path):
    """The lock dies with its holder: a build killed with SIGKILL lets the process waiting for it build the entry
    itself; its half-built directory goes at the next start (at the waiting build's own, if its parent had reaped
    it by then)."""
    ctx = multiprocessing.get_context("fork")
    final = tmp_path / "warm-0123456789abcdef"
    inside, go = ctx.Event(), ctx.Event()
    got = ctx.Value("b", 2)
    killed = ctx.Process(target=build, args=(final, "a", inside, ctx.Event(), ctx.Value("b", 2)))
    killed.start()
    assert inside.wait(timeout=30)
    waiting = ctx.Process(target=build, args=(final, "b", ctx.Event(), go, got))
    waiting.start()
    time.sleep(0.2)
    os.kill(killed.pid, 9)
    killed.join(timeout=30)
    go.set()
    waiting.join(timeout=60)
    assert waiting.exitcode == 0 and got.value == 1
    assert (final / "done").read_text() == "b"
    remove_stale(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


def test_of_two_builds_published_at_once_the_first_rename_wins(tmp_path):
    """Where the file system has no locks two processes build one entry: the first to publish keeps it whole and
    the other's copy is removed."""
    final = tmp_path / "qwen3-tiny-0123456789abcdef"
    builds = []
    for tag in "ab":
        tmp = tmp_path / f".qwen3-{tag}"
        tmp.mkdir()
        (tmp / "weights").write_text(tag * 10_000)
        (tmp / "done").write_text(tag)
        builds.append(tmp)
    for tmp in builds:
        assert publish(tmp, final) == final
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    assert (final / "done").read_text() == "a" and (final / "weights").read_text() == "a" * 10_000


def test_a_cache_under_a_file_is_refused_before_a_run_and_while_building(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    cache = tmp_path / "a-file" / "cache"
    with pytest.raises(CacheNotWritable) as err:
        check_writable(cache)
    assert str(err.value) == f"the model cache {cache} cannot be written (Not a directory: {cache.parent}): {ADVICE}"
    refused = rf"^the model cache {re.escape(str(cache))} cannot be written \(Not a directory: "
    with pytest.raises(CacheNotWritable, match=refused), cache_entry(cache / "tokenizer-0123456789abcdef"):
        pass
    check_writable(tmp_path / "missing" / "cache")  # made when first built, in a writable directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"], "the check wrote something"


@pytest.mark.skipif(AS_ROOT, reason="root writes into a directory whatever its mode")
def test_a_read_only_empty_cache_is_refused_and_one_holding_entries_is_left_to_the_run(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        with pytest.raises(
            CacheNotWritable,
            match=rf"^the model cache {re.escape(str(cache))} cannot be written "
            r"\(Permission denied: ",
        ):
            check_writable(cache)
        with pytest.raises(CacheNotWritable, match="Permission denied"):
            check_writable(cache / "below")
        with pytest.raises(CacheNotWritable, match="Permission denied"), cache_entry(cache / "tokenizer-0123abcd"):
            pass
        cache.chmod(0o755)
        (cache / "warm-0123456789abcdef").mkdir()
        cache.chmod(0o555)
        check_writable(cache)  # a shared cache may hold every entry a run needs
    finally:
        cache.chmod(0o755)


@pytest.mark.parametrize(
    "flag,free,reason",
    [(os.ST_RDONLY, 100, "Read-only file system"), (0, 0, "No space left on device")],
    ids=["read-only", "full"],
)
def test_a_read_only_or_full_file_system_is_refused_unless_the_cache_holds_entries(
    tmp_path, monkeypatch, flag, free, reason
):
    """A read-only mount or a full disk cannot be made here: the file system's own answer is replaced."""
    real = os.statvfs

    def statvfs(path):
        found = real(path)
        return os.statvfs_result((*found[:4], free, *found[5:8], found.f_flag | flag, found.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)
    for cache in (tmp_path / "cache", tmp_path / "missing" / "cache"):
        with pytest.raises(CacheNotWritable) as err:
            check_writable(cache)
        assert str(err.value) == f"the model cache {cache} cannot be written ({reason}): {ADVICE}"
    (tmp_path / "cache" / "smollm2-135m-instruct-0123456789abcdef").mkdir(parents=True)
    check_writable(tmp_path / "cache")


def test_a_build_the_disk_cannot_take_is_refused_naming_the_cache_and_leaves_nothing(tmp_path):
    final = tmp_path / "cache" / "qwen3-tiny-0123456789abcdef"
    with (
        pytest.raises(
            CacheNotWritable,
            match=rf"^the model cache {re.escape(str(final.parent))} cannot be written "
            r"\(No space left on device\): ",
        ),
        cache_entry(final) as tmp,
    ):
        (tmp / "weights").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert list((tmp_path / "cache").iterdir()) == []
    source = tmp_path / "source.gguf"
    with pytest.raises(PermissionError), cache_entry(final):  # a file the build reads, outside the cache
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(source))
