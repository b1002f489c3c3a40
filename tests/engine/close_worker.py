"""Run by ``test_engine_close.py`` in a process of its own (the suite's other engine tests share one engine per
session): an engine that generates and closes frees every vLLM object it started (the ``LLMEngine``, its engine core,
scheduler, model runner and model, checked through weak references after a collection), refuses any use after
``close``, and a second engine then starts in this process and generates what the first did. Prints one JSON line."""

from __future__ import annotations

import gc
import json
import os
import sys
import types
import weakref

import arrol_pl.engine  # noqa: F401  (the environment the engine needs, before vLLM loads)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PROMPTS = ["Question: What is 12 + 35? Answer:", "The quick brown fox"]
GREEDY = dict(max_tokens=8, temperature=0.0, ignore_eos=True)


def holders(obj: object, depth: int = 3) -> list[str]:
    """Who holds ``obj`` (gc's referrers, ``depth`` levels up, frames left out): what to fix when one is alive."""
    if depth == 0:
        return []
    found = []
    for ref in gc.get_referrers(obj):
        if isinstance(ref, types.FrameType) or ref is globals():
            continue
        found.append(f"{type(ref).__module__}.{type(ref).__qualname__}")
        found += ["  " + line for line in holders(ref, depth - 1)]
    return found[:40]


def main(policy_dir: str, max_model_len: int) -> dict:
    from arrol_pl.core.pruning import PrunerParams
    from arrol_pl.engine import ArrolEngine, EngineConfig, adapter

    config = EngineConfig(dtype="float32", max_model_len=max_model_len)
    engine = ArrolEngine(policy_dir, config)
    engine.generate(
        PROMPTS,
        2,
        dict(max_tokens=8, temperature=1.0, ignore_eos=True),
        detect_length=3,
        pruner=PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=1),
    )
    first = [r.response_token_ids for r in engine.generate(PROMPTS, 1, GREEDY).rollouts]
    runner = adapter.model_runner(engine.llm)
    refs = {
        "LLMEngine": weakref.ref(engine.llm),
        "EngineCore": weakref.ref(engine.llm.engine_core.engine_core),
        "scheduler": weakref.ref(adapter.scheduler(engine.llm)),
        "model runner": weakref.ref(runner),
        "model": weakref.ref(runner.get_model()),
        "sampler": weakref.ref(runner.sampler),
    }
    del runner
    engine.close()
    engine.close()  # idempotent
    gc.collect()
    alive = {name: holders(ref()) for name, ref in refs.items() if ref() is not None}
    after_close = {}
    for name, use in {
        "generate": lambda: engine.generate(PROMPTS, 1, GREEDY),
        "sync_weights": lambda: engine.sync_weights(head_state=engine.head.state_dict()),
        "sleep": lambda: engine.sleep(),
        "describe": engine.describe,
        "llm": lambda: engine.llm,
    }.items():
        try:
            use()
            after_close[name] = None
        except RuntimeError as exc:
            after_close[name] = str(exc)
    second = ArrolEngine(policy_dir, config)
    again = [r.response_token_ids for r in second.generate(PROMPTS, 1, GREEDY).rollouts]
    second.close()
    return {"alive": alive, "after_close": after_close, "same_greedy": again == first}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)
