"""The package's shape stays readable: no module over :data:`MAX_LINES` lines, the Lightning module thin, ``train/``
grouped into sub-packages by job, each saying its job in its docstring."""

from __future__ import annotations

import ast
from pathlib import Path

import arrol_pl

ROOT = Path(arrol_pl.__file__).resolve().parent
MAX_LINES = 400
"""Lines of a module as `ruff format` writes it (tests/test_lint.py), so the limit cannot be met by widening lines."""
MODULE_MAX_LINES = 250
"""The LightningModule (``train/step/module.py``) orchestrates only."""
TRAIN_TOP_LEVEL_MAX = 10


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): line_count(p) for p in ROOT.rglob("*.py") if line_count(p) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_the_lightning_module_stays_thin():
    assert line_count(ROOT / "train" / "step" / "module.py") <= MODULE_MAX_LINES


def test_train_is_grouped_into_documented_sub_packages():
    top = [p for p in (ROOT / "train").iterdir() if p.name != "__pycache__"]
    assert len(top) <= TRAIN_TOP_LEVEL_MAX, sorted(p.name for p in top)
    assert not [p.name for p in top if p.is_file() and p.name != "__init__.py"], "train/'s modules live in sub-packages"
    for package in (p for p in top if p.is_dir()):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) == 1, f"train/{package.name}/__init__.py says its job in one line"
