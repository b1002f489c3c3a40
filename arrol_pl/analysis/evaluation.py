"""Test-time evaluation (paper Tables 1 and 3): k samples per problem, no pruning, and five aggregates.

Per dataset: avg@k (mean accuracy), pass@k (unbiased estimator), maj@k (majority over math-verify
equivalence classes), a DeepConf vote (weights = trace confidence from top-k log-probs, §3) and the
ARRoL vote (weights = ranks of the quality head's end-of-rollout scores rescaled to [0, 1], §4.4).
A voted answer counts as correct when any sample in its class was judged correct. Per-problem
records keep the answers, classes, correctness, scores and votes, so every number can be recomputed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from arrol_pl.analysis.formatting import table_lines
from arrol_pl.core.confidence import token_confidence, trace_confidence
from arrol_pl.core.metrics import mean_accuracy, pass_at_k, voted_answer_correct
from arrol_pl.core.voting import arrol_vote, majority_vote, weighted_vote

METRICS = ("avg@k", "pass@k", "maj@k", "deepconf@k", "arrol@k")
VOTES = {"maj@k": "majority", "deepconf@k": "deepconf", "arrol@k": "arrol"}
"""The vote metrics and the votes they count. A reward that extracts no answers (a function of the user's own)
gives no classes to vote over: its votes are None."""


@dataclass(frozen=True)
class DeepConfSettings:
    topk: int = 20
    """Top-k log-probs per token (DeepConf: 20)."""
    window: int = 2048
    """Sliding-window size of group confidence (shorter traces form one group)."""
    mode: str = "lowest_group"
    """Trace score: lowest_group | bottom10 | tail | mean."""


def trace_scores(logprobs: Sequence[dict[int, float]] | None, settings: DeepConfSettings) -> float:
    """DeepConf trace confidence from a rollout's per-token ``{token: logprob}`` (top-k plus the sampled token)."""
    if not logprobs:
        return float("nan")
    rows = []
    for entry in logprobs:
        values = sorted(entry.values(), reverse=True)[: settings.topk]
        rows.append(values + [values[-1]] * (settings.topk - len(values)))
    conf = token_confidence(torch.tensor(rows, dtype=torch.float64))
    return trace_confidence(conf, settings.mode, settings.window)


def vote_record(
    classes: list[int | None], correct: list[bool], weights_conf: list[float], head_scores: list[float]
) -> dict:
    """Votes of one problem and whether each is correct."""
    conf = [0.0 if math.isnan(w) else w for w in weights_conf]
    votes = {
        "majority": majority_vote(classes),
        "deepconf": weighted_vote(classes, conf),
        "arrol": arrol_vote(classes, head_scores),
    }
    return {
        "votes": votes,
        "vote_correct": {name: voted_answer_correct(classes, correct, w) for name, w in votes.items()},
    }


def aggregate(records: list[dict[str, Any]]) -> dict[str, float]:
    """Dataset metrics from per-problem records (the same function re-aggregates a JSONL file)."""
    n = len(records)
    k = len(records[0]["correct"])
    return {
        "problems": n,
        "k": k,
        "avg@k": mean_accuracy([r["correct"] for r in records]),
        "pass@k": sum(pass_at_k(k, sum(r["correct"]), k) for r in records) / n,
        **{
            metric: (None if records[0]["vote_correct"] is None else sum(r["vote_correct"][vote] for r in records) / n)
            for metric, vote in VOTES.items()
        },
        "no_answer_rate": None
        if records[0]["vote_correct"] is None
        else sum(a is None for r in records for a in r["answers"]) / (n * k),
    }


def evaluate_dataset(
    engine, reward, problems: Sequence, k: int, sampling: dict, deepconf: DeepConfSettings, progress: str | None = None
) -> list[dict]:
    """Sample ``k`` completions per problem (scored by the head at their end), verify, vote. ``progress``:
    the description of a progress bar over the rollouts (None: silent)."""
    result = engine.generate(
        [p.prompt for p in problems], k, sampling, detect_length=None, logprobs_topk=deepconf.topk, progress=progress
    )
    by_problem: list[list] = [[] for _ in problems]
    for r in result.rollouts:
        by_problem[r.prompt_index].append(r)
    texts = [r.text for group in by_problem for r in group]
    golds = [problems[i].answer for i, group in enumerate(by_problem) for _ in group]
    prompts = [problems[i].prompt for i, group in enumerate(by_problem) for _ in group]
    scored = reward.score(texts, golds, prompts=prompts)
    answers = [scored.answers[i * k : (i + 1) * k] for i in range(len(problems))]
    # math-verify's equivalence classes; a function of the user's own scores without extracting an answer
    classes = reward.answer_classes(answers) if hasattr(reward, "answer_classes") else None
    records = []
    for i, (problem, group) in enumerate(zip(problems, by_problem)):
        correct = [bool(c) for c in scored.correct[i * k : (i + 1) * k]]
        head = [float(r.score) for r in group]
        conf = [trace_scores(r.logprobs, deepconf) for r in group]
        records.append(
            {
                "id": problem.id,
                "gold": problem.answer,
                "answers": answers[i],
                "classes": None if classes is None else classes[i],
                "correct": correct,
                "head_scores": head,
                "deepconf": conf,
                "status": scored.status[i * k : (i + 1) * k],
                **(
                    vote_record(classes[i], correct, conf, head)
                    if classes is not None
                    else {"votes": None, "vote_correct": None}
                ),
            }
        )
    return records


def write_report(out_dir: Path, per_dataset: dict[str, list[dict]], meta: dict) -> dict[str, dict[str, float]]:
    """``metrics.json``, ``results.md`` (Tables 1/3 layout) and ``records.jsonl`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = {name: aggregate(records) for name, records in per_dataset.items()}
    (out_dir / "metrics.json").write_text(json.dumps({"metrics": metrics, **meta}, indent=2))
    with (out_dir / "records.jsonl").open("w") as f:
        for name, records in per_dataset.items():
            for r in records:
                f.write(json.dumps({"dataset": name, **r}) + "\n")
    names = list(metrics)
    labels = {
        "avg@k": "mean accuracy (avg@k)",
        "pass@k": "pass@k",
        "maj@k": "majority vote (maj@k)",
        "deepconf@k": "DeepConf-weighted vote",
        "arrol@k": "ARRoL quality-weighted vote",
    }
    rows = []
    for m in METRICS:
        values = [metrics[n][m] for n in names]
        known = [v for v in values if v is not None]
        rows.append(
            [
                labels[m],
                *("—" if v is None else f"{100 * v:.2f}" for v in values),
                f"{100 * sum(known) / len(known):.2f}" if known else "—",
            ]
        )
    lines = [
        f"Evaluation of `{meta.get('checkpoint')}`, k = {meta.get('k')} samples per problem, "
        f"T = {meta.get('temperature')}.",
        *([f"Scored: {meta['data']}."] if meta.get("data") else []),
        "",
        *table_lines(["metric", *names, "avg"], rows),
    ]
    if any(metrics[n]["maj@k"] is None for n in names):
        lines += ["", f"—: the reward ({meta.get('reward')}) extracts no answers, so there are none to vote over."]
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    return metrics
