"""Benchmark: is the oracle's decode-time credit what real pruning saves?

The oracle scorer (``pruning.scorer=oracle``) lets every rollout run to its end and credits the generation time
that aborting the pruned ones at L_detect would have saved, from the decode-cost model
(:mod:`arrol_pl.core.decode_cost`). This measures the model against the real thing, in one process with one engine
per concurrency, the same prompts and sampling seeds for both:

- ``real``: random pruning at κ that really aborts inside the engine (detect-first when the rollouts outnumber the
  slots, as a training run does);
- ``credited``: the same generation unpruned, the same random decisions drawn afterwards, and its wall time minus
  the credit.

Random pruning's decisions do not read the rollouts, so both sides prune the same rollouts (the ``same keep``
column says how many decisions agree). Each concurrency runs with all rollouts decoding at once
(``max_num_seqs`` ≥ B×G) and KV-limited (B×G / 4 slots). Target: the credited time within 10 % of the real one
(median over ``--repeats`` rounds after one warm-up round).

    python experiments/bench_credit.py --model ~/.cache/arrol-pl/warm-<key>   # a warm-started long-task policy
    python experiments/bench_credit.py                                     # a random tiny policy (varied lengths)

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
os.environ.setdefault("OMP_NUM_THREADS", "1")

TOLERANCE = 0.10
"""The credit model's target: credited time within this share of real pruning's."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="an HF model dir (default: a random tiny Qwen3 built here)")
    p.add_argument("--prompts", type=int, default=16, help="B prompts (the long arithmetic task's)")
    p.add_argument("--group-size", type=int, default=8, help="G rollouts per prompt")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--detect-length", type=int, default=16, help="L_detect")
    p.add_argument("--kappas", type=float, nargs="+", default=[0.5, 0.25])
    p.add_argument(
        "--slots",
        type=int,
        nargs="+",
        default=None,
        help="engine.max_num_seqs values (default: B×G, all at once, and B×G / 4, KV-limited)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "arrol_pl_models"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.model is not None and not (Path(args.model) / "config.json").is_file():
        p.error(
            f"--model {args.model}: not a model directory (no config.json); a warm-started policy is built by "
            "the first run that uses it, e.g. experiments/run.py +exp=bench_phases"
        )
    return args


def _model(args) -> tuple[str, dict]:
    """The model directory and extra sampling: a random tiny policy stops on a quarter of its vocabulary, so
    lengths vary as a trained policy's do."""
    if args.model is not None:
        return args.model, {}
    from arrol_pl.models import build_tiny_model, build_tokenizer

    tok = build_tokenizer(None, args.cache_dir)
    model = build_tiny_model(tok, args.cache_dir, max_position_embeddings=args.max_tokens + 256, seed=args.seed)
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    return str(model), {"stop_token_ids": list(range(3, vocab, 24))}


def measure(engine, prompts, args, kappa: float, slots: int, sampling: dict, round_seed: int) -> dict:
    """One round at one κ: the real pruned generation and the credited full one, on the same sampling seed."""
    import torch

    from arrol_pl.core.decode_cost import pruning_credit
    from arrol_pl.core.decisions import decide_batch
    from arrol_pl.core.pruning import PrunerParams

    pruner = PrunerParams(policy="random", keep_ratio=kappa, min_keep_per_group=2, seed=round_seed)
    many = len(prompts) * args.group_size > slots
    engine.seed_sampling(round_seed)  # the schedule the credit models, whatever the engine would choose
    real = engine.generate(prompts, args.group_size, sampling, args.detect_length, pruner, detect_first=many)
    engine.seed_sampling(round_seed)
    full = engine.generate(prompts, args.group_size, sampling, args.detect_length)
    rollouts = full.rollouts
    decision = decide_batch(
        pruner,
        torch.zeros(len(rollouts)),
        torch.tensor([r.eligible for r in rollouts]),
        torch.tensor([r.prompt_index for r in rollouts]),
    )
    pruned = [not bool(k) for k in decision.keep]
    credit = pruning_credit(
        [r.generated_tokens for r in rollouts],
        pruned,
        args.detect_length,
        slots,
        full.step_seconds,
        full.step_requests,
        detect_first=many,
    )
    same = sum(a.pruned == b for a, b in zip(real.rollouts, pruned)) / len(rollouts)
    return dict(
        real=real.wall_seconds,
        full=full.wall_seconds,
        credited=full.wall_seconds - credit.seconds,
        credit=credit.seconds,
        same_keep=same,
        real_tokens=real.generated_tokens,
        credited_tokens=full.generated_tokens - credit.tokens,
        fixed=credit.cost.fixed,
        per_request=credit.cost.per_request,
    )


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.tasks.arithmetic import ArithmeticConfig, arithmetic_splits

    model, extra = _model(args)
    train, _ = arithmetic_splits(ArithmeticConfig(min_operands=8, max_operands=12, n_train=args.prompts, n_heldout=0))
    prompts = [p.prompt for p in train]
    sampling = dict(max_tokens=args.max_tokens, temperature=1.0, **extra)
    rollouts = args.prompts * args.group_size
    slot_values = args.slots or [rollouts, max(rollouts // 4, 1)]
    rows = []
    for slots in slot_values:
        engine = ArrolEngine(
            model,
            EngineConfig(dtype="float32", max_model_len=args.max_tokens + 256, max_num_seqs=slots),
            seed=args.seed,
        )
        try:
            for round_ in range(args.repeats + 1):
                for kappa in args.kappas:
                    m = measure(engine, prompts, args, kappa, slots, sampling, args.seed * 1000 + round_)
                    if round_ > 0:  # round 0 warms up
                        rows.append(dict(slots=slots, kappa=kappa, **m))
        finally:
            engine.close()

    table = {}
    for slots in slot_values:
        for kappa in args.kappas:
            rs = [r for r in rows if r["slots"] == slots and r["kappa"] == kappa]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("slots", "kappa")}
            med["ratio"] = statistics.median(r["credited"] / r["real"] for r in rs)
            table[f"slots={slots},kappa={kappa:g}"] = {k: round(v, 4) for k, v in med.items()}
    print(
        f"model={model} B={args.prompts} G={args.group_size} max_tokens={args.max_tokens} "
        f"L_detect={args.detect_length} repeats={args.repeats} threads={os.environ['OMP_NUM_THREADS']}"
    )
    print(
        f"{'config':<22}{'real s':>8}{'full s':>8}{'credit s':>10}{'credited s':>12}{'credited/real':>15}"
        f"{'same keep':>11}{'tokens real/credited':>22}"
    )
    for name, r in table.items():
        print(
            f"{name:<22}{r['real']:>8.3f}{r['full']:>8.3f}{r['credit']:>10.3f}{r['credited']:>12.3f}"
            f"{r['ratio']:>15.3f}{r['same_keep']:>11.3f}{int(r['real_tokens']):>11}/{int(r['credited_tokens'])}"
        )
    worst = max(abs(r["ratio"] - 1.0) for r in table.values())
    summary = dict(
        config=dict(
            model=model,
            prompts=args.prompts,
            group_size=args.group_size,
            max_tokens=args.max_tokens,
            detect_length=args.detect_length,
            slots=slot_values,
            kappas=args.kappas,
            repeats=args.repeats,
        ),
        results=table,
        worst_gap=round(worst, 4),
        within_target=worst <= TOLERANCE,
    )
    print(
        f"worst |credited / real - 1| = {worst:.3f} (target <= {TOLERANCE:.2f}): "
        f"{'met' if worst <= TOLERANCE else 'missed'}"
    )
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
