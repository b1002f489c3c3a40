"""DeepConf trace confidence (Fu et al. 2025; paper §3), the baseline the quality head is compared to.

- Token confidence ``C_t = -(1/k) Σ_{j<=k} log P_t(j)`` over the top-k candidate tokens (k = 20).
  High when the distribution is peaked (top-k alternatives improbable).
- Group confidence: the mean of C_t over a sliding window of ``window`` tokens (DeepConf: 2048);
  a trace shorter than the window forms one group.
- Trace scores: ``lowest_group`` (min over windows), ``bottom10`` (mean of the lowest 10 % of windows),
  ``tail`` (mean C_t over the last ``tail_tokens`` tokens), ``mean`` (self-certainty-style average).
- Prefix statistics (beyond the paper): five numbers per rollout prefix from the same log-probs
  (:func:`prefix_statistics`), an input the quality head can read (``head.input=stats``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

TRACE_MODES = ("lowest_group", "bottom10", "tail", "mean")


def token_confidence(topk_logprobs: torch.Tensor) -> torch.Tensor:
    """``topk_logprobs: (..., T, k)`` log-probs of the k most likely tokens → ``(..., T)`` confidences."""
    return -topk_logprobs.to(torch.float64).mean(dim=-1)


def group_confidence(token_conf: torch.Tensor, window: int = 2048) -> torch.Tensor:
    """Sliding-window means of ``token_conf: (T,)`` → ``(max(1, T - window + 1),)``."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    c = token_conf.to(torch.float64).flatten()
    if c.numel() == 0:
        raise ValueError("group_confidence needs at least one token")
    w = min(window, c.numel())
    csum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(c, 0)])
    return (csum[w:] - csum[:-w]) / w


def trace_confidence(
    token_conf: torch.Tensor,
    mode: str = "lowest_group",
    window: int = 2048,
    tail_tokens: int = 2048,
    bottom_fraction: float = 0.1,
) -> float:
    """One trace's DeepConf score from its token confidences ``(T,)``."""
    if mode == "mean":
        return float(token_conf.to(torch.float64).mean())
    if mode == "tail":
        return float(token_conf.to(torch.float64)[-tail_tokens:].mean())
    groups = group_confidence(token_conf, window)
    if mode == "lowest_group":
        return float(groups.min())
    if mode == "bottom10":
        n = max(1, math.ceil(bottom_fraction * groups.numel()))
        return float(torch.topk(groups, n, largest=False).values.mean())
    raise ValueError(f"unknown trace confidence mode {mode!r}; choose one of {list(TRACE_MODES)}")


PREFIX_STATISTICS = ("mean_logprob", "min_logprob", "last_logprob", "mean_confidence", "top1_share")
"""The prefix statistics a quality head can read instead of (or beside) the hidden state (``head.input=stats``)."""
STATISTICS_TOPK = 20
"""Candidates per token behind :func:`prefix_statistics`' confidence (DeepConf's k)."""


def prefix_statistics(
    tokens: Sequence[int], logprobs: Sequence[Mapping[int, float]], length: int, topk: int = STATISTICS_TOPK
) -> torch.Tensor:
    """``(5,)`` float64 :data:`PREFIX_STATISTICS` of a rollout's first ``min(len(tokens), len(logprobs), length)``
    tokens, from the per-token ``{token id: log-prob}`` the engine sampled with (top-k candidates plus the sampled
    token): the mean, min and last sampled-token log-prob, the mean DeepConf token confidence over the top
    ``topk`` and the share of tokens that were the most likely one. No forward pass."""
    n = min(len(tokens), len(logprobs), length)
    if n < 1:
        raise ValueError(
            f"prefix_statistics needs at least one token with log-probs, got {len(tokens)} tokens, "
            f"{len(logprobs)} log-prob entries, length {length}"
        )
    sampled, conf, top1 = [], [], []
    for t in range(n):
        entry = logprobs[t]
        if tokens[t] not in entry:
            raise ValueError(f"log-probs of token {t} lack the sampled token {tokens[t]}")
        values = sorted(entry.values(), reverse=True)[:topk]
        sampled.append(entry[tokens[t]])
        conf.append(-sum(values) / len(values))
        top1.append(float(entry[tokens[t]] >= values[0]))
    s = torch.tensor(sampled, dtype=torch.float64)
    return torch.tensor(
        [float(s.mean()), float(s.min()), float(s[-1]), sum(conf) / n, sum(top1) / n], dtype=torch.float64
    )
