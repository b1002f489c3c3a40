"""The vLLM rollout backend: in-engine quality scoring at L_detect and pruning (paper §4.3).

Importing this package checks the installed vLLM against the versions :mod:`.adapter` supports, and
defaults ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the hooks need the engine core in this process; an
explicit other value is refused when an engine starts).
"""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from arrol_pl.engine.engine import ArrolEngine, ArrolLLMEngine, EngineConfig, GenerationResult, Rollout  # noqa: E402

__all__ = ["ArrolEngine", "ArrolLLMEngine", "EngineConfig", "GenerationResult", "Rollout"]
