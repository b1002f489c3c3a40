"""Benchmark: where a training step's time goes, GRPO vs ARRoL (paper Table 5).

One process and one shared vLLM engine; every arm is a real training run (Lightning, rewards, updates)
from the same starting weights, prompts and seeds: GRPO (κ = 1, nothing pruned) and ARRoL at each
other κ. The first ``--warmup`` steps of every arm are the cold start (no pruning) and are not measured;
medians are taken over the next ``--steps`` steps. Arms run in ``--rounds`` rounds of alternating order
(GRPO, κ=0.5, κ=0.25, then back), and the medians pool the rounds, so drift of a shared machine cancels.

    python experiments/bench_phases.py                                  # CPU benchmark configuration
    python experiments/bench_phases.py --steps 10 -- model=hf model.path=/models/Qwen3-1.7B-Base \\
        data=dapo_math data.path=/data/dapo17k.parquet engine.detect_length=512 algo.max_response_tokens=8192

The configuration is ``conf/config.yaml`` + ``+exp=bench_phases`` (long responses, L_detect = 1/16 of
them, KV-limited concurrency) + the Hydra overrides after ``--``. Writes ``phases.json``, ``phases.md``
and one run directory per arm under ``--out``; prints the table, and per ARRoL arm whether the
end-to-end goal is met and, if not, which phase holds it back. A bad override fails in one line naming its key
(exit 2) before any model loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # (arrol_pl.engine defaults the in-process engine core)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

ROOT = Path(__file__).resolve().parents[1]

GOALS = {0.5: 1.8, 0.25: 2.6}
"""End-to-end goals per κ (paper: 1.61–1.70× at κ = 0.5, 2.33× at κ = 0.25)."""
PHASE_GOALS = {0.5: {"log-prob": 1.9, "update": 1.9}}
"""Goals of the phases that scale with trained tokens, per κ."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--kappas",
        type=float,
        nargs="+",
        default=[1.0, 0.5, 0.25],
        help="keep ratios; 1.0 is the GRPO baseline (pruning=none)",
    )
    p.add_argument("--warmup", type=int, default=3, help="unmeasured first steps per arm (the cold start)")
    p.add_argument("--steps", type=int, default=6, help="measured steps per arm and round")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds over the arms, in alternating order (A B C, C B A, ...) so drift cancels",
    )
    p.add_argument("--preset", default="bench_phases", help="conf/exp preset applied first ('' for none)")
    p.add_argument("--out", type=Path, default=None, help="output dir (default outputs/bench/phases-<time>)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run configuration")
    args = p.parse_args(argv)
    if 1.0 not in args.kappas:
        p.error(f"--kappas must include 1.0 (the GRPO baseline), got {args.kappas}")
    if any(not 0.0 < k <= 1.0 for k in args.kappas):
        p.error(f"--kappas must lie in (0, 1], got {args.kappas}")
    if args.warmup < 0 or args.steps < 1 or args.rounds < 1:
        p.error(f"need --warmup >= 0, --steps >= 1 and --rounds >= 1, got {args.warmup}, {args.steps}, {args.rounds}")
    return args


def arm_name(kappa: float) -> str:
    return "GRPO (κ=1)" if kappa == 1.0 else f"ARRoL (κ={kappa:g})"


def compose_arms(args: argparse.Namespace) -> dict[float, tuple[object, list[str]]]:
    """κ → (validated RunConfig, its overrides); fails naming the bad key before any model loads."""
    from arrol_pl.cli.hydra_app import compose
    from arrol_pl.train.config.run import load_run_config

    common = (
        ([f"+exp={args.preset}"] if args.preset else [])
        + list(args.overrides)
        + [
            f"pruning.cold_start_steps={args.warmup}",
            f"trainer.max_steps={args.warmup + args.steps}",
            "data.num_heldout=0",
        ]
    )  # timing only: no held-out evaluation before and after each arm
    arms = {}
    for kappa in args.kappas:
        extra = ["pruning=none"] if kappa == 1.0 else ["pruning=arrol", f"pruning.keep_ratio={kappa}"]
        overrides = common + extra
        arms[kappa] = (load_run_config(compose("config", overrides)), overrides)
    return arms


def main(argv: list[str] | None = None) -> dict:
    from arrol_pl.train.config.loader import ConfigError

    args = parse_args(argv)
    try:
        arms = compose_arms(args)
    except ConfigError as exc:  # as arrol train: one line naming the key, exit 2
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    out = args.out or ROOT / "outputs" / "bench" / f"phases-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    out.mkdir(parents=True, exist_ok=True)

    from transformers import AutoTokenizer

    from arrol_pl.analysis import history
    from arrol_pl.tasks.prompts import render_problems
    from arrol_pl.train.run.build import build_engine, policy_directory
    from arrol_pl.train.run.experiment import run_experiment
    from arrol_pl.train.run.prelaunch import load_splits

    base_run = arms[1.0][0]
    policy_dir = policy_directory(base_run)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    train, _ = load_splits(base_run)
    engine = build_engine(base_run, policy_dir, tokenizer, render_problems(train, tokenizer))
    measured: dict[float, list[dict[str, float]]] = {k: [] for k in arms}
    per_round: dict[float, list[float]] = {k: [] for k in arms}  # median s/step of each round
    try:
        for r in range(args.rounds):
            for kappa in list(arms) if r % 2 == 0 else list(arms)[::-1]:
                run, overrides = arms[kappa]
                run_dir = out / f"kappa-{kappa:g}" / f"round-{r}"
                t0 = time.perf_counter()
                run_experiment(run, run_dir, engine=engine, overrides=overrides)
                rows = history.read_history(run_dir)[args.warmup :]
                measured[kappa] += rows
                per_round[kappa].append(history.step_medians(rows, 0)["step"])
                print(
                    f"round {r}, {arm_name(kappa)}: {time.perf_counter() - t0:.0f} s, "
                    f"{per_round[kappa][-1]:.3f} s/step (median of {len(rows)})",
                    flush=True,
                )
    finally:
        engine.close()
    medians = {k: history.step_medians(rows, 0) for k, rows in measured.items()}

    baseline = medians[1.0]
    table = history.markdown_table([(arm_name(k), m) for k, m in medians.items()], baseline)
    verdicts = {}
    for kappa, m in medians.items():
        if kappa == 1.0:
            continue
        d = history.diagnose(baseline, m, GOALS.get(kappa, 1.0 / kappa))
        spread = [b / a for b, a in zip(per_round[1.0], per_round[kappa])]
        phase_goals = [history.phase_verdict(baseline, m, p, g) for p, g in PHASE_GOALS.get(kappa, {}).items()]
        verdicts[f"{kappa:g}"] = {
            **d,
            "text": history.diagnosis_text(d, arm_name(kappa)),
            "end_to_end_per_round": spread,
            "phases": phase_goals,
            "phase_texts": [history.phase_verdict_text(v, arm_name(kappa)) for v in phase_goals],
        }
    e = base_run.engine
    result = {
        "command": "python experiments/bench_phases.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": history.machine_info(),
        "warmup": args.warmup,
        "steps": args.steps,
        "rounds": args.rounds,
        "setting": {
            "detect_length": e.detect_length,
            "max_response_tokens": base_run.algo.max_response_tokens,
            "max_num_seqs": e.max_num_seqs,
            "prompts_per_step": base_run.algo.prompts_per_step,
            "group_size": base_run.algo.group_size,
            "data": base_run.data.options,
            "ppo_mini_batches": base_run.algo.num_mini_batches,
            "ppo_epochs": base_run.algo.ppo_epochs,
            "policy_dir": str(policy_dir),
        },
        "arms": {
            f"{k:g}": {
                "name": arm_name(k),
                "medians": m,
                "ratios": history.ratios(baseline, m),
                "run_dir": str(out / f"kappa-{k:g}"),
            }
            for k, m in medians.items()
        },
        "verdicts": verdicts,
        "table": table,
    }
    (out / "phases.json").write_text(json.dumps(result, indent=2))
    texts = [t for v in verdicts.values() for t in (v["text"], *v["phase_texts"])]
    (out / "phases.md").write_text(table + "\n\n" + "\n".join(f"- {t}" for t in texts) + "\n")
    print("\nSeconds per step (median), speedup vs GRPO in brackets:\n")
    print(table)
    for t in texts:
        print(t)
    print(
        "generation wall ratio vs generated-token ratio: "
        + ", ".join(f"κ={k} {v['generation_gap']:+.1%}" for k, v in verdicts.items())
    )
    print(f"\noutputs: {out}")
    print(
        json.dumps(
            {
                "phases_json": str(out / "phases.json"),
                **{f"end_to_end_{k}": round(v["end_to_end"], 3) for k, v in verdicts.items()},
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
