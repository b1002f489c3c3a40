"""GPU memory per rank of a training run, from the policy's ``config.json`` alone: no weights, no torch, no GPU.

:func:`plan_memory` adds up the components counted in :mod:`arrol_pl.train.memory.components`, phase by phase,
into a :class:`MemoryPlan`, the report. ``experiments/plan.py`` prints it; ``experiments/run.py`` refuses a GPU run
that cannot fit, before any model loads (:func:`arrol_pl.train.run.prelaunch.preflight`). Every figure is
arithmetic on the model's shape and the run's settings, and each assumption is stated where it is made:

- **Policy, gradients, AdamW**. The trainer loads the policy in float32 and Lightning's
  ``bf16-mixed`` / ``16-mixed`` keep it so (autocast computes in 16 bits; float32 master weights, float32 gradients
  and two float32 AdamW moments: 16 bytes per trained parameter); ``*-true`` precisions hold weights, gradients
  and moments in that dtype. With several ranks FSDP2 shards all three over them (``fully_shard`` per decoder
  block, then the root); gradients exist only in the update (``zero_grad`` frees them after each optimizer step).
- **The frozen reference** (``algo.kl_coef > 0``, the trainer's condition) is loaded in ``model.reference_dtype``
  and, with several ranks, sharded by FSDP2 like the policy (:mod:`arrol_pl.train.policy.sharding`); its forward,
  before the update and without gradient, gathers one block at a time and is no peak of its own.
- **FSDP2's gathered weights.** In the update a rank holds, besides its shards, the unsharded weights of the block
  running and of the one prefetched, and the root's (embeddings, final norm, LM head) for the whole step.
- **Activations** (:func:`~arrol_pl.train.memory.shape.layer_activation_bytes`): what autograd keeps of one
  Llama / Qwen3 decoder block per token, counted tensor by tensor under autocast (float32 residual stream, 16-bit
  matmuls, fused SDPA keeping Q, the K/V repeated to every query head, its output and a log-sum-exp, no T × T
  matrix):
  ``2 norms × 2·r·h + (cast of the two norm outputs) 2·s·h + attention 5·s·q + (Qwen3's q/k norms)
  (4 + s)(q + k) + SwiGLU 4·s·I`` bytes, ``r`` the residual dtype's bytes, ``s`` the compute dtype's, ``h`` the
  width, ``q`` = heads × head_dim, ``k`` = kv heads × head_dim, ``I`` the MLP width. The method is Korthikanti et
  al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.1: 34·s·b·h per layer for a GPT
  block), redone for these blocks; ``tests/train/memory/test_memory_plan.py`` checks it against the bytes autograd
  actually saves (saved-tensor hooks on CPU). Autocast also keeps a 16-bit copy of every weight a matmul used
  until the backward (2 bytes per block parameter). With activation checkpointing (``model.activation_checkpointing``,
  per decoder block) a block keeps only its input (``r·h`` per token) and one block is recomputed at a time.
  A micro-batch holds ``max(algo.micro_batch_tokens, longest sequence)`` tokens (a longer sequence gets a
  micro-batch of its own).
- **The update's peak** is the largest of three moments of a micro-batch's backward
  (:func:`~arrol_pl.train.memory.components.update_moments`), each on top of the resident memory, the gradients
  (accumulated over the mini-batch's micro-batches, so they exist in all but the first) and FSDP2's gathered
  weights; ``tests/train/policy/test_update_peak.py`` measures the real update on CPU (float32 and bf16 autocast)
  within a few percent of it (:mod:`arrol_pl.train.policy.update_peak`):

  - *The log-prob step's backward* (:func:`arrol_pl.train.policy.logprobs.response_log_probs`): the activations kept
    for the backward, the final norm's saved tensors and the LM head's input (``(2r + s)·h`` per token; under
    autocast also the LM head's 16-bit weight copy), the logits in the compute dtype and their gradient, as
    large (``2·s·V`` per token: the logits at every position of the micro-batch, the worst case of a one-token
    prompt), and one float32 chunk of :data:`~arrol_pl.train.memory.components.LOGPROB_CHUNK_ELEMENTS` logits
    with the 16-bit copy it is made from. The step's float32 log-softmax never covers the whole micro-batch: before
    it did, and its backward held three float32 copies of the logits at once (``12·V`` bytes per token).
  - *A decoder block's backward*: with checkpointing, the block inputs plus one block recomputed; its backward
    adds the gradients of the block's output and of the SwiGLU's two products (``r·h + 2·s·I`` per token).
    With several ranks the LM head's unsharded gradient is held too (``4·V·h`` bytes in float32): FSDP2 reduce-
    scatters the root's gradients only once the root's whole backward, the embedding's included, is done.
  - *The root's reduce-scatter* (several ranks): the root's unsharded gradients (embeddings and LM head) and
    the reduce-scatter input they are copied into, twice the root's parameters; by then the activations are
    freed.
- **The engine** (vLLM, one per rank) takes ``engine.gpu_memory_utilization`` of the GPU and fills what its
  weights leave with KV cache: ``2 × layers × kv heads × head_dim × dtype bytes`` per token. A run needs one
  full-length sequence to fit (vLLM refuses to start otherwise); ``max_num_seqs`` full-length sequences are what
  full concurrency would take (vLLM queues what does not fit). ``engine.enable_sleep_mode`` frees the engine's
  memory during the update (``sleep(level=2)`` before a sync of every weight: KV cache and weights dropped;
  ``level=1`` with ``model.trainable_layers``: weights to pinned host memory); without it the engine keeps its
  share throughout. A null ``engine.dtype`` is the CUDA default, bfloat16.
- **The engine's CUDA-graph pool** (compiled mode, CUDA's default; none with ``engine.enforce_eager=true``): vLLM
  0.33 counts it inside the engine's share while awake (its profiler subtracts its estimate from the KV cache,
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), but sleep frees only the pools tagged ``weights`` and
  ``kv_cache``: the graphs' memory stays through the update and the sync. Its size is assumed
  (:data:`GRAPH_POOL_BYTES`); vLLM's start log gives the real one ("Graph capturing finished in … secs, took …").
- **The weight sync** (its own phase): the engine holds its weights (asleep: woken without the KV cache, which
  comes back after the sync; awake: its whole share) and the graph pool, and the sync sends one full tensor at a
  time, cast to the engine's dtype (on each shard first, then all-gathered, with several ranks). The largest is
  the embedding, ``V × h``: its cast copy, and vLLM's layerwise reload, which buffers the incoming tensor until
  its layer is complete, builds the layer anew beside the kernel's tensors and copies it back
  (``model_loader/reload/layerwise.py``): a second ``V × h`` at the same moment.
- **Host memory while loading**: rank 0 alone reads the policy (float32) and the reference (``model.reference_dtype``)
  and broadcasts them into the other ranks' shards, which start on the meta device: ``(4 + b_ref)·P`` on rank 0's
  node, about nothing elsewhere.
- **Runtime**: CUDA context, NCCL buffers and allocator slack, an assumed :data:`RUNTIME_BYTES` per process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from arrol_pl.train.memory.components import Item, Phase, dtype_name, sync_items, update_moments, update_steady
from arrol_pl.train.memory.shape import DTYPE_BYTES, ModelShape, layer_activation_bytes, precision_bytes

GIB = 1024**3

RUNTIME_BYTES = 2 * GIB
"""CUDA context, NCCL buffers and allocator fragmentation per process: an assumption (typically 1-3 GiB)."""

PROMPT_TOKENS = 1024
"""Prompt allowance when ``engine.max_model_len`` is unset (the trainer then uses the longest prompt +
``algo.max_response_tokens``, known only once the data is tokenized): an assumption, stated in the plan."""

GRAPH_POOL_BYTES = GIB
"""The engine's CUDA-graph pool, kept while the engine sleeps: an assumption (vLLM reports its capture, typically
0.2-1.5 GiB for 1-32 B models at its default capture sizes)."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank memory of a run in its two phases, against ``gpu_bytes``; :meth:`render` prints it."""

    shape: ModelShape
    ranks: int
    gpu_bytes: int
    header: tuple[str, ...]
    resident: tuple[Item, ...]
    generation: Phase
    update: Phase
    """The update at its peak: the largest of its moments (:func:`~arrol_pl.train.memory.components.update_moments`)."""
    sync: Phase
    """The weight sync after the update: the engine's weights (and its KV cache when it does not sleep), the graph
    pool, and the largest tensor twice (the sync's cast copy and vLLM's reload of its layer)."""
    other_moments: tuple[Phase, ...]
    """The update's other moments, each smaller than ``update``."""
    engine_budget: int
    engine_weights: int
    kv_per_token: int
    max_model_len: int
    max_num_seqs: int
    activations: dict[bool, int]
    """Activations (without the logits) of one micro-batch, with (True) and without (False) checkpointing."""
    checkpointing: bool
    notes: tuple[str, ...]

    @property
    def kv_capacity_seqs(self) -> int:
        """Full-length sequences the engine's share holds after its weights."""
        return max(self.engine_budget - self.engine_weights, 0) // (self.kv_per_token * self.max_model_len)

    @property
    def problems(self) -> list[str]:
        """Why the run cannot fit, one line each; empty when it fits."""
        out = []
        for phase in self.phases:
            if phase.bytes > self.gpu_bytes:
                out.append(f"{phase.name} needs {gib(phase.bytes)} per rank, more than the {gib(self.gpu_bytes)} GPU")
        if self.kv_capacity_seqs < 1:
            out.append(
                f"the engine's share ({gib(self.engine_budget)}) holds its weights ({gib(self.engine_weights)}) "
                f"but not one sequence of max_model_len {self.max_model_len} "
                f"({gib(self.kv_per_token * self.max_model_len)} of KV cache): vLLM would refuse to start"
            )
        return out

    @property
    def phases(self) -> tuple[Phase, Phase, Phase]:
        """Generation, the update at its peak and the weight sync: each must fit."""
        return self.generation, self.update, self.sync

    @property
    def peak(self) -> int:
        """The largest phase's bytes: what one rank needs."""
        return max(phase.bytes for phase in self.phases)

    @property
    def fits(self) -> bool:
        return not self.problems

    def advice(self) -> list[str]:
        """What would make it fit, in the order worth trying."""
        tips = []
        if not self.checkpointing and self.activations[False] > self.activations[True]:
            tips.append(
                f"model.activation_checkpointing=true (activations {gib(self.activations[False])} → "
                f"{gib(self.activations[True])})"
            )
        ref = next((i for i in self.resident if i.label.startswith("reference")), None)
        if ref is not None and "float32" in ref.label:
            tips.append(f"model.reference_dtype=bfloat16 (the reference: −{gib(ref.bytes / 2)})")
        if ref is not None:
            tips.append(f"algo.kl_coef=0 (no reference: −{gib(ref.bytes)})")
        tips.append("fewer tokens per micro-batch (algo.micro_batch_tokens) or a shorter algo.max_response_tokens")
        tips.append(
            "a smaller engine share (engine.gpu_memory_utilization) with engine.enable_sleep_mode=true, "
            "or more ranks (trainer.devices, trainer.num_nodes)"
        )
        return tips

    def render(self) -> str:
        width = max(len(i.label) for phase in self.phases for i in phase.items) + 2
        lines = list(self.header)

        def rows(items) -> None:
            for it in items:
                lines.append(f"    {it.label:<{width}}{gib(it.bytes):>10}" + (f"   {it.how}" if it.how else ""))

        lines.append("  resident on every rank (every phase):")
        rows(self.resident)
        for phase in self.phases:
            extra = [i for i in phase.items if i not in self.resident]
            verdict = "fits" if phase.bytes <= self.gpu_bytes else "DOES NOT FIT"
            lines.append(f"  {phase.name}: resident +")
            rows(extra)
            lines.append(
                f"    {'= peak per rank':<{width}}{gib(phase.bytes):>10}   of {gib(self.gpu_bytes)}: {verdict}"
            )
        for mo in self.other_moments:
            own = [i for i in mo.items if i not in self.update.items]
            lines.append(f"  {mo.name}: {gib(mo.bytes)} (" + ", ".join(f"{i.label} {gib(i.bytes)}" for i in own) + ")")
        full = self.kv_per_token * self.max_model_len * self.max_num_seqs
        lines.append(
            f"  engine: KV cache {self.kv_per_token / 1024:.0f} KiB per token; engine.max_num_seqs "
            f"{self.max_num_seqs} × max_model_len {self.max_model_len} would take {gib(full)}; its share "
            f"holds {self.kv_capacity_seqs} full-length sequences at once (vLLM queues the rest)"
        )
        lines.append(
            f"  activations of one micro-batch: {gib(self.activations[False])} without activation checkpointing, "
            f"{gib(self.activations[True])} with (model.activation_checkpointing="
            f"{str(self.checkpointing).lower()})"
        )
        lines += [f"  note: {n}" for n in self.notes]
        if self.fits:
            lines.append(f"  verdict: fits in {gib(self.gpu_bytes)} per rank")
        else:
            lines += [f"  verdict: DOES NOT FIT: {p}" for p in self.problems]
            lines.append("  to make it fit: " + "; ".join(self.advice()))
        return "\n".join(lines)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def plan_memory(shape: ModelShape, run: Any, gpu_bytes: int, prompt_tokens: int = PROMPT_TOKENS) -> MemoryPlan:
    """The per-rank plan of ``run`` (a :class:`~arrol_pl.train.config.run.RunConfig`, read by attribute so this module
    needs no torch) for a policy of ``shape`` on GPUs of ``gpu_bytes``."""
    t, a, e, m = run.trainer, run.algo, run.engine, run.model
    ranks = t.devices * t.num_nodes
    p = precision_bytes(t.precision)
    trainable = shape.trainable_params(m.trainable_layers)
    max_model_len = e.max_model_len or int(math.ceil((prompt_tokens + a.max_response_tokens + 1) / 64) * 64)
    tokens = max(a.micro_batch_tokens, max_model_len)
    shard = f"/ {ranks} ranks (FSDP2)" if ranks > 1 else "one rank: not sharded"

    resident = [
        Item(f"policy weights ({dtype_name(p.param)})", shape.params * p.param // ranks, shard),
        Item(
            f"AdamW moments (2 × {dtype_name(p.param)})",
            2 * trainable * p.param // ranks,
            shard + ("" if m.trainable_layers is None else f", top {m.trainable_layers} blocks trained"),
        ),
    ]
    ref_dtype = getattr(m, "reference_dtype", "float32")
    if a.kl_coef > 0:
        resident.append(
            Item(
                f"reference policy ({ref_dtype})",
                shape.params * DTYPE_BYTES[ref_dtype] // ranks,
                f"algo.kl_coef > 0, model.reference_dtype; {shard}",
            )
        )
    resident.append(Item("runtime (CUDA, NCCL)", RUNTIME_BYTES, "assumed"))

    engine_dtype = {None: "bfloat16", "auto": shape.torch_dtype}.get(e.dtype, e.dtype)  # null: CUDA's default
    e_bytes = DTYPE_BYTES.get(engine_dtype, 2)
    engine_budget = int(e.gpu_memory_utilization * gpu_bytes)
    engine_weights = shape.params * e_bytes
    kv = shape.kv_bytes_per_token(e_bytes)
    share = Item(
        "engine share",
        engine_budget,
        f"engine.gpu_memory_utilization {e.gpu_memory_utilization:g}: its "
        f"weights ({engine_dtype}) {gib(engine_weights)} + KV cache"
        + (" + CUDA-graph pool" if not e.enforce_eager else ""),
    )
    generation = Phase("generation (engine awake)", (*resident, share))
    graphs = (
        []
        if e.enforce_eager
        else [
            Item(
                "engine CUDA-graph pool",
                GRAPH_POOL_BYTES,
                "assumed; kept while the engine sleeps (engine.enforce_eager=true: none)",
            )
        ]
    )
    sync = Phase(
        "weight sync",
        (
            *resident,
            *sync_items(shape, engine_dtype, e_bytes, ranks, e.enable_sleep_mode, share, engine_weights, graphs),
        ),
    )

    per_layer = layer_activation_bytes(shape, p.residual, p.compute)
    casts = shape.block_params * p.compute if p.autocast else 0
    activations = {
        False: tokens * per_layer * shape.num_layers + casts * shape.num_layers,
        True: tokens * p.residual * shape.hidden_size * shape.num_layers + tokens * per_layer + casts,
    }
    ac = bool(getattr(m, "activation_checkpointing", False))
    steady = [*resident, *update_steady(shape, p, trainable, ranks)]
    if not e.enable_sleep_mode:
        steady.append(Item("engine share (awake)", engine_budget, "engine.enable_sleep_mode=false"))
    else:
        steady += graphs
    name = "update (engine asleep)" if e.enable_sleep_mode else "update"
    moments = [
        Phase(f"{name}, at {mo.name}", (*steady, *mo.items))
        for mo in update_moments(shape, t.precision, tokens, ac, ranks, m.trainable_layers)
    ]
    update = max(moments, key=lambda mo: mo.bytes)

    bf16 = {
        "bf16-mixed": "bf16 autocast over float32 master weights, gradients and AdamW state",
        "16-mixed": "fp16 autocast over float32 master weights, gradients and AdamW state",
    }.get(t.precision, f"weights, gradients and AdamW state in {dtype_name(p.param)}")
    header = (
        f"Memory plan per rank: {shape.name} ({shape.params / 1e9:.2f} B parameters, {shape.num_layers} layers, "
        f"hidden {shape.hidden_size}, vocab {shape.vocab_size}) on {ranks} rank{'s' if ranks > 1 else ''} "
        f"of {gib(gpu_bytes)}",
        f"  trainer.precision={t.precision}: {bf16}; one micro-batch = {tokens} tokens "
        f"(max of algo.micro_batch_tokens {a.micro_batch_tokens} and the longest sequence {max_model_len})",
    )
    notes = []
    if e.max_model_len is None:
        notes.append(
            f"max_model_len {max_model_len} assumes prompts of at most {prompt_tokens} tokens + "
            f"algo.max_response_tokens {a.max_response_tokens} (set engine.max_model_len to pin it)"
        )
    host = 4 * shape.params + (DTYPE_BYTES[ref_dtype] * shape.params if a.kl_coef > 0 else 0)
    notes.append(
        f"host memory while loading: rank 0 reads the policy in float32"
        f"{' and the reference in ' + ref_dtype if a.kl_coef > 0 else ''} and broadcasts the shards "
        f"({gib(host)} on its node); the other ranks start on the meta device"
        if ranks > 1
        else f"host memory while loading: the policy in float32"
        f"{' and the reference in ' + ref_dtype if a.kl_coef > 0 else ''}, {gib(host)}"
    )
    return MemoryPlan(
        shape,
        ranks,
        gpu_bytes,
        header,
        tuple(resident),
        generation,
        update,
        sync,
        tuple(mo for mo in moments if mo is not update),
        engine_budget,
        engine_weights,
        kv,
        max_model_len,
        e.max_num_seqs,
        activations,
        ac,
        tuple(notes),
    )
