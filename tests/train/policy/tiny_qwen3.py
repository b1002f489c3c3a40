"""The training tests' random Qwen3: 2 layers of width 64 (2 heads, 1 KV head of 32), 64 tokens, 128 positions;
any of its config's fields can be overridden. Imported by the tests and by ``rank_worker.py`` (run by torchrun)."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPE = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=128,
)


def tiny_qwen3(seed: int = 0, **config) -> Qwen3ForCausalLM:
    """A Qwen3 of :data:`SHAPE` (``config`` overrides it) with weights drawn after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(Qwen3Config(**{**SHAPE, **config}))
