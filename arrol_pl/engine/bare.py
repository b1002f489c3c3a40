"""vLLM as shipped, the benchmarks' reference for
:meth:`ArrolEngine.generate <arrol_pl.engine.engine.ArrolEngine.generate>`: the same requests through the stock
``LLMEngine`` loop, nothing of the project's in between."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from arrol_pl.engine import adapter
from arrol_pl.engine.generation import prompt_token_ids

if TYPE_CHECKING:
    from arrol_pl.engine.engine import ArrolEngine


def generate_bare(
    engine: "ArrolEngine",
    prompts: Sequence[str | Sequence[int]],
    group_size: int,
    sampling: Mapping[str, Any],
    logprobs_topk: int | None = None,
) -> tuple[float, int, int]:
    """The requests ``engine.generate`` would add (per-rollout seeds, ``logprobs_topk``), through the stock
    ``LLMEngine`` with the hidden-state tap removed, each request's output read once, when it finishes (as
    ``vllm.LLM.generate``): no tracker, deltas, scoring or aborts. Returns ``(wall seconds, generated tokens, engine
    steps)``."""
    base = adapter.sampling_params(sampling)
    if engine._generating or adapter.has_unfinished_requests(engine.llm):
        raise RuntimeError("generate_bare called while another generation is in flight")
    prompt_ids = prompt_token_ids(engine.tokenizer, prompts, engine.max_model_len)
    start = time.perf_counter()
    engine._generating = True
    engine.tap.uninstall()
    internal: list[str] = []
    try:
        for b, ids in enumerate(prompt_ids):
            engine_input = adapter.render_token_prompt(engine.llm, ids)
            for g in range(group_size):
                params = adapter.rollout_params(base, b * group_size + g, logprobs_topk, final_only=True)
                internal.append(adapter.add_request(engine.llm, f"bare-{b}-{g}", engine_input, params))
        steps, tokens = adapter.run_to_completion(engine.llm, eager=bool(engine.config.enforce_eager))
    except BaseException:
        adapter.abort_internal(engine.llm, internal)
        raise
    finally:
        engine._generating = False
        engine.tap.install()
    return time.perf_counter() - start, tokens, steps
