"""The policy side of the probe: a prompt's rollouts' log-probs with the prompt run once, a subset's GRPO gradient at
the sampling policy, and one optimizer step measured and undone.

Decisions:
- **Training's loss at ratio 1.** A subset's gradient is that of :func:`~arrol_pl.core.losses.ppo_clip_loss` with
  π_old = π_θ (the same forward, detached): ratio 1, no clip active, no KL term. Advantages are
  :func:`~arrol_pl.core.advantages.grpo_advantages` over the subset's own rewards, per prompt; the loss is aggregated
  (``loss_agg_mode``) over the whole batch of prompts as one mini-batch, its denominators (tokens, rollouts) the
  batch's, each prompt's share back-propagated on its own, as training's micro-batches are. No gradient clipping.
- **Rows with zero advantage are not run**: their loss and gradient are exactly 0; they still count in the
  denominators, as they do in training.
- **The prompt runs once per prompt** (its KV cache repeated over the prompt's rollouts, the gradient flowing back
  into it), not once per rollout: the log-probs are :func:`~arrol_pl.train.policy.logprobs.response_log_probs`'s (a test
  checks), at a fraction of the cost where the prompt is the longer part (few-shot prompts).
- **A step is undone once measured**: :func:`after_step` runs a fresh optimizer's first step on the given gradient
  (plain SGD; AdamW, whose first update is lr·g / (|g| + ε) ≈ lr·sign(g) per parameter), measures, and puts the
  parameters back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from arrol_pl.core.advantages import grpo_advantages
from arrol_pl.core.losses import ppo_clip_loss


def prompt_log_probs(
    model: nn.Module, prompt: Sequence[int], responses: Sequence[Sequence[int]], temperature: float
) -> torch.Tensor:
    """``(k, W)`` log π(response token | prefix) of ``k`` non-empty responses to one ``prompt`` (W the longest), 0 at
    padding, logits divided by ``temperature``; differentiable when grad is enabled."""
    device = next(model.parameters()).device
    k, width = len(responses), max(len(r) for r in responses)
    ids = torch.zeros((k, width), dtype=torch.long)
    for row, tokens in enumerate(responses):
        ids[row, : len(tokens)] = torch.as_tensor(tokens)
    ids = ids.to(device)
    head = model(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True, logits_to_keep=1)
    logits = [head.logits[:, -1:].expand(k, 1, -1)]  # the prompt's last position scores every first token
    if width > 1:  # right padding: the padded positions come after every real one and are never read
        cache = head.past_key_values
        cache.batch_repeat_interleave(k)
        logits.append(model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True).logits)
    logp = torch.log_softmax(torch.cat(logits, 1).float() / temperature, dim=-1)
    taken = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return taken * response_mask(torch.tensor([len(r) for r in responses]), width).to(device)


def response_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``(k, width)`` float 0/1: the real tokens of responses of ``lengths: (k,)``."""
    return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()


def by_group(group_ids: Sequence[int]) -> dict[int, list[int]]:
    """Row indices by group (prompt), in row order."""
    out: dict[int, list[int]] = {}
    for row, g in enumerate(group_ids):
        out.setdefault(int(g), []).append(row)
    return out


def flat_size(params: Sequence[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)


def subset_gradient(
    model: nn.Module,
    params: Sequence[nn.Parameter],
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    rewards: torch.Tensor,
    group_ids: Sequence[int],
    temperature: float,
    loss_agg_mode: str,
    norm_length: int,
) -> torch.Tensor:
    """``(D,)`` float32: the gradient over ``params`` (flattened in their order) of the GRPO loss of N rollouts at
    ratio 1 (module docstring). ``prompt_ids, response_ids``: N token lists; ``rewards: (N,)``; ``group_ids: (N,)``
    the prompt of each (a prompt's rollouts share its ``prompt_ids``); ``norm_length``: the L of
    ``seq-mean-token-sum-norm``."""
    advantages = grpo_advantages(torch.as_tensor(rewards, dtype=torch.float32), torch.as_tensor(group_ids))
    lengths = torch.tensor([len(r) for r in response_ids])
    totals = {"total_tokens": int(lengths.sum()), "total_seqs": int((lengths > 0).sum())}
    flat = torch.zeros(flat_size(params))
    for rows in by_group(group_ids).values():
        live = [i for i in rows if advantages[i] != 0 and lengths[i] > 0]
        if not live:
            continue
        lp = prompt_log_probs(model, prompt_ids[live[0]], [response_ids[i] for i in live], temperature)
        mask = response_mask(lengths[live], lp.shape[1]).to(lp.device)
        loss = ppo_clip_loss(
            lp,
            lp.detach(),
            advantages[live].to(lp.device),
            mask,
            loss_agg_mode=loss_agg_mode,
            norm_length=norm_length,
            **totals,
        ).loss
        grads = torch.autograd.grad(loss, list(params), allow_unused=True)
        flat += torch.cat(
            [
                (torch.zeros(p.numel()) if g is None else g.detach().float().flatten().cpu())
                for p, g in zip(params, grads)
            ]
        )
    return flat


@torch.no_grad()
def mean_log_probs(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    group_ids: Sequence[int],
    temperature: float,
) -> torch.Tensor:
    """``(N,)`` float64: each rollout's mean per-token log-prob (NaN for an empty response), each prompt run once."""
    out = torch.full((len(response_ids),), float("nan"), dtype=torch.float64)
    for rows in by_group(group_ids).values():
        rows = [i for i in rows if len(response_ids[i]) > 0]
        if rows:
            lp = prompt_log_probs(model, prompt_ids[rows[0]], [response_ids[i] for i in rows], temperature)
            out[rows] = lp.double().sum(1).cpu() / torch.tensor([len(response_ids[i]) for i in rows])
    return out


def after_step(
    params: Sequence[nn.Parameter],
    grad: torch.Tensor,
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    measure: Callable[[], float],
) -> float:
    """``measure()`` after the first step of a fresh ``optimizer(params)`` on the flat ``grad: (D,)``; the parameters
    are then restored and their gradients cleared."""
    saved = [p.detach().clone() for p in params]
    offset = 0
    for p in params:
        p.grad = grad[offset : offset + p.numel()].view_as(p).to(device=p.device, dtype=p.dtype).clone()
        offset += p.numel()
    try:
        optimizer(list(params)).step()
        return measure()
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
                p.grad = None
