"""What scores a rollout at L_detect: the quality head, or another scorer behind the same calibrator and survival
rule (``pruning.scorer``).

- ``head``: the paper's learned quality head on the policy's hidden state (the engine computes it in the step that
  samples token L_detect).
- ``confidence``: DeepConf's trace confidence of the prefix (Fu et al. 2025), training-free: the mean over the first
  L_detect tokens of the token confidence ``-(1/k) Σ_j log P_t(j)`` over the top ``k = 20`` candidates, as a log
  (:class:`ConfidenceScorer`).
- ``checker``: a process verifier on the prefix's text, for tasks that can check a prefix (the built-in arithmetic
  checks each completed line against its worked solution: :func:`arrol_pl.tasks.arithmetic.check_prefix`), the
  kind of score a process reward model gives a real task (:class:`CheckerScorer`).
- ``oracle`` (a study arm only): the rollouts run to the end, and the decision reads their outcome through noise
  set to a target AUC (:func:`oracle_scores`); the generation time the prune would have saved is credited by the
  decode-cost model (:mod:`.decode_cost`), as a term of its own.

A prefix scorer's score plays the head's part everywhere after it: it is what the calibrator bins
(``sigmoid(score)``), what h_t maps to the posterior q, and what the gate's AUC is measured on. The head still
learns on every run (its AUC is logged beside the scorer's), so a run with another scorer also says where the
head stands. Scores are on a logit-like scale so that the calibrator's bins on ``sigmoid(score)`` resolve them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .confidence import STATISTICS_TOPK

SCORERS = ("head", "confidence", "checker", "oracle")
"""``pruning.scorer``'s choices."""
PREFIX_SCORERS = ("confidence", "checker")
"""The scorers the engine applies at L_detect besides the head (they abort inside the engine, as the head does)."""


@dataclass
class Prefix:
    """A rollout at L_detect: its prompt's index in the generation, its first tokens, their log-prob candidates
    (``{token id: log-prob}`` per token, top-k plus the sampled one; None unless the scorer asked for ``topk``) and,
    when the scorer asked for it, their text."""

    prompt_index: int
    tokens: Sequence[int]
    logprobs: Sequence[Mapping[int, float]] | None = None
    text: str | None = None


@runtime_checkable
class PrefixScorer(Protocol):
    """``scorer(prefix) -> float``, higher for a rollout more likely to end correct.

    ``topk``: the log-prob candidates per token it needs (None: none); ``needs_text``: whether the engine must
    decode the prefix for it."""

    topk: int | None
    needs_text: bool

    def __call__(self, prefix: Prefix) -> float: ...


class ConfidenceScorer:
    """DeepConf's confidence of the prefix: ``log`` of the mean token confidence over its tokens (top ``topk``).

    A peaked next-token distribution puts the other candidates far below, so a confident prefix has a large mean
    ``-log P``; the log keeps the scale calibrator-friendly on any model (confidences reach the tens on large
    vocabularies, where ``sigmoid`` would put every rollout in the last bin)."""

    needs_text = False

    def __init__(self, topk: int = STATISTICS_TOPK) -> None:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.topk = topk

    def __call__(self, prefix: Prefix) -> float:
        if not prefix.logprobs:
            raise ValueError("the confidence scorer needs the prefix's log-probs (the engine samples with top-k)")
        n = min(len(prefix.tokens), len(prefix.logprobs))
        total = 0.0
        for entry in prefix.logprobs[:n]:
            values = sorted(entry.values(), reverse=True)[: self.topk]
            total += -sum(values) / len(values)
        return math.log(max(total / max(n, 1), 1e-6))


class CheckerScorer:
    """A process verifier on the prefix's text: ``check(problem, text) -> float`` per the prompt's problem.

    ``problems[prompt_index]`` is the problem of the generation's prompt ``prompt_index``."""

    topk = None
    needs_text = True

    def __init__(self, check: Callable[[object, str], float], problems: Sequence) -> None:
        self.check, self.problems = check, list(problems)

    def __call__(self, prefix: Prefix) -> float:
        if prefix.text is None:
            raise ValueError("the checker scorer needs the prefix's text")
        return float(self.check(self.problems[prefix.prompt_index], prefix.text))


def oracle_separation(auc: float) -> float:
    """The gap ``d`` between the classes' means (unit-variance Gaussian noise) that gives ``auc``:
    AUC = Φ(d / √2). AUC 1 is capped at d = 12 (pairs mis-ordered with probability under 1e-17)."""
    if not 0.5 <= auc <= 1.0:
        raise ValueError(f"oracle AUC must be in [0.5, 1], got {auc}")
    if auc >= 1.0 - 1e-12:
        return 12.0
    return math.sqrt(2.0) * float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(auc, dtype=torch.float64)))


def oracle_scores(labels: torch.Tensor, auc: float, generator: torch.Generator) -> torch.Tensor:
    """``(N,)`` scores from the outcomes ``labels (N,)`` (0/1) with unit Gaussian noise, the classes ``d`` apart
    (:func:`oracle_separation`) and centred on 0, so that any scorer of this AUC is what the decision sees."""
    d = oracle_separation(auc)
    noise = torch.randn(labels.shape, generator=generator, dtype=torch.float64)
    return (d * (labels.to(torch.float64) - 0.5) + noise).to(torch.float32)


def check_scorer(scorer: str, oracle_auc: float | None) -> None:
    """Refuse an unknown scorer, an oracle without its AUC and an AUC without the oracle (messages name the field)."""
    if scorer not in SCORERS:
        raise ValueError(f"scorer={scorer!r} is unknown; choose one of {list(SCORERS)}")
    if scorer == "oracle" and oracle_auc is None:
        raise ValueError("scorer=oracle needs oracle_auc: the AUC its noisy outcome scores are set to (0.5 to 1)")
    if oracle_auc is not None:
        if scorer != "oracle":
            raise ValueError(f"oracle_auc={oracle_auc} is the oracle's; scorer={scorer!r} does not use it (drop it)")
        if not 0.5 <= oracle_auc <= 1.0:
            raise ValueError(f"oracle_auc must be in [0.5, 1], got {oracle_auc}")
