"""Shared by the whole-script trainer tests: one model cache per session, so the warm-started tiny policy
(about a minute to build) is built once for every test that runs ``experiments/run.py`` with it."""

import pytest


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("policy-cache")
