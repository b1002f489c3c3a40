"""Fixtures of the packaging tests: a copy of what a build of the package reads, so that building or resolving it
leaves no build files (``build/``, ``*.egg-info``) in the checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "arrol_pl", "conf")
"""What the build reads."""


@pytest.fixture(scope="module")
def build_source(tmp_path_factory) -> Path:
    """A module's own copy of :data:`SOURCES`, the directory pip builds or resolves the package from."""
    copy = tmp_path_factory.mktemp("build") / "source"
    copy.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, copy / name)
    return copy
