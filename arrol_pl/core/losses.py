"""Policy loss, loss aggregation and KL estimators, as verl's vanilla PPO (GRPO §3; DAPO; Dr.GRPO).

Every function is a pure formula on ``(N, T)`` per-token tensors (N sequences, T response positions, a
``(N, T)`` 0/1 mask of real response tokens) and ``(N,)`` per-sequence advantages.

Decisions (verl ``trainer/ppo/core_algos.py``: ``compute_policy_loss_vanilla``, ``agg_loss``, ``kl_penalty``):
- Ratio ``r = exp(clamp(log π_θ - log π_old, -20, 20))``: a log-ratio of 100 gives ``e^20``, never inf/NaN.
- PPO-clip with asymmetric bounds ``[1 - ε_low, 1 + ε_high]`` (DAPO's clip-higher: 0.2 / 0.28; GRPO: 0.2 /
  0.2), and dual-clip for negative advantages (Ye et al. 2020): the per-token loss of a token with
  ``A < 0`` is capped at ``-c·A`` (``c = clip_ratio_c``, default 3.0, > 1; None turns it off), so a huge
  ratio on a bad token cannot dominate the step.
- Aggregation modes ``token-mean`` (DAPO), ``seq-mean-token-mean`` (GRPO), ``seq-mean-token-sum`` and
  ``seq-mean-token-sum-norm`` (Dr.GRPO: token sums divided by a constant length). The denominators may be
  given for the whole mini-batch, so micro-batch losses sum to the mini-batch loss (gradient accumulation
  leaves the loss unchanged). ``seq-mean-token-sum-norm`` divides by the number of sequences as well as the
  constant length (verl sums the sequences instead), so the step size does not grow with the batch; the
  gradient direction is verl's (``algo.verl_parity`` passes ``total_seqs=1`` to sum them as verl does).
- Rows with an empty mask carry no token: they add 0 and are left out of every denominator (token count
  and sequence count); an all-empty mask gives a loss of exactly 0 (no NaN), still attached to the graph.
- KL to the reference per token, verl's names: ``k1``/``kl`` ``= log π - log π_ref``; ``k2``/``mse``
  ``= ½ (log π - log π_ref)²``; ``k3``/``low_var_kl`` ``= e^Δ - Δ - 1`` with ``Δ = log π_ref - log π``
  clamped to ±20, the result clamped to [-10, 10] (Schulman's non-negative estimator).
- Truncated importance sampling (Yao et al. 2025, verl's ``tis_imp_ratio_cap``): the engine samples with
  slightly different numerics than the trainer; ``w = min(π_old / π_engine, cap)`` (detached) multiplies
  the per-token policy loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL_ESTIMATORS = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}
"""Accepted KL estimator names (verl's) → the formula they select."""

LOG_RATIO_CLAMP = 20.0
"""|log r| bound before ``exp`` (verl)."""
K3_CLAMP = 10.0
"""|k3| bound (verl's ``low_var_kl``)."""


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over ``mask == 1`` (any shapes that broadcast); 0 for an empty mask."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def batch_counts(mask: torch.Tensor) -> tuple[int, int]:
    """``(tokens, sequences)`` of a ``(N, T)`` mask: the denominators :func:`aggregate_loss` uses; a row
    with an empty mask counts as no sequence."""
    lengths = mask.sum(-1)
    return int(lengths.sum()), int((lengths > 0).sum())


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    norm_length: int | None = None,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    With ``S_i = Σ_t m_it ℓ_it`` (token sum of row i), ``n_i = Σ_t m_it``, ``N_tok = Σ_i n_i`` and
    ``N_seq = #{i : n_i > 0}``:

    - ``token-mean``: ``Σ_i S_i / N_tok``
    - ``seq-mean-token-mean``: ``Σ_{i: n_i > 0} (S_i / n_i) / N_seq``
    - ``seq-mean-token-sum``: ``Σ_i S_i / N_seq``
    - ``seq-mean-token-sum-norm``: ``Σ_i S_i / (N_seq · L)``, ``L = norm_length`` (default ``T``;
      Dr.GRPO uses the maximum response length)

    Args:
        loss_mat: ``(N, T)`` per-token loss.
        mask: ``(N, T)`` 1 for response tokens.
        mode: one of :data:`LOSS_AGG_MODES`.
        norm_length: ``L`` of ``seq-mean-token-sum-norm``.
        total_tokens, total_seqs: ``N_tok`` and ``N_seq`` of the *whole* mini-batch when this call sees one
            micro-batch of it (:func:`batch_counts` of the mini-batch), so that summing the micro-batch
            losses gives the mini-batch loss. Default: this call's own counts.
    Returns:
        a scalar; 0 when no token is masked in.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; choose one of {list(LOSS_AGG_MODES)}")
    mask = mask.to(loss_mat.dtype)
    own_tokens, own_seqs = batch_counts(mask)
    n_tok = max(total_tokens if total_tokens is not None else own_tokens, 1)
    n_seq = max(total_seqs if total_seqs is not None else own_seqs, 1)
    seq_sums = (loss_mat * mask).sum(-1)
    if mode == "token-mean":
        return seq_sums.sum() / n_tok
    if mode == "seq-mean-token-mean":
        return (seq_sums / mask.sum(-1).clamp(min=1)).sum() / n_seq
    if mode == "seq-mean-token-sum":
        return seq_sums.sum() / n_seq
    norm = float(norm_length if norm_length is not None else loss_mat.shape[-1])
    return seq_sums.sum() / (n_seq * norm)


def canonical_kl(kind: str) -> str:
    """``k1`` | ``k2`` | ``k3`` for any accepted name (:data:`KL_ESTIMATORS`)."""
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; choose one of {list(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[kind]


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ || π_ref) on tokens sampled from π_θ, ``(N, T)`` (see the module doc)."""
    kind = canonical_kl(kind)
    if kind == "k1":
        return log_probs - ref_log_probs
    if kind == "k2":
        return 0.5 * (log_probs - ref_log_probs).square()
    delta = (ref_log_probs - log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(delta) - delta - 1.0).clamp(-K3_CLAMP, K3_CLAMP)


def truncated_is_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, cap: float) -> torch.Tensor:
    """``(N, T)`` detached ``min(exp(clamp(log π_old - log π_engine, ±20)), cap)``: the truncated importance
    weight correcting for the engine's sampling distribution (verl's TIS)."""
    if cap <= 0:
        raise ValueError(f"the truncated importance-sampling cap must be > 0, got {cap}")
    log_w = (old_log_probs - rollout_log_probs).detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_w).clamp(max=cap)


@dataclass(frozen=True)
class PolicyLossOutput:
    """The loss and its diagnostics; every diagnostic is a detached scalar over the masked tokens.

    ``clip_fraction = clip_fraction_low + clip_fraction_high``: tokens whose clipped term is active
    (``A > 0, r > 1 + ε_high``: high; ``A < 0, r < 1 - ε_low``: low). ``dual_clip_fraction``: tokens with
    ``A < 0`` whose loss the dual clip caps (verl's ``pg_clipfrac_lower``). ``ppo_kl``: ``mean(log π_old -
    log π_θ)`` (verl's k1); ``approx_kl``: ``mean(r - 1 - log r)``, the non-negative k3 estimate of
    KL(π_old || π_θ). ``kl``: the reference KL estimate (0 without a reference). ``tokens``: masked tokens.
    """

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    clip_fraction_low: torch.Tensor
    clip_fraction_high: torch.Tensor
    dual_clip_fraction: torch.Tensor
    ppo_kl: torch.Tensor
    approx_kl: torch.Tensor
    ratio_min: torch.Tensor
    ratio_mean: torch.Tensor
    ratio_max: torch.Tensor
    kl: torch.Tensor
    tokens: int


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
    clip_ratio_c: float | None = 3.0,
    is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """verl's vanilla PPO policy loss plus ``β·KL``, aggregated by ``loss_agg_mode``.

    Per token, with ``r`` the clamped ratio (module doc):
    ``ℓ = max(-A r, -A clip(r, 1-ε_low, 1+ε_high))``; if ``A < 0`` and dual-clip is on, ``ℓ = min(ℓ, -A c)``;
    then ``ℓ ← w ℓ`` with the truncated IS weights ``w`` and ``ℓ ← ℓ + β KL(π_θ || π_ref)``.

    Shapes: ``log_probs, old_log_probs, ref_log_probs, response_mask, is_weights: (N, T)``;
    ``advantages: (N,)``. ``total_tokens``/``total_seqs``: see :func:`aggregate_loss` (micro-batch
    accumulation).
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual-clip bound) must be > 1, got {clip_ratio_c}")
    mask = response_mask.to(log_probs.dtype)
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(log_probs.dtype).unsqueeze(-1)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    negative = (adv < 0).expand_as(per_token)
    dual = torch.zeros_like(negative)
    if clip_ratio_c is not None:
        cap = -adv * clip_ratio_c
        dual = negative & (per_token > cap)
        per_token = torch.where(negative, torch.minimum(per_token, cap), per_token)
    if is_weights is not None:
        per_token = per_token * is_weights.to(per_token.dtype)
    kl = torch.zeros((), dtype=log_probs.dtype)
    if ref_log_probs is not None and kl_coef != 0.0:
        kl_mat = kl_penalty(log_probs, ref_log_probs, kl_estimator)
        per_token = per_token + kl_coef * kl_mat
        kl = masked_mean(kl_mat.detach(), mask)
    loss = aggregate_loss(per_token, mask, loss_agg_mode, norm_length, total_tokens, total_seqs)
    with torch.no_grad():
        clip_active = clipped > unclipped
        high = clip_active & ~negative
        real = mask > 0
        r = ratio.detach()
        any_token = bool(real.any())
        return PolicyLossOutput(
            loss=loss,
            clip_fraction=masked_mean(clip_active.to(mask.dtype), mask),
            clip_fraction_low=masked_mean((clip_active & negative).to(mask.dtype), mask),
            clip_fraction_high=masked_mean(high.to(mask.dtype), mask),
            dual_clip_fraction=masked_mean(dual.to(mask.dtype), mask),
            ppo_kl=masked_mean(-log_ratio.detach(), mask),
            approx_kl=masked_mean(r - 1.0 - log_ratio.detach(), mask),
            ratio_min=r[real].min() if any_token else torch.ones(()),
            ratio_mean=masked_mean(r, mask),
            ratio_max=r[real].max() if any_token else torch.ones(()),
            kl=kl,
            tokens=int(real.sum()),
        )
