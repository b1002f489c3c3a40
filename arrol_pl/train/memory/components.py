"""The byte accounting of a rank's GPU memory, component by component: the plan's lines (:class:`Item`, grouped
in a :class:`Phase`), the update's moments and its peak above the resident memory, and what the weight sync holds.

Arithmetic on the model's shape alone (no torch). How each component is counted and what it assumes is stated in
:mod:`arrol_pl.train.memory.plan`'s docstring; :func:`~arrol_pl.train.memory.plan.plan_memory` adds these up with
the resident memory and the engine's share, phase by phase.
"""

from __future__ import annotations

from dataclasses import dataclass

from arrol_pl.train.memory.shape import ModelShape, Precision, layer_activation_bytes, precision_bytes

LOGPROB_CHUNK_ELEMENTS = 2**25
"""Logits (tokens × vocabulary) the log-prob step turns to float32 at once: 128 MiB, 220 tokens of Qwen3's
vocabulary. ``arrol_pl/train/policy/logprobs.py`` takes it from here, so that the plan needs no torch."""


def update_moments(
    shape: ModelShape,
    precision: str,
    tokens: int,
    checkpointing: bool,
    ranks: int = 1,
    trainable_layers: int | None = None,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
) -> tuple["Phase", ...]:
    """What one micro-batch of ``tokens`` adds, beyond the resident memory, the gradients and FSDP2's gathered
    weights, at each moment of its update where the peak can fall (:mod:`arrol_pl.train.memory.plan`'s docstring):
    the log-prob step's backward, a decoder block's backward and, with several ranks, the root's reduce-scatter."""
    p = precision_bytes(precision)
    h, v = shape.hidden_size, shape.vocab_size
    per_layer = layer_activation_bytes(shape, p.residual, p.compute)
    casts = shape.block_params * p.compute if p.autocast else 0
    every_block = tokens * per_layer * shape.num_layers + casts * shape.num_layers
    inputs = tokens * p.residual * h * shape.num_layers
    copies = " + 16-bit weight copies" if casts else ""
    if checkpointing:
        kept = Item(
            "activations: block inputs",
            inputs,
            f"{tokens} tokens × {shape.num_layers} layers × {p.residual * h / 1024:.0f} KiB, checkpointed per block",
        )
        blocks = Item(
            "activations: inputs + one block",
            inputs + tokens * per_layer + casts,
            f"block inputs + one block recomputed ({tokens} tokens × {per_layer / 1024:.0f} KiB{copies})",
        )
    else:
        kept = blocks = Item(
            "activations",
            every_block,
            f"{tokens} tokens × {shape.num_layers} layers × {per_layer / 1024:.0f} KiB{copies}",
        )
    chunk_tokens = min(max(1, chunk_elements // v), tokens)
    chunk_bytes = 4 + (p.compute if p.compute != 4 else 0)  # float32, and the indexed logits it is made from
    head = [
        kept,
        Item(
            "final norm, LM head input" + (" and weights (16-bit)" if p.autocast else ""),
            tokens * (2 * p.residual + p.compute) * h + (v * h * p.compute if p.autocast else 0),
            f"{tokens} tokens × {(2 * p.residual + p.compute) * h / 1024:.0f} KiB"
            + (" + the LM head cast for its matmul" if p.autocast else ""),
        ),
        Item(
            "logits and their gradient", 2 * tokens * v * p.compute, f"{tokens} tokens × vocab {v} × 2 × {p.compute} B"
        ),
        Item(
            "log-softmax chunk (float32)",
            chunk_tokens * v * chunk_bytes,
            f"{chunk_tokens} tokens × vocab {v} × {chunk_bytes} B at a time",
        ),
    ]
    block_grads = p.residual * h + 2 * p.compute * shape.intermediate_size
    backward = [
        blocks,
        Item(
            "a block's backward",
            tokens * block_grads,
            f"{tokens} tokens × {block_grads / 1024:.0f} KiB: the gradients of its output and of "
            "the SwiGLU's two products",
        ),
    ]
    if ranks > 1 and trainable_layers is None:
        backward.append(
            Item(
                "FSDP2 LM head gradient (unsharded)",
                v * h * p.param,
                "the root reduce-scatters its gradients once its whole backward is done",
            )
        )
    out = [Phase("the log-prob step's backward", tuple(head)), Phase("a block's backward", tuple(backward))]
    if ranks > 1 and trainable_layers is None:
        out.append(
            Phase(
                "the root's reduce-scatter",
                (
                    Item(
                        "FSDP2 root gradients (unsharded) + copy",
                        2 * shape.root_params * p.param,
                        "embeddings and LM head: their gradients and the reduce-scatter input",
                    ),
                ),
            )
        )
    return tuple(out)


def planned_update_bytes(
    shape: ModelShape,
    tokens: int,
    precision: str,
    checkpointing: bool = False,
    ranks: int = 1,
    trainable_layers: int | None = None,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
) -> int:
    """The plan's peak of one rank's update above its resident memory (weights, AdamW moments, the reference, the
    runtime): the gradients, FSDP2's gathered weights and the largest of :func:`update_moments`, for micro-batches
    of ``tokens``. :func:`arrol_pl.train.policy.update_peak.measure_update_peak` measures the same."""
    steady = update_steady(shape, precision_bytes(precision), shape.trainable_params(trainable_layers), ranks)
    moments = update_moments(shape, precision, tokens, checkpointing, ranks, trainable_layers, chunk_elements)
    return sum(i.bytes for i in steady) + max(m.bytes for m in moments)


def update_steady(shape: ModelShape, p: Precision, trainable: int, ranks: int) -> list[Item]:
    """What the update holds besides the resident memory at each of its moments."""
    shard = f"/ {ranks} ranks (FSDP2)" if ranks > 1 else "one rank: not sharded"
    out = [Item(f"gradients ({dtype_name(p.param)})", trainable * p.param // ranks, shard)]
    if ranks > 1:
        out.append(
            Item(
                "FSDP2 gathered weights",
                (2 * shape.block_params + shape.root_params) * p.param,
                "two blocks (running, prefetched) + embeddings and LM head",
            )
        )
    return out


@dataclass(frozen=True)
class Item:
    """One line of the plan: ``label``, bytes, and how it was counted."""

    label: str
    bytes: int
    how: str = ""


@dataclass(frozen=True)
class Phase:
    name: str
    items: tuple[Item, ...]

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)


def sync_items(
    shape: ModelShape,
    engine_dtype: str,
    e_bytes: int,
    ranks: int,
    sleeps: bool,
    share: Item,
    engine_weights: int,
    graphs: list[Item],
) -> list[Item]:
    """What the weight sync holds beyond the resident memory (:mod:`arrol_pl.train.memory.plan`'s docstring): the
    engine as it is during the sync, and the largest tensor as the sync's cast copy and as vLLM's reload of its
    layer."""
    largest = shape.vocab_size * shape.hidden_size * e_bytes
    engine = (
        [
            Item(
                "engine weights (woken before the sync)",
                engine_weights,
                f"{engine_dtype}; the KV cache comes back after the sync",
            ),
            *graphs,
        ]
        if sleeps
        else [share]
    )
    cast = (
        Item(
            "sync: the embedding, cast and gathered",
            largest + largest // ranks,
            f"V × h in {engine_dtype}, and this rank's cast shard before the gather",
        )
        if ranks > 1
        else Item("sync: the embedding, cast", largest, f"V × h in {engine_dtype}")
    )
    return [
        *engine,
        cast,
        Item(
            "sync: vLLM's reload of that layer",
            largest,
            "the layer built anew beside its kernel tensors, then copied back",
        ),
    ]


def dtype_name(n: int) -> str:
    return {2: "16-bit", 4: "float32", 8: "float64"}[n]
