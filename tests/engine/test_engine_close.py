"""Engines that follow each other in one process (a Hydra sweep's jobs on CPU): ``ArrolEngine.close`` releases every
vLLM object the engine started, and the next engine starts and generates. In a process of its own
(``close_worker.py``): the other engine tests share one engine per session. On CUDA with sleep mode one process
holds one engine (``adapter.startup.claim_sleep_mode``), and a sweep runs each job in a process of its own
(``tests/cli/test_job_process.py``)."""

from __future__ import annotations

import json

import pytest

WORKER = "close_worker.py"
"""The script that starts and measures the engine in a process of its own (``run_worker``)."""


@pytest.mark.engine
@pytest.mark.subprocess
def test_a_closed_engine_frees_vllms_objects_and_the_next_one_generates(run_worker):
    result = run_worker(WORKER)
    assert result["alive"] == {}, "still alive after close() and a collection, with who holds them: " + json.dumps(
        result["alive"], indent=1
    )
    closed = "this ArrolEngine is closed (close() released vLLM's engine): start a new ArrolEngine"
    assert result["after_close"] == dict.fromkeys(("generate", "sync_weights", "sleep", "describe", "llm"), closed)
    assert result["same_greedy"], "the second engine in the process generates what the first did"


def test_a_second_sleep_mode_engine_on_cuda_is_refused_in_one_line(monkeypatch):
    """vLLM's sleep mode serves one engine per process on CUDA (its allocator keeps what a closed engine held, and
    the GPU worker asserts it holds nothing): the second is refused before vLLM starts, naming what to do. Elsewhere,
    or without sleep mode, engines follow each other."""
    from arrol_pl.engine.adapter import startup

    monkeypatch.setattr(startup, "SLEEP_MODE_ENGINES", [])
    startup.claim_sleep_mode("cpu", {"model": "a", "enable_sleep_mode": True})
    startup.claim_sleep_mode("cuda", {"model": "a", "enable_sleep_mode": False})
    assert startup.SLEEP_MODE_ENGINES == []
    startup.claim_sleep_mode("cuda", {"model": "first", "enable_sleep_mode": True})
    with pytest.raises(RuntimeError) as refused:
        startup.claim_sleep_mode("cuda", {"model": "second", "enable_sleep_mode": True})
    assert str(refused.value).startswith(
        "an engine with sleep mode (engine.enable_sleep_mode=true) already ran in this process (first); on CUDA"
    )
    assert "\n" not in str(refused.value) and "a process of its own" in str(refused.value)
