"""What the GPU memory plan (:mod:`arrol_pl.train.memory.plan`) knows of a model and a precision, from a
transformers ``config.json`` alone: the shape's parameter counts, its KV cache per token, the bytes autograd keeps
per token for one decoder block (the count is stated in :mod:`arrol_pl.train.memory.plan`'s docstring), and the
bytes per element of what each Lightning precision keeps. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a decoder-only transformer (a transformers ``config.json``)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qk_norm: bool = False
    """Qwen3's RMSNorm on queries and keys (one weight of ``head_dim`` each, per block)."""
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    torch_dtype: str = "bfloat16"
    """The checkpoint's dtype: what the engine serves with ``engine.dtype=auto``."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str | None = None) -> "ModelShape":
        """From a ``config.json`` (a multimodal one's ``text_config`` if it has one); raises ValueError naming a
        missing key."""
        c = dict(config.get("text_config") or config)
        missing = [
            k
            for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
            if k not in c
        ]
        if missing:
            raise ValueError(f"config.json has no {', '.join(missing)}: not a decoder-only transformer the plan knows")
        heads = int(c["num_attention_heads"])
        model_type = str(c.get("model_type", ""))
        return cls(
            name=name or str(c.get("_name_or_path") or model_type or "model"),
            hidden_size=int(c["hidden_size"]),
            intermediate_size=int(c["intermediate_size"]),
            num_layers=int(c["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
            vocab_size=int(c["vocab_size"]),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            qk_norm=model_type.startswith("qwen3"),
            # Qwen2 has q/k/v biases without saying so in its config
            qkv_bias=bool(c.get("attention_bias", False)) or model_type == "qwen2",
            o_bias=bool(c.get("attention_bias", False)),
            mlp_bias=bool(c.get("mlp_bias", False)),
            torch_dtype=str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"),
        )

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def block_params(self) -> int:
        """Parameters of one decoder block: attention, SwiGLU MLP, two RMSNorms (and Qwen3's q/k norms)."""
        h, q, k, i = self.hidden_size, self.q_width, self.kv_width, self.intermediate_size
        attention = h * q + 2 * h * k + q * h + (q + 2 * k if self.qkv_bias else 0) + (h if self.o_bias else 0)
        mlp = 3 * h * i + (2 * i + h if self.mlp_bias else 0)
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attention + mlp + norms

    @property
    def root_params(self) -> int:
        """Parameters outside the blocks: embeddings, final norm, and the LM head when it is not tied."""
        embed = self.vocab_size * self.hidden_size
        return embed * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    @property
    def params(self) -> int:
        return self.num_layers * self.block_params + self.root_params

    def trainable_params(self, trainable_layers: int | None) -> int:
        """``model.trainable_layers``: the top blocks and the final norm; None: every parameter."""
        if trainable_layers is None:
            return self.params
        return min(trainable_layers, self.num_layers) * self.block_params + self.hidden_size

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """The engine's KV cache per token: keys and values of every layer."""
        return 2 * self.num_layers * self.kv_width * dtype_bytes


def layer_activation_bytes(shape: ModelShape, residual_bytes: int, compute_bytes: int) -> int:
    """Bytes autograd keeps per token for one decoder block (module docstring: the count and its source)."""
    h, q, k, i, r, s = (
        shape.hidden_size,
        shape.q_width,
        shape.kv_width,
        shape.intermediate_size,
        residual_bytes,
        compute_bytes,
    )
    norms = 2 * (2 * r * h)
    casts = 2 * s * h if s != r else 0
    attention = 5 * s * q
    qk_norm = (4 + s) * (q + k) if shape.qk_norm else 0
    mlp = 4 * s * i
    return norms + casts + attention + qk_norm + mlp


@dataclass(frozen=True)
class Precision:
    """Bytes per element of what a Lightning precision keeps: weights, gradients and each AdamW moment
    (``param``), the residual stream (``residual``) and matmul outputs (``compute``)."""

    param: int
    residual: int
    compute: int

    @property
    def autocast(self) -> bool:
        return self.compute != self.param


def precision_bytes(precision: str) -> Precision:
    if precision in ("bf16-mixed", "16-mixed"):
        return Precision(4, 4, 2)
    if precision in ("bf16-true", "16-true"):
        return Precision(2, 2, 2)
    if precision == "64-true":
        return Precision(8, 8, 8)
    return Precision(4, 4, 4)  # 32-true, 32
