"""How to start the rollout engine: one dataclass for the trainer's ``engine:`` config group (its Hydra
schema), the evaluation and the benchmarks, on CPU and GPU. Importable without vLLM, so a bad value
fails before any model loads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ENGINE_DTYPES = ("float32", "bfloat16", "float16", "auto")

PLATFORM_DEFAULTS: dict[str, dict[str, object]] = {
    "cpu": {"dtype": "float32", "enforce_eager": True, "block_size": 32},
    "cuda": {"dtype": "bfloat16", "enforce_eager": False},
}
"""What a null ``engine.dtype`` / ``engine.enforce_eager`` / ``engine.block_size`` becomes on each platform
(:meth:`EngineConfig.for_platform`; a null block size on CUDA stays vLLM's, 16)."""
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


@dataclass
class EngineConfig:
    """The vLLM rollout engine's own settings (the trainer's ``engine:`` group, the evaluation's and the probe's).
    What the engine runs and for whom (the model, the seed, the quality head's input and width, the log-probs it
    returns, a training world to join) is the caller's: :class:`~arrol_pl.engine.engine.ArrolEngine`'s arguments,
    which a training run takes from ``model.*``, ``trainer.seed`` and ``head.*``."""

    detect_length: int = 12
    """L_detect: generated length at which rollouts are scored and pruned (< algo.max_response_tokens); the paper's
    512 of 8192-token responses, here a quarter of the default's 48."""
    dtype: str | None = None
    """float32 | bfloat16 | float16 | auto (the checkpoint's); null: the platform's default (:data:`PLATFORM_DEFAULTS`:
    float32 on CPU, exact parity with the trainer's float32 policy; bfloat16 on CUDA, as verl and TRL serve)."""
    max_model_len: int | None = None
    """Context length, prompt + response tokens; None: the model's own (a training run uses the longest
    prompt + algo.max_response_tokens, rounded up, within the model's positions). A training prompt that leaves no
    room for the response in it is skipped at load, counted as a bad row (too_long)."""
    enforce_eager: bool | None = None
    """Skip torch.compile and CUDA graphs; null: the platform's default (:data:`PLATFORM_DEFAULTS`: eager on CPU,
    where compiling takes ~22 s of start-up against ~3 s and gains little; compiled, with CUDA graphs, on CUDA, where
    eager decoding is slower). Eager means eager throughout: the ops vLLM compiles whatever this says (the sampler's
    log-prob gather) run as plain PyTorch too, which saves seconds at every start on CPU. The hidden-state tap reads
    rows vLLM computes in Python after the graph replays, so it works either way."""
    enable_prefix_caching: bool = True
    """Share prompt KV across the G rollouts of a group (and a continued rollout's prefix, with ``detect_first``)."""
    block_size: int | None = None
    """Tokens per KV block (vLLM's ``block_size``); null: the platform's (:data:`PLATFORM_DEFAULTS`: 32 on CPU, the
    smallest its attention takes (multiples of 32); vLLM's 16 on CUDA). Prefix caching shares whole blocks only: a
    group's G rollouts share their prompt's whole blocks, and with ``detect_first`` a continued survivor computes
    again only its prompt and first L_detect tokens past the last whole block. vLLM's own CPU default, 128, computes
    a short prompt again whole and made detect-first lose on CPU; decoding itself took as long at 32 as at 128
    (docs/studies.md#the-engine-benchmark)."""
    detect_first: bool | None = None
    """While pruning is active and the rollouts outnumber the slots (B×G > ``max_num_seqs``): every rollout first
    runs to L_detect alone, and only the survivors are then continued, so rollouts that will be decided never wait
    behind survivors for a slot. Off, or with a slot for every rollout: one request per rollout, pruned rollouts
    aborted as they are decided. Null: whichever the engine's step cost, measured once on its first generation,
    models faster for the generation's shape (detect-first saves steps and computes each survivor's prompt again
    past its cached blocks). Sampling that depends on the text so far (penalties, ``min_tokens``, stop strings
    longer than one character) always runs one request per rollout."""
    max_num_seqs: int = 256
    """Most rollouts decoded at once; fewer than B×G models KV-memory-bound concurrency (long responses)."""
    max_num_batched_tokens: int | None = None
    """Token budget per step (vLLM's default when None)."""
    cpu_kv_cache_gib: int = 1
    """CPU only: KV cache size in GiB (sets ``VLLM_CPU_KVCACHE_SPACE`` unless already set)."""
    gpu_memory_utilization: float = 0.4
    """GPU only: fraction of device memory vLLM may take (the rest trains)."""
    enable_sleep_mode: bool = False
    """GPU only: allow the engine's ``sleep`` / ``wake_up`` to free memory for training."""

    def for_platform(self, platform: str) -> "EngineConfig":
        """A copy with every null setting replaced by ``platform``'s default (``"cpu"`` or ``"cuda"``)."""
        if platform == "cpu" and self.block_size is not None and self.block_size % 32:
            raise ValueError(f"engine.block_size={self.block_size}: vLLM's CPU attention takes multiples of 32")
        defaults = PLATFORM_DEFAULTS[platform]
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"dtype={self.dtype!r}; choose one of {list(ENGINE_DTYPES)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2 or null, got {self.max_model_len}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.cpu_kv_cache_gib < 1:
            raise ValueError(f"cpu_kv_cache_gib must be an integer >= 1, got {self.cpu_kv_cache_gib}")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 or null, got {self.block_size}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")


def check_logprobs_mode(mode: str) -> None:
    """``mode`` is one of vLLM's :data:`LOGPROBS_MODES` (ValueError naming it otherwise)."""
    if mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode={mode!r}; choose one of {list(LOGPROBS_MODES)}")
