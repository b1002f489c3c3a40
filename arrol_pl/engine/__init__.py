"""The rollout backend: in-engine quality scoring at L_detect and pruning (paper §4.3).

:mod:`.protocol` (the :class:`RolloutEngine` boundary and the rollout records) and :mod:`.tracking` (the
per-generation bookkeeping) and :class:`EngineConfig` import without vLLM; :class:`ArrolEngine` is
loaded on first use. Importing this package sets :data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV` unless set
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the hooks need the engine core in this process;
``VLLM_USE_V2_MODEL_RUNNER=0``: the model runner the hidden-state tap reads); an explicit other value is refused
when an engine starts.
"""

import os

from arrol_pl.engine.vllm_api import REQUIRED_ENV

for _key, _value in REQUIRED_ENV.items():
    os.environ.setdefault(_key, _value)

from arrol_pl.engine.config import EngineConfig  # noqa: E402
from arrol_pl.engine.protocol import GenerationResult, Rollout, RolloutEngine  # noqa: E402

__all__ = ["ArrolEngine", "EngineConfig", "GenerationResult", "Rollout", "RolloutEngine"]


def __getattr__(name: str):
    # The vLLM-backed engine loads on first use, so that the trainer and the analysis code can import the
    # records and the Protocol on machines (and in processes) without vLLM.
    if name == "ArrolEngine":
        from arrol_pl.engine.engine import ArrolEngine

        return ArrolEngine
    raise AttributeError(f"module 'arrol_pl.engine' has no attribute {name!r}")
