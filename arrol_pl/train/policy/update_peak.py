"""The policy update's real memory peak for given shapes (:func:`measure_update_peak`), and the memory plan's for
the same ones (:func:`planned_update_peak`, :func:`arrol_pl.train.memory.components.planned_update_bytes` on a
``config.json``).

:func:`measure_update_peak` builds a causal LM from a ``config.json`` dict (random float32 weights, as the trainer
loads the policy), makes rows of equal length that fill ``micro_batches`` micro-batches of ``tokens`` each, takes
their old log-probs without gradient, then runs the update's micro-batch loop on them as
:func:`~arrol_pl.train.policy.update.policy_update` does: :func:`~arrol_pl.train.policy.logprobs.response_log_probs`,
the PPO loss with a KL term, the backward, the gradients accumulating over the micro-batches (so the second runs
with the first one's gradients held, as every micro-batch but a mini-batch's first does). Precision as Lightning's:
``32-true``, ``bf16-true`` (weights in bfloat16) or ``bf16-mixed`` (float32 weights; the forward, the loss and the
backward under bf16 autocast without its cast cache, as Lightning calls ``manual_backward`` inside the training
step). The optimizer step is left out (its AdamW moments are resident in the plan). It returns the highest number
of bytes allocated during the loop above what was allocated before it (the weights, the old log-probs): what the
plan counts as one rank's gradients, activations and log-prob step. On CUDA that is
``torch.cuda.max_memory_allocated``, every allocation included; on CPU, :class:`PeakTracker`.

A GPU check at a real model's shapes (one GPU: the plan's one-rank figure)::

    config = json.loads(Path("tests/fixtures/model_configs/qwen3-1.7b.json").read_text())
    measured = measure_update_peak(config, 20480, "bf16-mixed", "cuda", checkpointing=True)
    planned = planned_update_peak(config, 20480, "bf16-mixed", checkpointing=True)
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from arrol_pl.core.losses import ppo_clip_loss
from arrol_pl.train.memory.components import LOGPROB_CHUNK_ELEMENTS, planned_update_bytes
from arrol_pl.train.memory.shape import ModelShape
from arrol_pl.train.policy.logprobs import make_micro_batches, response_log_probs


class PeakTracker(TorchDispatchMode):
    """The peak of the bytes held by storages that PyTorch operators create while the mode is on (views share
    their base's storage and count once; a storage counts until it is freed). Buffers a kernel allocates for
    itself and frees before it returns are not seen; on CPU there is no allocator statistic to read instead."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._held: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs: set[int] = set()
        tree_map_only(torch.Tensor, lambda t: inputs.add(id(t.untyped_storage())), (args, kwargs))
        out = func(*args, **(kwargs or {}))
        # an output on an input's storage (a view, an in-place op) allocated nothing, even when that storage
        # predates the mode (a parameter)
        tree_map_only(torch.Tensor, lambda t: self._hold(t, inputs), out)
        self.peak = max(self.peak, self.live)
        return out

    def _hold(self, tensor: torch.Tensor, inputs: set[int]) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        if key not in self._held and key not in inputs:
            size = storage.nbytes()
            self.live += size
            self._held[key] = weakref.ref(storage, lambda _, key=key, size=size: self._release(key, size))

    def _release(self, key: int, size: int) -> None:
        self.live -= size
        del self._held[key]


def measure_update_peak(
    config: Mapping[str, Any],
    tokens: int,
    precision: str = "32-true",
    device: str | torch.device = "cpu",
    *,
    checkpointing: bool = False,
    sequence_tokens: int | None = None,
    prompt_tokens: int = 8,
    micro_batches: int = 2,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
    seed: int = 0,
) -> int:
    """Peak bytes of one rank's policy update above what it started with (module docstring).

    ``config``: a transformers ``config.json`` (its ``model_type`` picks the class); ``tokens``: a micro-batch's
    token budget (``algo.micro_batch_tokens``), filled by rows of ``sequence_tokens`` (default: ``tokens // 2``)
    whose first ``prompt_tokens`` are the prompt; ``checkpointing``: ``model.activation_checkpointing``;
    ``chunk_elements``: the log-prob step's float32 chunk."""
    from transformers import AutoConfig, AutoModelForCausalLM

    device = torch.device(device)
    seq = sequence_tokens or tokens // 2
    if not 0 < prompt_tokens < seq <= tokens:
        raise ValueError(f"need 0 < prompt_tokens {prompt_tokens} < sequence_tokens {seq} <= tokens {tokens}")
    cfg = dict(config)
    model_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    with device:  # initialised on the device it runs on
        policy = AutoModelForCausalLM.from_config(
            model_config, dtype=torch.bfloat16 if precision == "bf16-true" else torch.float32
        ).train()
    if checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(seed)
    n = micro_batches * (tokens // seq)
    ids = torch.randint(1, model_config.vocab_size, (n, seq), generator=g).tolist()
    batches = make_micro_batches([r[:prompt_tokens] for r in ids], [r[prompt_tokens:] for r in ids], tokens, 0)

    def autocast() -> torch.autocast:  # Lightning's bf16-mixed: no cast cache, each matmul casts its weight anew
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed", cache_enabled=False)

    with torch.no_grad(), autocast():  # also the reference's log-probs: the loss needs no reference model
        old = [response_log_probs(policy, mb, chunk_elements=chunk_elements) for mb in batches]
    advantages = torch.randn(n, generator=g)

    def update() -> None:
        with autocast():
            for mb, lp_old in zip(batches, old):
                lp = response_log_probs(policy, mb, chunk_elements=chunk_elements)
                mask = mb.response_mask.to(device)
                loss = ppo_clip_loss(
                    lp,
                    lp_old + 0.01 * mask,
                    advantages[mb.indices].to(device),
                    mask,
                    ref_log_probs=lp_old,
                    kl_coef=0.001,
                    total_seqs=n,
                ).loss
                loss.backward()

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        update()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    tracker = PeakTracker()
    with tracker:
        update()
    return tracker.peak


def planned_update_peak(
    config: Mapping[str, Any],
    tokens: int,
    precision: str = "32-true",
    *,
    checkpointing: bool = False,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
) -> int:
    """The plan's bytes for what :func:`measure_update_peak` measures with the same arguments (one rank)."""
    return planned_update_bytes(
        ModelShape.from_config(config), tokens, precision, checkpointing, chunk_elements=chunk_elements
    )
