"""Test-session settings: never reach a model or dataset hub (a hub name would stall ~23 s first); the session's
tiny Qwen3 policies, built once for the model and engine tests; one model cache for every test that runs the
default policy through a script, so its warm start (about a minute) is built once a session; how the tests are
shared among pytest-xdist workers."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per worker (and per process it starts): two workers on two cores, none oversubscribed
    os.environ.setdefault("OMP_NUM_THREADS", "1")


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
    policy: its warm-started build is made by the first of them and found by the others, on every worker (each
    build is published by a rename, so two workers never see half of one)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("policy-cache")
    shared = tmp_path_factory.getbasetemp().parent / "policy-cache"
    shared.mkdir(exist_ok=True)
    return shared


def pytest_collection_modifyitems(config, items):
    """With several workers (``pytest -n 2 --dist loadgroup``, as ``make test`` runs): every test of the session's
    in-process engine (the ``engine`` fixture of tests/engine/conftest.py) goes to one worker, so one engine starts
    per run, and the other tests go with their file, so a file's module-scoped runs are made once.

    The groups are handed out in collection order (``make test`` passes ``--no-loadscope-reorder``; xdist would
    otherwise put the groups with the most tests first, which leaves a file holding one long end-to-end test for
    last, on one worker while the other idles). So the long groups come first: the engine's, then every group with a
    test marked ``slow``, then the quick ones, which fill in whichever worker finishes first."""
    group_of, rank_of = {}, {}
    for item in items:
        uses_engine = "engine" in getattr(item, "fixturenames", ())
        group = group_of[item.nodeid] = "engine" if uses_engine else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        rank = 0 if uses_engine else 1 if item.get_closest_marker("slow") else 2
        rank_of[group] = min(rank_of.get(group, 2), rank)
    items.sort(key=lambda item: rank_of[group_of[item.nodeid]])  # a stable sort: within a rank, collection order
