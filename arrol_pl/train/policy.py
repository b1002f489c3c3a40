"""What the trainer does to the policy model itself, apart from a training step: which of its parameters train
(``model.trainable_layers``) and which of its tensors go to the engine after an update."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn


def policy_weights(policy: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) pairs for the engine's ``reload_weights``: every tensor, or only the trained ones
    when part of the policy is frozen (:func:`freeze_lower_layers`; the engine keeps the others)."""
    if all(p.requires_grad for p in policy.parameters()):
        for name, tensor in policy.state_dict().items():
            yield name, tensor.detach()
        return
    for name, param in policy.named_parameters():
        if param.requires_grad:
            yield name, param.detach()


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
    for module in [*blocks[len(blocks) - trainable_layers:], decoder.norm]:
        module.requires_grad_(True)
    return sum(p.numel() for p in policy.parameters() if p.requires_grad)
