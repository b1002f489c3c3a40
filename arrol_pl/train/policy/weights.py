"""What the trainer does to the policy model itself, apart from a training step: which of its parameters train
(``model.trainable_layers``) and which of its tensors go to the engine after an update, in the engine's dtype."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn

from arrol_pl.train.policy.sharding import full_weights


def policy_weights(policy: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, possibly sharded tensor) pairs for the engine's ``reload_weights``: every parameter and persistent
    buffer under each of its state-dict names (the rotary ``inv_freq`` of Qwen3 and Llama is non-persistent: vLLM
    computes its own), or only the trained parameters when part of the policy is frozen
    (:func:`freeze_lower_layers`; the engine keeps the others).

    A tied LM head is the embedding under a second name. It is yielded right after the embedding, as the same
    tensor object, so :func:`~arrol_pl.train.policy.sharding.full_weights` casts and gathers it once. Both names go to
    the engine: vLLM 0.32 loads ``lm_head.weight`` of a tied Qwen3 or Llama into its own head layer, and on CPU
    that layer serves the logits from a packed copy it rebuilds only when it receives a weight (sent once, as the
    embedding, the engine kept sampling from the old head)."""
    partial = not all(p.requires_grad for p in policy.parameters())
    names: dict[int, list[str]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for name, tensor in policy.state_dict(keep_vars=True).items():
        names.setdefault(id(tensor), []).append(name)
        tensors[id(tensor)] = tensor
    for key, tensor in tensors.items():
        if partial and not tensor.requires_grad:
            continue
        detached = tensor.detach()
        for name in names[key]:
            yield name, detached


def engine_weights(policy: nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`policy_weights` as full tensors in ``dtype``, the engine's: FSDP2 shards are cast on each rank,
    then all-gathered (every rank must iterate it). vLLM would cast a float32 tensor on load with the same
    round-to-nearest-even, so the engine holds the same values whichever side casts."""
    return full_weights(policy_weights(policy), dtype)


def freeze_lower_layers(policy: nn.Module, trainable_layers: int) -> int:
    """Freeze every parameter of a transformers causal LM except its top ``trainable_layers`` decoder blocks
    and final norm; returns the number of trainable parameters. The embeddings (and an LM head tied to them)
    stay frozen: with a 49k vocabulary they are most of a small model's weights, and of its sync."""
    decoder = policy.base_model
    blocks = getattr(decoder, "layers", None)
    if blocks is None or getattr(decoder, "norm", None) is None:
        raise ValueError(f"model.trainable_layers: {type(policy).__name__} has no decoder layers/norm to pick from")
    if not 1 <= trainable_layers <= len(blocks):
        raise ValueError(f"model.trainable_layers={trainable_layers}: the policy has {len(blocks)} decoder layers")
    policy.requires_grad_(False)
    for module in [*blocks[len(blocks) - trainable_layers :], decoder.norm]:
        module.requires_grad_(True)
    return sum(p.numel() for p in policy.parameters() if p.requires_grad)
