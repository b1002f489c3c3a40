"""How to start the rollout engine: one dataclass for the trainer's ``engine:`` config group (its Hydra
schema), the evaluation and the benchmarks, on CPU and GPU. Importable without vLLM, so a bad value
fails before any model loads."""

from __future__ import annotations

from dataclasses import dataclass

from arrol_pl.core.quality_head import check_head_input

ENGINE_DTYPES = ("float32", "bfloat16", "float16", "auto")
LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


@dataclass
class EngineConfig:
    """The vLLM rollout engine. In a training run the trainer sets ``model`` (the policy of ``model.*``),
    ``seed`` (``trainer.seed``), ``head_hidden_dim`` (``head.hidden_dim``) and ``logprobs_mode``
    (processed: the trainer's log-probs are temperature-scaled)."""

    model: str | None = None
    """Path of an HF model directory (Qwen3 and other vLLM-supported causal LMs); required to start one."""
    tokenizer: str | None = None
    """Tokenizer directory; defaults to ``model``."""
    detect_length: int = 12
    """L_detect: generated length at which rollouts are scored and pruned (< algo.max_response_tokens); the paper's
    512 of 8192-token responses, here a quarter of the default's 48."""
    dtype: str = "float32"
    """float32 (CPU default: exact parity with the trainer) | bfloat16 (GPU) | float16 | auto."""
    max_model_len: int | None = None
    """Context length, prompt + response tokens; None: the model's own (a training run uses the longest
    prompt + algo.max_response_tokens, rounded up)."""
    seed: int = 0
    """vLLM's global seed (per-rollout seeds come from the sampling params)."""
    enforce_eager: bool = True
    """Skip torch.compile / CUDA graphs (start-up ~3 s on CPU instead of ~22 s)."""
    enable_prefix_caching: bool = True
    """Share prompt KV across the G rollouts of a group."""
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
    head_hidden_dim: int = 256
    """Hidden width of the quality head built when none is given."""
    head_input: str = "last"
    """What the quality head reads (:data:`~arrol_pl.core.quality_head.HEAD_INPUTS`): the final-layer hidden state
    (``last``, the paper's), the prefix log-prob statistics (``stats``; the engine then samples with top-20
    log-probs) or both (``last+stats``). The trainer sets it from ``head.input``."""
    join_launcher_world: bool = False
    """Several training ranks: join their ``torch.distributed`` world (see :func:`adapter.launcher_world_args`);
    the trainer sets it when it runs on more than one rank."""
    logprobs_mode: str = "raw_logprobs"
    """vLLM's ``logprobs_mode`` of returned log-probs: ``raw_logprobs`` (before temperature) or
    ``processed_logprobs`` (the distribution actually sampled from: what a trainer compares against)."""

    def __post_init__(self) -> None:
        if self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"dtype={self.dtype!r}; choose one of {list(ENGINE_DTYPES)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2 or null, got {self.max_model_len}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode={self.logprobs_mode!r}; choose one of {list(LOGPROBS_MODES)}")
        check_head_input(self.head_input, "head_input")
        if self.cpu_kv_cache_gib < 1:
            raise ValueError(f"cpu_kv_cache_gib must be an integer >= 1, got {self.cpu_kv_cache_gib}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
