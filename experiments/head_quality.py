"""Quality head vs DeepConf trace confidence at several detection lengths (paper Fig. 2(b–d), Table 4 by replay).

    python experiments/head_quality.py --policy outputs/runs/<run>/export --out outputs/head_quality/<run>
    python experiments/head_quality.py --policy smollm2 --data arithmetic_fewshot --max-tokens 32 \
        --temperature 0.8 --limit 160 --out outputs/head_quality/smollm2

One fixed set of rollouts on held-out problems: ``--samples`` per problem from the vLLM engine, no pruning,
top-20 log-probs per token; final correctness from math-verify. ``--data`` names a ``conf/data`` preset (its
task options, prompt template, chat-template switch and stop strings); ``--policy`` is a model directory or
``smollm2`` (the packaged SmolLM2-135M-Instruct, converted on first use). For each detection length
L = fraction · ``--max-tokens`` and each head input of ``--features`` (the paper's ``last`` hidden state, a
``mean`` over the prefix, a ``middle`` layer, the prefix log-prob ``stats``, ``last+stats``), a fresh quality
head is trained on the features of some problems and tested on others, against DeepConf confidence over the
same first L tokens of the same test rollouts (see :mod:`arrol_pl.analysis.head_probe` for the decisions), within groups too;
and the engine's pruning rule is replayed on the test groups with that head (ARRoL vs random, κ = 0.5).
When ``--policy`` is a run's ``export/`` dir, the head that run trained online is also scored, at the
run's own L_detect, on every eligible rollout.

Writes ``head_quality.json`` (settings, one row per L for the paper's input, every input's rows, the
online head), ``head_quality.png`` (score distributions of correct vs incorrect rollouts per L, and
Spearman vs L) and prints the tables. Arguments are validated before any model loads; a bad value fails
naming its flag.
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# One torch thread (vLLM's CPU default): with more, OpenMP spin-waits make step times erratic.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

REPO = Path(__file__).resolve().parents[1]

from arrol_pl.analysis.head_probe.features import FEATURE_KINDS, detect_lengths  # noqa: E402
from arrol_pl.analysis.head_probe.fit import PROBE_TRAINING, ProbeSettings  # noqa: E402
from arrol_pl.core.confidence import TRACE_MODES  # noqa: E402
from arrol_pl.core.head_training import HeadConfig  # noqa: E402

DATA_PRESETS = REPO / "conf" / "data"
SETTINGS_FLAGS = {
    "hidden_dim": "--head-hidden-dim", "calibration_bins": "--calibration-bins", "test_fraction": "--test-fraction",
    "calibration_fraction": "--calibration-fraction", "seed": "--seed",
}
"""ProbeSettings field → the flag that sets it (errors name the flag)."""
TRAINING_FLAGS = {"steps": "--head-steps", "lr": "--head-lr", "batch_size": "--head-batch-size"}
"""HeadConfig field → its flag."""


def parse_fraction(text: str) -> float:
    """``"1/16"`` or ``"0.0625"`` → 0.0625 (argparse type)."""
    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r} (write 1/16 or 0.0625)") from None


def data_preset(name: str) -> dict:
    """``conf/data/<name>.yaml`` as a dict (task name, options, prompt template, chat switch, stop strings)."""
    import yaml

    path = DATA_PRESETS / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in DATA_PRESETS.glob("*.yaml"))
        raise ValueError(f"no data preset {name!r} in {DATA_PRESETS.relative_to(REPO)}; choose one of {known}")
    return yaml.safe_load(path.read_text()) or {}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", type=Path, required=True,
                   help="transformers model dir with tokenizer (a run's export/ dir, or a plain policy dir), "
                        "or 'smollm2' (the packaged SmolLM2-135M-Instruct)")
    p.add_argument("--data", default="arithmetic",
                   help="a conf/data preset: task options, prompt template, chat template on/off, stop strings")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the rollouts")
    p.add_argument("--features", nargs="+", choices=FEATURE_KINDS, default=list(FEATURE_KINDS),
                   help="head inputs compared side by side (the paper's: last)")
    p.add_argument("--cache-dir", type=Path, default=REPO / "outputs" / "cache",
                   help="where --policy smollm2 is converted and cached")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--samples", type=int, default=8, help="rollouts per problem")
    p.add_argument("--max-tokens", type=int, default=48, help="max response tokens (algo.max_response_tokens)")
    p.add_argument("--fractions", type=parse_fraction, nargs="+", default=[1 / 16, 1 / 8, 1 / 4, 1 / 2],
                   help="detection lengths as fractions of --max-tokens, e.g. 1/16 1/8 1/4 1/2")
    p.add_argument("--limit", type=int, default=256, help="held-out problems used")
    p.add_argument("--dataset", default=None,
                   help="a dataset of arrol_pl.tasks.registry instead of the preset's (e.g. math500 with --data-path)")
    p.add_argument("--data-path", default=None, help="local copy of --dataset (public datasets)")
    p.add_argument("--split", default=None, help="split of --dataset (default: heldout for arithmetic, else test)")
    p.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                   help="override a task option of the --data preset (repeatable)")
    p.add_argument("--head-steps", type=int, default=PROBE_TRAINING.steps)
    p.add_argument("--head-lr", type=float, default=PROBE_TRAINING.lr)
    p.add_argument("--head-hidden-dim", type=int, default=ProbeSettings.hidden_dim)
    p.add_argument("--head-batch-size", type=int, default=PROBE_TRAINING.batch_size)
    p.add_argument("--calibration-bins", type=int, default=ProbeSettings.calibration_bins,
                   help="calibrator bins (default: one per 32 calibration rollouts, at most 128)")
    p.add_argument("--calibration-fraction", type=float, default=ProbeSettings.calibration_fraction,
                   help="share of the head-training problems held apart to fit the calibrator")
    p.add_argument("--test-fraction", type=float, default=ProbeSettings.test_fraction)
    p.add_argument("--seed", type=int, default=0, help="sampling seed, problem split and head initialisation")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="engine and feature-extraction dtype (float32 for parity on CPU)")
    p.add_argument("--votes", action=argparse.BooleanOptionalAction, default=True,
                   help="replay Table 3's votes (majority, DeepConf, ARRoL) on the test problems")
    p.add_argument("--deepconf-mode", choices=TRACE_MODES, default="lowest_group")
    p.add_argument("--forward-batch-tokens", type=int, default=16384,
                   help="micro-batch budget (rows x longest) of the feature forward pass")
    return p


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict, list, list[int], ProbeSettings]:
    """Parse and validate everything that needs no model: ``(args, data options, problems, lengths, settings)``."""
    import yaml

    from arrol_pl.tasks.registry import load_problems

    parser = build_parser()
    args = parser.parse_args(argv)
    if str(args.policy) == "smollm2":
        from arrol_pl.models.smollm2 import PretrainedUnavailableError, gguf_path

        try:
            gguf_path()
        except PretrainedUnavailableError as exc:
            parser.error(f"--policy smollm2: {exc}")
    elif not (args.policy / "config.json").exists():
        parser.error(f"--policy {args.policy}: not a transformers model directory (no config.json), nor 'smollm2'")
    if not args.temperature > 0:
        parser.error(f"--temperature must be > 0, got {args.temperature}")
    for flag, value, low in (("--samples", args.samples, 1), ("--max-tokens", args.max_tokens, 2),
                             ("--limit", args.limit, 2), ("--forward-batch-tokens", args.forward_batch_tokens, 1)):
        if value < low:
            parser.error(f"{flag} must be >= {low}, got {value}")
    try:
        lengths = detect_lengths(args.fractions, args.max_tokens)
    except ValueError as exc:
        parser.error(f"--fractions: {exc}")
    try:
        training = HeadConfig(replay=PROBE_TRAINING.replay, **{
            name: getattr(args, flag[2:].replace("-", "_")) for name, flag in TRAINING_FLAGS.items()})
        settings = ProbeSettings(training=training, **{name: getattr(args, flag[2:].replace("-", "_"))
                                                       for name, flag in SETTINGS_FLAGS.items()})
    except ValueError as exc:
        flags = {f"ProbeSettings.{name} ": f for name, f in SETTINGS_FLAGS.items()} | {
            f"{name} ": f for name, f in TRAINING_FLAGS.items()}
        flag = next(f for key, f in flags.items() if str(exc).startswith(key))
        parser.error(f"{flag}: {exc}")
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.prompts import PromptFormat
    from arrol_pl.tasks.registry import canonical_name

    try:
        preset = data_preset(args.data)
        args.prompt_format = PromptFormat(preset.get("prompt_template"), preset.get("chat_template", True),
                                          tuple(preset.get("stop") or ()))
    except ValueError as exc:
        parser.error(f"--data: {exc}")
    try:
        dataset = canonical_name(args.dataset or preset.get("name", "arithmetic"))
    except ValueError as exc:
        parser.error(f"--dataset: {exc}")
    options = dict(preset.get("options") or {}) if args.dataset is None else {}
    for item in args.data_option:
        key, sep, value = item.partition("=")
        if not sep or key not in options:
            parser.error(f"--data-option {item!r}: expected KEY=VALUE with KEY one of {sorted(options)}")
        options[key] = yaml.safe_load(value)
    try:
        split = args.split or ("heldout" if dataset == "arithmetic" else "test")
        problems = load_problems(dataset, path=args.data_path, split=split, **options).problems[: args.limit]
    except (TypeError, ValueError, OSError, DatasetUnavailableError) as exc:
        parser.error(f"--dataset {args.dataset} / --data-path / --data-option: {exc}")
    if len(problems) < 2:
        parser.error(f"--limit/--data-option: {len(problems)} held-out problems; the probe splits by problem (>= 2)")
    return args, options, problems, lengths, settings


def main(argv: list[str] | None = None) -> dict:
    args, options, problems, lengths, settings = parse_args(argv)

    from arrol_pl.analysis.head_probe.run import ProbeConfig, run_probe

    return run_probe(ProbeConfig(
        policy=args.policy, cache_dir=args.cache_dir, out=args.out,
        command="python experiments/head_quality.py " + " ".join(sys.argv[1:] if argv is None else argv),
        problems=problems, prompt_format=args.prompt_format, samples=args.samples, max_tokens=args.max_tokens,
        temperature=args.temperature, lengths=lengths, fractions=args.fractions, features=args.features,
        settings=settings, dtype=args.dtype, votes=args.votes, deepconf_mode=args.deepconf_mode,
        forward_batch_tokens=args.forward_batch_tokens, data=args.data, dataset=args.dataset, data_options=options,
    ))


if __name__ == "__main__":
    main()
