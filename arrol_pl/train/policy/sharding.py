"""A policy sharded over several ranks with FSDP2, and its full weights gathered back: rank 0 alone loads the
checkpoint (:func:`load_on_rank0`), every rank's shards are filled from it (:func:`shard_from_rank0`), and the
engine's weights are gathered whole from the shards (:func:`full_weights`). One rank: nothing is sharded, and
:func:`full_weights` and :func:`full_value` pass their tensors through.
"""

from __future__ import annotations

from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn

from arrol_pl.train.policy.collectives import collective_device, world


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A ``DTensor`` (the gradient norm of an FSDP2 policy) as a plain tensor; a plain tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_weights(
    weights: Iterator[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) pairs from (name, possibly sharded tensor) ones: an FSDP2 ``DTensor`` is all-gathered
    (every rank must iterate the same names in the same order), a plain tensor passes through. With ``dtype``
    each rank casts its shard before the gather: a bfloat16 engine's weights cross the wire at half the bytes of
    float32, and a cast is element-wise, so the gathered tensor is the full one cast. One tensor under several
    names in a row (a tied LM head) is cast and gathered once."""
    source, full = None, None
    for name, tensor in weights:
        if tensor is not source:
            source, full = tensor, full_value(tensor if dtype is None else tensor.to(dtype))
        yield name, full


def shard_policy(policy: nn.Module, mesh) -> nn.Module:
    """FSDP2 over ``mesh``: each decoder block its own unit (one block's parameters gathered at a time), then the
    root (embeddings, final norm, LM head). The trainer shards the frozen reference the same way; the quality head
    stays whole on every rank (small, and trained identically everywhere)."""
    from torch.distributed.fsdp import fully_shard

    for block in policy.base_model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(policy, mesh=mesh)
    return policy


def load_on_rank0(path, dtype: torch.dtype) -> nn.Module:
    """The transformers causal LM in ``path`` as :func:`shard_from_rank0` fills it: rank 0 of several loads the
    checkpoint (on the CPU), the other ranks build the model from its config on the meta device, holding no
    weights (verl and Lightning's meta-device start). One rank loads the checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    rank, _ = world()
    if rank == 0:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)


def shard_from_rank0(model: nn.Module, mesh) -> nn.Module:
    """:func:`shard_policy`, then every rank's shards set from rank 0's weights (every rank calls it at the same
    point): rank 0's full state dict is broadcast a tensor at a time and each rank keeps its shard; the buffers
    (the rotary ``inv_freq``, non-persistent, so in no state dict) are broadcast whole. The other ranks'
    model may live on the meta device (:func:`load_on_rank0`): it is materialised first, on the device the
    collectives use, with its parameter objects kept, so tied weights stay tied. Rank 0 holds its full
    tensors until the broadcast ends: one copy of the model, as before sharding."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank, _ = world()
    full = dict(model.state_dict()) if rank == 0 else {}
    shard_policy(model, mesh)
    if rank == 0:
        model.to(collective_device())
    else:
        model.to_empty(device=collective_device())
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    return model
