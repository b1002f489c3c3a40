"""Run by ``test_compiled_engine.py`` in a process of its own (one vLLM engine per process): the engine compiled with
torch.compile (``enforce_eager=False``, vLLM's compiled path; CUDA graphs have no CPU counterpart), its detect-time
features and end-of-rollout features against transformers, and what is left of it once closed, printed as one JSON
line."""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref

import arrol_pl.engine  # noqa: F401  (the environment the engine needs, before vLLM loads)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main(policy_dir: str, max_model_len: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from arrol_pl.core.pruning import PrunerParams
    from arrol_pl.engine import ArrolEngine, EngineConfig, adapter

    engine = ArrolEngine(policy_dir, EngineConfig(dtype="float32", max_model_len=max_model_len, enforce_eager=False))
    hf = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    detect = 5
    prompts = ["Question: What is 12 + 35? Answer:", "Compute (3 * 4) - 5.", "The quick brown fox"]
    result = engine.generate(
        prompts,
        3,
        dict(max_tokens=12, temperature=1.0, seed=7, ignore_eos=True),
        detect_length=detect,
        pruner=PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=1),
    )
    errors, score_errors = [], []
    for r in result.rollouts:
        seq = r.prompt_token_ids + r.response_token_ids
        with torch.no_grad():
            expected = hf.model(torch.tensor([seq])).last_hidden_state[0][len(r.prompt_token_ids) + detect - 2]
            head_score = float(engine.head(r.feature[None]).item())
        errors.append(float((r.feature - expected).abs().max()))
        score_errors.append(abs(r.score - head_score))
    greedy = engine.generate(prompts, 1, dict(max_tokens=8, temperature=0.0))
    eos = engine.tokenizer.eos_token_id
    greedy_match = []
    for r in greedy.rollouts:
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([r.prompt_token_ids]),
                max_new_tokens=8,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        greedy_match.append(
            r.response_token_ids == out[0, len(r.prompt_token_ids) :].tolist()[: len(r.response_token_ids)]
        )
    compilation = engine.llm.vllm_config.compilation_config
    out = {
        "enforce_eager": engine.config.enforce_eager,
        "compilation_mode": int(compilation.mode),
        "pruned": [r.pruned for r in result.rollouts],
        "max_feature_error": max(errors),
        "max_score_error": max(score_errors),
        "greedy_match": greedy_match,
    }
    runner = adapter.model_runner(engine.llm)
    refs = {
        "LLMEngine": weakref.ref(engine.llm),
        "model runner": weakref.ref(runner),
        "model": weakref.ref(runner.get_model()),
    }
    del runner, compilation
    engine.close()
    gc.collect()  # the compiled model too is freed: torch.compile's caches keep none of it
    out["alive_after_close"] = [name for name, ref in refs.items() if ref() is not None]
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)
