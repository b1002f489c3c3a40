"""The code is as `ruff format` writes it and `ruff check` finds nothing ([tool.ruff] in pyproject.toml: 120 columns,
pycodestyle and pyflakes), so the module line limit (tests/test_layout.py) cannot be met by widening lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.lint


def ruff(*args: str) -> subprocess.CompletedProcess:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.fail("ruff is not installed: it is in requirements/cpu.txt and gpu.txt (`make setup` installs it)")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_finds_nothing():
    result = ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, f"`ruff check .` (fix with `ruff check --fix`, rewrap the rest):\n{result.stdout}"


def test_the_code_is_as_ruff_formats_it():
    result = ruff("format", "--no-cache", "--check", ".")
    assert result.returncode == 0, f"`ruff format .` would change:\n{result.stdout}"
