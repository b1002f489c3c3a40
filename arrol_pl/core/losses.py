"""Policy loss, loss aggregation and KL estimators (GRPO §3; DAPO; Dr.GRPO).

Decisions:
- PPO-clip with asymmetric bounds ``[1 - ε_low, 1 + ε_high]`` (DAPO's clip-higher: 0.2 / 0.28;
  GRPO: 0.2 / 0.2). The ratio is π_θ / π_old per token.
- One aggregation switch (verl's modes): ``seq-mean-token-mean`` (GRPO), ``token-mean`` (DAPO),
  ``seq-mean-token-sum-norm`` (Dr.GRPO: token sum divided by a constant length).
- KL to the reference per token: ``k1 = log π - log π_ref``; ``k3 = exp(Δ) - Δ - 1`` with
  ``Δ = log π_ref - log π`` (Schulman's unbiased, non-negative estimator).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k3")


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    norm_length: int | None = None,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    Args:
        loss_mat: ``(N, T)`` per-token loss.
        mask: ``(N, T)`` 1 for response tokens.
        mode: one of :data:`LOSS_AGG_MODES`.
        norm_length: the constant of ``seq-mean-token-sum-norm`` (default ``T``; Dr.GRPO uses the
            maximum response length).
        total_tokens, total_seqs: the denominators of the *whole* mini-batch when this call sees one
            micro-batch of it, so that summing the micro-batch losses equals the mini-batch loss
            (gradient accumulation). Default: this call's own counts.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = total_tokens if total_tokens is not None else mask.sum().clamp(min=1)
        return (loss_mat * mask).sum() / denom
    if mode == "seq-mean-token-mean":
        lengths = mask.sum(-1)
        per_seq = (loss_mat * mask).sum(-1) / lengths.clamp(min=1)
        valid = lengths > 0
        denom = total_seqs if total_seqs is not None else valid.sum().clamp(min=1)
        return per_seq[valid].sum() / denom
    if mode == "seq-mean-token-sum-norm":
        norm = float(norm_length if norm_length is not None else loss_mat.shape[-1])
        n_seqs = total_seqs if total_seqs is not None else loss_mat.shape[0]
        return (loss_mat * mask).sum() / (n_seqs * norm)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; choose one of {list(LOSS_AGG_MODES)}")


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(π_θ || π_ref) estimate, ``(N, T)``."""
    if kind == "k1":
        return log_probs - ref_log_probs
    if kind == "k3":
        delta = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
        return torch.exp(delta) - delta - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; choose one of {list(KL_ESTIMATORS)}")


@dataclass(frozen=True)
class PolicyLossOutput:
    """``loss`` (scalar, to minimise), ``clip_fraction`` and ``kl`` (tokens-mean, 0 without a reference)."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    kl: torch.Tensor


def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    loss_agg_mode: str = "seq-mean-token-mean",
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    norm_length: int | None = None,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
) -> PolicyLossOutput:
    """Clipped surrogate ``-min(r A, clip(r, 1-ε_low, 1+ε_high) A)`` plus ``β KL``.

    Shapes: ``log_probs, old_log_probs, ref_log_probs, response_mask: (N, T)``; ``advantages: (N,)``.
    ``total_tokens``/``total_seqs``: see :func:`aggregate_loss` (micro-batch accumulation).
    """
    ratio = torch.exp(log_probs - old_log_probs)
    adv = advantages.to(log_probs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    mask = response_mask.to(log_probs.dtype)
    kl = torch.zeros((), dtype=log_probs.dtype)
    if ref_log_probs is not None and kl_coef != 0.0:
        kl_mat = kl_penalty(log_probs, ref_log_probs, kl_estimator)
        per_token = per_token + kl_coef * kl_mat
        kl = (kl_mat.detach() * mask).sum() / mask.sum().clamp(min=1)
    loss = aggregate_loss(per_token, mask, loss_agg_mode, norm_length, total_tokens, total_seqs)
    clip_frac = (((clipped < unclipped).to(mask.dtype)) * mask).sum() / mask.sum().clamp(min=1)
    return PolicyLossOutput(loss=loss, clip_fraction=clip_frac.detach(), kl=kl)
