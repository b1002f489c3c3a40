"""The docs cannot point at code that moved: every repository path that README.md and docs/*.md cite in code spans
exists, every name cited beside a Python file (`core/survival.py` `solve_delta`) or after a module
(`arrol_pl.core.survival:solve_delta`) is defined there, and every list of the `arrol` commands names them all.

Read with ``ast`` and the file tree only: nothing is imported. Paths inside fenced blocks (commands and their output)
are not read; a span with a placeholder (``<run>``, ``*``, ``$``) or under ``outputs/`` is not a repository path."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

from arrol_pl.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXT = r"(?:py|md|yaml|yml|json|jsonl|sh|txt|toml|cfg|png|svg)"
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:\./)?((?:[\w.\-]+/)+[\w.\-]*|[\w\-]+\.py)(?:(?:::|:)([A-Za-z_][\w.]*))?$")
DOTTED = re.compile(r"^(arrol_pl(?:\.\w+)+):(\w+(?:\.\w+)?)$")
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?$")
TOPS = {
    "arrol_pl",
    "conf",
    "experiments",
    "tests",
    "scripts",
    "docs",
    "examples",
    "requirements",
    ".ci",
    "core",
    "engine",
    "train",
    "analysis",
    "cli",
    "models",
    "tasks",
}
"""A path without a file extension is read as the repository's when it starts with one of these (else it is a
metric, a hub id or a run's own folder)."""
EXTERNAL = {"examples/grpo_trainer/run_qwen3-8b.sh", "recipe/dapo/test_dapo_7b_math.sh"}
"""Paths in other projects' repositories (verl's), cited as such."""
NOT_PATHS = ("outputs/", "/", "http", ".venv", "mine/", "my_", "../", "~")


def code_text(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(), flags=re.S)


@lru_cache(maxsize=None)
def python_files() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in ROOT.rglob("*.py"):
        if not {".venv", "outputs", ".git"} & set(path.relative_to(ROOT).parts):
            found.setdefault(path.name, []).append(path)
    return found


def resolve(rel: str, page: Path) -> Path | None:
    """A cited path: from the repository's root, the package's (docs cite ``core/survival.py``) or the page's folder;
    a bare ``name.py`` anywhere in the repository."""
    if "/" not in rel:
        hits = python_files().get(rel)
        return hits[0] if hits else None
    for base in (ROOT, ROOT / "arrol_pl", page.parent):
        if (base / rel).exists():
            return base / rel
    return None


@lru_cache(maxsize=None)
def definitions(path: Path) -> frozenset[str]:
    """What ``path`` defines at its top level (functions, classes, assignments, imports) and ``Class.member``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(f"{node.name}.{member.name}")
                        names.add(member.name)  # a method cited beside its module
                    elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                        names.add(f"{node.name}.{member.target.id}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def citations(page: Path):
    """``(span, path or None, names cited beside it)`` for every repository path the page cites."""
    for line in code_text(page).splitlines():
        spans = list(SPAN.finditer(line))
        for i, m in enumerate(spans):
            span = m.group(1).strip()
            if any(c in span for c in "<>*{}$ =") or span.startswith(NOT_PATHS) or span in EXTERNAL:
                continue
            found = PATH.match(span)
            if not found:
                continue
            rel, name = found.groups()
            has_ext = re.search(rf"\.{EXT}$", rel) is not None
            if ("/" in rel and not has_ext and rel.split("/")[0] not in TOPS) or ("/" not in rel and not has_ext):
                continue
            path = resolve(rel, page)
            names = [name] if name else []
            j = i + 1
            while not name and path is not None and path.suffix == ".py" and j < len(spans):
                gap, cited = line[spans[j - 1].end() : spans[j].start()], spans[j].group(1)
                if (
                    gap not in (" ", ", ", " and ", " or ", " / ")
                    or not NAME.match(cited)
                    or re.search(rf"\.{EXT}$", cited)
                ):
                    break
                names.append(cited)
                j += 1
            yield span, path, names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cited_path_and_name_exists(page):
    missing, checked = [], 0
    for span, path, names in citations(page):
        checked += 1
        if path is None:
            missing.append(f"{span}: no such file or folder")
            continue
        missing += [
            f"{span} `{n}`: not defined there" for n in names if path.suffix == ".py" and n not in definitions(path)
        ]
    assert not missing, f"{page.name} cites what does not exist: {missing}"
    assert checked or page.name in ("results.md",), f"{page.name}: no path read (is the pattern still right?)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_module_function_cited_exists(page):
    missing = []
    for span in SPAN.findall(code_text(page)):
        found = DOTTED.match(span.strip())
        if not found:
            continue
        module, name = found.groups()
        base = ROOT.joinpath(*module.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if not path.exists():
            missing.append(f"{span}: no module {module}")
        elif name not in definitions(path):
            missing.append(f"{span}: {module} defines no {name}")
    assert not missing, f"{page.name}: {missing}"


def test_a_moved_file_or_renamed_function_is_caught(tmp_path):
    """The check itself: a page citing a path that is gone and a function that is not defined fails on both."""
    page = tmp_path / "page.md"
    page.write_text(
        "See `train/groups.py` and `core/survival.py` `solve_delta`, `no_such_rule`; and "
        "`core/survival.py` `anchored_survival`. ```\n`train/old.py` in a block\n```\n"
    )
    cited = list(citations(page))
    assert [span for span, _, _ in cited] == ["train/groups.py", "core/survival.py", "core/survival.py"]
    assert cited[0][1] is None
    path = ROOT / "arrol_pl" / "core" / "survival.py"
    assert cited[1][1:] == (path, ["solve_delta", "no_such_rule"]) and cited[2][1:] == (path, ["anchored_survival"])
    assert [n for n in cited[1][2] if n not in definitions(path)] == ["no_such_rule"]


COMMAND_LISTS = (ROOT / "README.md", ROOT / "docs" / "development.md", ROOT / "arrol_pl" / "cli" / "main.py")


def command_lists(text: str) -> list[tuple[set[str], str]]:
    """The paragraphs of ``text`` that name at least four of ``arrol``'s commands in code spans (``train`` or
    ``arrol train ...``): a list of them; each with the commands it names."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        spans = (" ".join(span.split()) for span in re.findall(r"`+([^`]+)`+", paragraph))
        named = {re.sub(r"^(?:arrol|python -m arrol_pl) ", "", span).split(" ")[0] for span in spans} & set(COMMANDS)
        if len(named) >= 4:
            out.append((named, paragraph.strip()))
    return out


@pytest.mark.parametrize("source", COMMAND_LISTS, ids=lambda p: p.name)
def test_every_list_of_the_commands_names_them_all(source):
    """Every list of the commands names each of :data:`~arrol_pl.cli.main.COMMANDS`."""
    lists = command_lists(source.read_text())
    assert lists, f"{source.name} no longer lists the commands"
    for named, paragraph in lists:
        assert named == set(COMMANDS), f"{source.name} leaves out {sorted(set(COMMANDS) - named)}: {paragraph[:200]}"


def test_a_list_that_leaves_a_command_out_is_found():
    listed = ", ".join(f"`{name}`" for name in COMMANDS if name != "grad-probe")
    ((named, _),) = command_lists(f"also `arrol\n  evaluate` and {listed}\n\nunrelated `train`")
    assert set(COMMANDS) - named == {"grad-probe"}
