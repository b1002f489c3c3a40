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
import json
import os
import sys
import time
from dataclasses import asdict
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

from arrol_pl.analysis.head_probe import FEATURE_KINDS, PROBE_TRAINING, ProbeSettings, detect_lengths  # noqa: E402
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
    from arrol_pl.tasks.registry import canonical_name

    from arrol_pl.tasks.problem import PromptFormat

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


def plot(results: list, path: Path) -> None:
    """Fig. 2(b–d): per L, head scores (top) and DeepConf confidence (bottom) of correct vs incorrect test
    rollouts; last panel, Spearman with correctness against L for both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n = len(results)
    fig = plt.figure(figsize=(3.2 * (n + 1), 6.0))
    grid = fig.add_gridspec(2, n + 1)
    for i, r in enumerate(results):
        for row, (values, name) in enumerate(((r.test_head_scores, "head logit"), (r.test_deepconf, "DeepConf"))):
            ax = fig.add_subplot(grid[row, i])
            correct = r.test_labels > 0.5
            edges = np.histogram_bin_edges(values.numpy(), bins=30) if values.numel() else 30  # shared by both
            for mask, label, color in ((correct, "correct", "tab:green"), (~correct, "incorrect", "tab:red")):
                if mask.any():
                    ax.hist(values[mask].numpy(), bins=edges, density=True, alpha=0.5, color=color, label=label)
            ax.set_title(f"{name}, L={r.detect_length} (n={r.n_test})", fontsize=9)
            if i == 0:
                ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[:, n])
    lengths = [r.detect_length for r in results]
    ax.plot(lengths, [r.head_spearman for r in results], "o-", label="quality head")
    ax.plot(lengths, [r.deepconf_spearman for r in results], "s--", label="DeepConf")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(x) for x in lengths])
    ax.set_xlabel("detection length L (tokens)")
    ax.set_ylabel("Spearman with correctness (test part)")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    args, options, problems, lengths, settings = parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.tasks.problem import render_problems
    from arrol_pl.tasks.reward import MathReward
    from arrol_pl.analysis.evaluation import DeepConfSettings
    from arrol_pl.train.experiment import context_length
    from arrol_pl.analysis.evaluation import trace_scores
    from arrol_pl.analysis.head_probe import (balance_table, eligible_at, inputs_table, json_number, load_exported_head,
                                      markdown_table, online_head_metrics, prefix_features, prefix_stats,
                                      probe_lengths, problem_parts, replay_votes, votes_table)

    if str(args.policy) == "smollm2":
        from arrol_pl.models.smollm2 import prepare_smollm2

        args.policy = prepare_smollm2(args.cache_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    deepconf = DeepConfSettings(mode=args.deepconf_mode)
    tokenizer = AutoTokenizer.from_pretrained(args.policy)
    problems = render_problems(problems, tokenizer, args.prompt_format)
    online_head, online_calibrator, run_detect = load_exported_head(args.policy)
    # The engine scores every rollout at one L: the run's own L_detect when known (its online head then scores
    # exactly as it did in training), else the longest probed L. With pruner=None nothing is pruned, so the
    # engine truncates no log-probs (it cuts them only for pruned rollouts): DeepConf sees every token.
    usable_run_detect = run_detect if run_detect is not None and 1 <= run_detect < args.max_tokens else None
    engine_detect = usable_run_detect or max(lengths)
    # The engine computes what the run's head reads, else every engine input the probe measures (parity below).
    need_stats = any("stats" in kind for kind in args.features) or (
        online_head is not None and "stats" in online_head.input_kind)
    head_input = online_head.input_kind if online_head is not None else ("last+stats" if need_stats else "last")
    engine = ArrolEngine(EngineConfig(
        model=str(args.policy), dtype=args.dtype, seed=args.seed, head_hidden_dim=args.head_hidden_dim,
        max_model_len=context_length(tokenizer, problems, args.max_tokens), head_input=head_input,
    ), head=online_head)
    reward = MathReward()
    try:
        # No per-request seed (as in training): vllm-cpu 0.32 crashes when a seeded request's prefill is
        # chunked ("CPU Generator does not use offset"); the engine's global seed (--seed) still applies.
        sampling = {"temperature": args.temperature, "top_p": 1.0, "max_tokens": args.max_tokens,
                    **args.prompt_format.sampling()}
        result = engine.generate([p.prompt for p in problems], args.samples, sampling, detect_length=engine_detect,
                                 logprobs_topk=deepconf.topk, progress="generate")
        rollouts = result.rollouts
        scored = reward.score([r.text for r in rollouts], [problems[r.prompt_index].answer for r in rollouts])
        # answer classes by math-verify equivalence, per problem in row order (the votes' candidates)
        classes = reward.answer_classes([scored.answers[i * args.samples:(i + 1) * args.samples]
                                         for i in range(len(problems))]) if args.votes else None
    finally:
        reward.close()
        engine.close()

    labels = torch.as_tensor(scored.correct, dtype=torch.float32)
    response_lengths = torch.tensor([len(r.response_token_ids) for r in rollouts])
    problem_ids = torch.tensor([r.prompt_index for r in rollouts])
    prompt_ids, response_ids = [r.prompt_token_ids for r in rollouts], [r.response_token_ids for r in rollouts]
    logprobs = [r.logprobs for r in rollouts]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(args.policy, dtype=getattr(torch, args.dtype)).to(device).eval()
    start = time.perf_counter()
    hidden_kinds = sorted({part for kind in args.features for part in kind.split("+") if part != "stats"} | {"last"})
    # the votes score each complete rollout: its feature at L = max_tokens is the one at its last token
    all_lengths = sorted(set(lengths) | {engine_detect} | ({args.max_tokens} if args.votes else set()))
    features = prefix_features(model, prompt_ids, response_ids, all_lengths, hidden_kinds,
                               tokenizer.pad_token_id or 0, args.forward_batch_tokens)
    if need_stats:
        features["stats"] = {length: prefix_stats(response_ids, logprobs, length) for length in all_lengths}
    feature_seconds = time.perf_counter() - start

    def engine_input(kind: str, length: int) -> torch.Tensor:
        """The probe's version of the engine's ``kind`` feature at ``length`` (its parts in the engine's order)."""
        return torch.cat([features[part][length] for part in kind.split("+")], dim=1)

    # The probe must measure the feature the engine prunes on: compare with the engine's own at its L.
    engine_features = torch.stack([r.feature for r in rollouts])
    hidden = features["last"][engine_detect].shape[1] if "last" in head_input else 0
    probe_features = engine_input(head_input, engine_detect)
    parity = {
        "detect_length": engine_detect,
        "head_input": head_input,
        "max_abs_diff": float((engine_features[:, :hidden] - probe_features[:, :hidden]).abs().max())
        if hidden else None,
        "stats_max_abs_diff": float((engine_features[:, hidden:] - probe_features[:, hidden:]).abs().max())
        if "stats" in head_input else None,
        "eligible_agrees_with_engine": bool(torch.equal(
            eligible_at(response_lengths, engine_detect), torch.tensor([r.eligible for r in rollouts]))),
    }
    by_kind = {}
    for kind in args.features:
        by_kind[kind] = probe_lengths({length: engine_input(kind, length) for length in lengths}, labels,
                                      response_lengths, problem_ids, logprobs, lengths, settings, deepconf,
                                      fractions=args.fractions, standardize="stats" in kind)
    results = by_kind.get("last") or probe_lengths(features["last"], labels, response_lengths, problem_ids,
                                                   logprobs, lengths, settings, deepconf, fractions=args.fractions)
    votes = None
    if args.votes:
        full_conf = torch.tensor([trace_scores(r.logprobs, deepconf) for r in rollouts])
        test, calibration = problem_parts(problem_ids, settings)
        votes = replay_votes(features["last"][args.max_tokens], features["last"][engine_detect], labels,
                             eligible_at(response_lengths, engine_detect), problem_ids, classes, full_conf, test,
                             calibration, settings)
    online, online_skipped = None, None
    if online_head is None:
        online_skipped = f"no quality_head.pt in {args.policy}"
    elif usable_run_detect is None:
        online_skipped = (f"the run's L_detect ({run_detect}, from summary.json one directory up) is unknown "
                          f"or not below --max-tokens={args.max_tokens}")
    else:
        metrics = online_head_metrics(online_head, online_calibrator,
                                      engine_input(online_head.input_kind, usable_run_detect), labels,
                                      eligible_at(response_lengths, usable_run_detect), problem_ids)
        online = {"detect_length": usable_run_detect, "calibrated": online_calibrator is not None,
                  **{k: json_number(v) for k, v in metrics.items()}}
    groups = labels.view(len(problems), args.samples)
    summary = {
        "command": "python experiments/head_quality.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {
            "policy": str(args.policy), "problems": len(problems), "samples": args.samples,
            "max_tokens": args.max_tokens, "fractions": args.fractions, "detect_lengths": lengths,
            "temperature": args.temperature, "seed": args.seed, "dtype": args.dtype, "data": args.data,
            "dataset": args.dataset, "data_options": options, "prompt_format": asdict(args.prompt_format),
            "features": args.features,
            "probe": asdict(settings), "deepconf": asdict(deepconf), "engine_detect_length": engine_detect,
        },
        "rollouts": len(rollouts),
        "accuracy": float(labels.mean()),
        "mixed_group_fraction": float(((groups.mean(1) > 0) & (groups.mean(1) < 1)).float().mean()),
        "mean_response_length": float(response_lengths.float().mean()),
        "finish_reasons": {reason: sum(r.finish_reason == reason for r in rollouts) for reason in ("stop", "length")},
        "reward_status": scored.counts,
        "generation_seconds": result.wall_seconds,
        "generated_tokens": result.generated_tokens,
        "feature_seconds": feature_seconds,
        "feature_parity": parity,
        "rows": [r.row() for r in results],
        "inputs": {kind: [r.row() for r in rows] for kind, rows in by_kind.items()},
        "online_head": online,
        "votes": votes,
        "online_head_skipped": online_skipped,
    }
    (args.out / "head_quality.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    plot(results, args.out / "head_quality.png")
    print(f"{len(rollouts)} rollouts ({len(problems)} problems x {args.samples}), accuracy {summary['accuracy']:.3f}, "
          f"mixed groups {summary['mixed_group_fraction']:.2f}, mean length {summary['mean_response_length']:.1f} / "
          f"{args.max_tokens} tokens, generation {result.wall_seconds:.1f} s, features {feature_seconds:.1f} s; "
          f"engine feature parity at L={engine_detect} ({head_input}): "
          + ", ".join(f"{part} max |diff| {parity[key]:.2e}" for part, key in
                      (("hidden", "max_abs_diff"), ("stats", "stats_max_abs_diff")) if parity[key] is not None))
    print(markdown_table(results))
    print("\nHead inputs (AUC over all test rollouts / within groups):")
    print(inputs_table(by_kind))
    print("\nPruning replayed on the test groups (κ = 0.5, ρ = 0.5, paper's head input):")
    print(balance_table(results))
    if votes is not None:
        print(f"\nVotes replayed on the test problems (heads fit on the other problems; L_detect = {engine_detect}):")
        print(votes_table(votes))
    if online is not None:
        shown = ", ".join(f"{k} {online[k]:.3f}" for k in ("spearman", "auc", "within_auc", "accuracy", "ece")
                          if online.get(k) is not None)
        print(f"online head of the run at its L_detect={online['detect_length']} (n={online['n']}): {shown}")
    else:
        print(f"online head not scored: {online_skipped}")
    print(f"outputs: {args.out} (head_quality.json, head_quality.png)")
    return summary


if __name__ == "__main__":
    main()
