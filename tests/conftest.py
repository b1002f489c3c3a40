"""Test-session settings: never reach a model or dataset hub (a hub name would stall ~23 s first); the session's
tiny Qwen3 policies, built once for the model and engine tests; one model cache for every test that runs the
default policy through a script, so its warm start (about a minute) is built once a session."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Tokenizer and two tiny Qwen3 policies (seeds 0 and 1: the second is the 'updated policy'), and the context
    length they are built for."""
    from arrol_pl.models import build_tiny_model, build_tokenizer

    root = tmp_path_factory.mktemp("tiny-models")
    tok = build_tokenizer(None, root)
    max_model_len = 512
    return {
        "tokenizer": tok,
        "policy": build_tiny_model(tok, root, max_position_embeddings=max_model_len, seed=0),
        "updated": build_tiny_model(tok, root, max_position_embeddings=max_model_len, seed=1),
        "max_model_len": max_model_len,
    }


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory):
    """``model.cache_dir`` of the tests that run ``experiments/run.py`` (or scripts that train) with the default tiny
    policy: its warm-started build is made by the first of them and found by the others."""
    return tmp_path_factory.mktemp("policy-cache")
