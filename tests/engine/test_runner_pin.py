"""The model runner the hidden-state tap reads, pinned: vLLM 0.33 builds "Model Runner V2" on CUDA by default, which
keeps no ``input_batch``, ``requests`` or sampled hidden rows. The engine asks for the V1 runner in its environment
and refuses any other runner at start, in one line; these tests run without an engine."""

from __future__ import annotations

import os
import types

import pytest
import torch

from arrol_pl.engine import adapter
from arrol_pl.engine.adapter import startup
from arrol_pl.engine.vllm_api import REQUIRED_ENV, TAP_RUNNER_ATTRS


class ModelRunnerV2Shape:
    """Shaped like ``vllm.v1.worker.gpu.model_runner.GPUModelRunner`` (vllm 0.33): per-request state in
    ``req_states``, an ``execute_model_state`` without ``sample_hidden_states``, no ``input_batch``/``requests``."""

    def __init__(self) -> None:
        self.req_states = types.SimpleNamespace(req_id_to_index={})
        self.execute_model_state = None
        self.model = None

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        return None


class ModelRunnerV1Shape(ModelRunnerV2Shape):
    def __init__(self) -> None:
        super().__init__()
        self.input_batch = types.SimpleNamespace(req_ids=[])
        self.requests = {}


def test_importing_the_engine_package_asks_for_the_v1_runner():
    assert REQUIRED_ENV["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    for key, value in REQUIRED_ENV.items():
        assert os.environ[key] == value  # set by `import arrol_pl.engine` (tests/engine/conftest.py)
    startup.check_environment()


def test_an_explicit_v2_runner_environment_is_refused_before_the_engine_starts(monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(RuntimeError, match=r"needs VLLM_USE_V2_MODEL_RUNNER=0 .*found VLLM_USE_V2_MODEL_RUNNER='1'"):
        startup.check_environment()


def test_the_tap_refuses_a_runner_shaped_like_model_runner_v2_in_one_line():
    with pytest.raises(RuntimeError) as err:
        adapter.HiddenStateTap(ModelRunnerV2Shape())
    message = str(err.value)
    assert "\n" not in message
    assert "ModelRunnerV2Shape, which the hidden-state tap cannot read (it has no input_batch, requests)" in message
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in message


def test_the_tap_serves_a_runner_with_what_it_reads():
    runner = ModelRunnerV1Shape()
    assert all(hasattr(runner, name) for name in TAP_RUNNER_ATTRS)
    tap = adapter.HiddenStateTap(runner)
    assert runner.execute_model == tap._execute_model
    tap.uninstall()
    assert runner.execute_model != tap._execute_model


def test_the_tap_copies_a_contiguous_run_of_rows_as_one_slice_and_scattered_rows_by_index(monkeypatch):
    states = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    built = []
    real_tensor = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: built.append(a) or real_tensor(*a, **k))
    every = adapter.copy_rows(states, [0, 1, 2, 3, 4, 5])
    middle = adapter.copy_rows(states, [2, 3])
    assert built == []  # no index built, nothing sent to the device
    assert torch.equal(every, states) and every.data_ptr() != states.data_ptr()  # a copy: the runner reuses its buffer
    assert torch.equal(middle, states[2:4])
    scattered = adapter.copy_rows(states, [0, 3, 5])
    assert len(built) == 1
    assert torch.equal(scattered, states[[0, 3, 5]])


def test_the_tap_keeps_rows_of_requests_below_their_target_only():
    runner = ModelRunnerV1Shape()
    runner.input_batch.req_ids = ["a", "b", "c"]
    runner.requests = {rid: types.SimpleNamespace(output_token_ids=[0] * n) for rid, n in zip("abc", (1, 5, 2))}
    hidden = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    runner.execute_model_state = types.SimpleNamespace(sample_hidden_states=hidden)
    tap = adapter.HiddenStateTap(runner)
    for rid in "abc":
        tap.register(rid, 3)
    tap._execute_model(types.SimpleNamespace(total_num_scheduled_tokens=3))
    assert tap.scheduled == tap.tokens == 3
    assert set(tap.latest) == {"a", "c"} and "b" not in tap.targets  # b is past its target: never copied again
    assert torch.equal(tap.latest["a"].feature(), hidden[0]) and tap.latest["a"].num_output == 1
    assert torch.equal(tap.latest["c"].feature(), hidden[2]) and tap.latest["c"].num_output == 2
