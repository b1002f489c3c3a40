"""No import circles inside ``arrol_pl``, and no import from a layer above its own (:data:`LAYERS`): the package's
modules form a layered graph.

Every module under ``arrol_pl/`` is parsed with :mod:`ast` (nothing is imported), and each ``arrol_pl.*``
import becomes an edge, wherever it is written: at module level, inside a function, or under
``if TYPE_CHECKING:`` (a circle that only type checkers see is still a circle in the design).

How an import becomes an edge:

- relative imports are resolved against the importing module's package (a package's ``__init__`` is its
  own package);
- ``import arrol_pl.a.b`` is an edge to ``arrol_pl.a.b`` (a module, or a package's ``__init__``);
- ``from arrol_pl.a import b`` is an edge to ``arrol_pl.a.b`` when ``b`` is a submodule, else to ``arrol_pl.a``;
- the parent packages that Python runs on the way to a module are not edges of their own, and an import
  from a module into the ``__init__`` of a package that contains it is left out: a package's ``__init__``
  re-exports its submodules, so such an edge would close a circle (package → submodule → package) that says
  nothing about how the modules are layered.

A strongly connected component of more than one module is a circle; the test fails naming each one.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import arrol_pl

ROOT = Path(arrol_pl.__file__).resolve().parent
PACKAGE = "arrol_pl"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    package = name if _is_package(path) else name.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``arrol_pl`` modules that module ``name`` imports anywhere in its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(name, path, node)
            if source is None:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in modules else source)
    edges = set()
    for target in found:
        if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
            continue
        assert target in modules, f"{name} imports {target}, which is not a module of the package"
        if target == name or name.startswith(target + "."):
            continue  # itself, or an enclosing package's __init__ (see the module docstring)
        edges.add(target)
    return edges


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Each module of the package → the package's modules it imports: parsed once for the module's tests, which
    only read it."""
    modules = _module_names()
    return {name: _targets(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    links = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return f"{{{', '.join(component)}}}: " + "; ".join(links)


def test_circle_finder_finds_a_circle_and_skips_a_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert len(graph) > 100
    assert "arrol_pl.core.metrics" in graph["arrol_pl.core.simulation"]  # relative: from .metrics import ...
    assert "arrol_pl.engine.engine" in graph["arrol_pl.engine.bare"]  # under if TYPE_CHECKING:
    assert "arrol_pl.engine.engine" in graph["arrol_pl.engine"]  # inside a function (the lazy export)
    assert "arrol_pl.engine" in graph["arrol_pl.cli.head_quality"]  # import of a package: its __init__
    assert "arrol_pl.engine.adapter" in graph["arrol_pl.engine.bare"]  # from a package import a submodule


def test_no_import_circles():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles in arrol_pl:\n" + "\n".join(_describe(c, graph) for c in found)


LAYERS = (
    ("core",),
    ("engine", "models", "tasks"),
    ("train.config",),
    ("train.memory",),
    ("train.policy", "train.records"),
    ("train.step",),
    ("train.run",),
    ("analysis",),
    ("cli",),
    ("__main__",),
)
"""The package's layers, lowest first. A module imports from its own unit and from units of lower layers only:
never from a layer above, and never from another unit of its own layer (peers stay independent)."""

DOC_ONLY = ("arrol_pl", "arrol_pl.train")
"""Packages whose ``__init__`` is a docstring, in no layer: they import nothing."""


def unit_of(module: str) -> str:
    """The layer unit of ``module``: ``train.<sub-package>`` inside ``arrol_pl.train``, else the top-level name."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if parts[0] == "train" else parts[0]


def layer_of(unit: str) -> int:
    for level, units in enumerate(LAYERS):
        if unit in units:
            return level
    raise AssertionError(f"{unit} is in no layer of LAYERS: place it there")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``graph`` that goes to a layer above its module's, or sideways to a peer unit."""
    found = []
    for module, targets in sorted(graph.items()):
        if module in DOC_ONLY:
            found += [f"{module} -> {t} (a docstring-only package imports nothing)" for t in sorted(targets)]
            continue
        unit = unit_of(module)
        for target in sorted(targets):
            other = unit_of(target)
            if other != unit and layer_of(other) >= layer_of(unit):
                found.append(f"{module} ({unit}) -> {target} ({other})")
    return found


def test_layer_check_finds_an_upward_and_a_sideways_import():
    graph = {
        "arrol_pl.core.a": {"arrol_pl.train.step.module"},
        "arrol_pl.engine.x": {"arrol_pl.tasks.y"},
        "arrol_pl.train.run.build": {"arrol_pl.train.step.module", "arrol_pl.core.a"},
    }
    assert upward_imports(graph) == [
        "arrol_pl.core.a (core) -> arrol_pl.train.step.module (train.step)",
        "arrol_pl.engine.x (engine) -> arrol_pl.tasks.y (tasks)",
    ]


def test_every_module_is_in_a_layer():
    for module in import_graph():
        if module not in DOC_ONLY:
            layer_of(unit_of(module))


def test_no_module_imports_from_a_layer_above_its_own():
    found = upward_imports(import_graph())
    assert not found, "imports against the layers (LAYERS, lowest first):\n" + "\n".join(found)
