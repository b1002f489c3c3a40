"""Re-batching survivors and computing per-token log-probs (Algorithm 1 line 8–9; §4.3 (ii)).

Decisions:
- Survivors are sorted by total length and packed greedily into micro-batches whose padded size
  ``rows × longest`` stays under a token budget, so a batch of short and long rollouts wastes little
  compute on padding. The order is returned, so results map back to rollouts.
- Right padding; log-probs are taken only at response positions (the logits of position t score
  token t+1), with logits divided by the sampling temperature, as the engine sampled from them.
- Memory: the model's forward (its root forward, so FSDP2's hooks gather the LM head as usual) computes logits
  only from the first position that scores a response token on (``logits_to_keep``), and the float32
  log-softmax runs over :data:`CHUNK_ELEMENTS` logits at a time, forward and backward (:class:`TokenLogProbs`):
  the step keeps the logits in the compute dtype and, in the backward, their gradient in the same dtype, instead
  of float32 copies of the whole micro-batch's logits (``arrol_pl/train/memory/components.py`` counts both).
- Log-probs that outlive a micro-batch (old and reference log-probs, computed once per step and reused
  by every PPO mini-batch and epoch) are kept per row, ``(R_i,)``, so each mini-batch can pack its rows
  into its own buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from arrol_pl.train.memory.components import LOGPROB_CHUNK_ELEMENTS as CHUNK_ELEMENTS


@dataclass(frozen=True)
class MicroBatch:
    """Rows ``indices`` of the survivor list, packed: ``input_ids, attention_mask: (b, L)``;
    ``response_mask: (b, R)`` marks real response tokens; ``prompt_lengths, response_lengths: (b,)``."""

    indices: list[int]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum())


def length_buckets(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Greedy packing by descending length: each bucket's ``len(bucket) * max(lengths)`` <= ``max_tokens``
    (a single sequence longer than the budget gets a bucket of its own)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) + 1) * longest > max_tokens:
            buckets.append(current)
            current = []
        current.append(i)
    if current:
        buckets.append(current)
    return buckets


def pack(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], indices: list[int], pad_id: int
) -> MicroBatch:
    """Right-pad ``prompt + response`` for the rows ``indices``."""
    p_len = torch.tensor([len(prompts[i]) for i in indices])
    r_len = torch.tensor([len(responses[i]) for i in indices])
    total = int((p_len + r_len).max())
    r_max = max(int(r_len.max()), 1)
    input_ids = torch.full((len(indices), total), pad_id, dtype=torch.long)
    attention = torch.zeros((len(indices), total), dtype=torch.long)
    for row, i in enumerate(indices):
        seq = list(prompts[i]) + list(responses[i])
        input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[row, : len(seq)] = 1
    response_mask = (torch.arange(r_max).unsqueeze(0) < r_len.unsqueeze(1)).long()
    return MicroBatch(indices, input_ids, attention, response_mask, p_len, r_len)


def make_micro_batches(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], max_tokens: int, pad_id: int
) -> list[MicroBatch]:
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    return [pack(prompts, responses, b, pad_id) for b in length_buckets(lengths, max_tokens)]


def micro_batch_count(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], max_tokens: int) -> int:
    """How many length buckets :func:`make_micro_batches` makes of these rows."""
    return len(length_buckets([len(p) + len(r) for p, r in zip(prompts, responses)], max_tokens))


def response_log_probs(
    model: nn.Module, batch: MicroBatch, temperature: float = 1.0, chunk_elements: int = CHUNK_ELEMENTS
) -> torch.Tensor:
    """``(b, R)`` log π(response token | prefix) under ``model`` (a transformers causal LM); 0 at padding.
    ``chunk_elements``: logits (tokens × vocabulary) turned to float32 at once."""
    device = next(model.parameters()).device
    # Response token k of row j sits at position p_j + k; it is scored by the logits at p_j + k - 1, so no
    # position before the shortest prompt's last one scores anything.
    first = int(batch.prompt_lengths.min()) - 1
    out = model(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention_mask.to(device),
        use_cache=False,
        logits_to_keep=batch.input_ids.shape[1] - first,
    )
    rows, k = batch.response_mask.bool().nonzero(as_tuple=True)  # the real response tokens, on the host
    positions = batch.prompt_lengths[rows] - 1 + k
    targets = batch.input_ids[rows, positions + 1]
    rows, k, kept, targets = (t.to(device) for t in (rows, k, positions - first, targets))
    logp = TokenLogProbs.apply(out.logits, rows, kept, targets, temperature, chunk_elements)
    return logp.new_zeros(batch.response_mask.shape).index_put((rows, k), logp)


class TokenLogProbs(torch.autograd.Function):
    """``log_softmax(logits[rows, positions] / temperature)[targets]``, ``(N,)`` float32, for ``logits: (b, K, V)``
    and ``rows, positions, targets: (N,)`` (distinct ``(row, position)`` pairs), over chunks of
    ``chunk_elements`` logits. It keeps the logits themselves for the backward (the model's output, no copy) and
    each chunk's log-sum-exp; the backward recomputes a chunk's softmax and writes the logits' gradient, in their
    dtype: ``(onehot(target) − softmax) · grad / temperature`` at the picked positions, 0 elsewhere."""

    @staticmethod
    def forward(ctx, logits, rows, positions, targets, temperature: float, chunk_elements: int):
        out = torch.empty(rows.numel(), dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        for c in _chunks(rows.numel(), logits.shape[-1], chunk_elements):
            out[c], lse[c] = _chunk_log_probs(logits, rows[c], positions[c], targets[c], temperature)
        ctx.save_for_backward(logits, rows, positions, targets, lse)
        ctx.temperature, ctx.chunk_elements = temperature, chunk_elements
        return out

    @staticmethod
    def backward(ctx, grad):
        logits, rows, positions, targets, lse = ctx.saved_tensors
        grad_logits = torch.zeros_like(logits)
        for c in _chunks(rows.numel(), logits.shape[-1], ctx.chunk_elements):
            grad_logits[rows[c], positions[c]] = _chunk_grad(
                logits, rows[c], positions[c], targets[c], lse[c], grad[c], ctx.temperature
            )
        return grad_logits, None, None, None, None, None


# One chunk per call: its float32 buffer is freed on return, before the next chunk's is made.
def _chunk_log_probs(logits, rows, positions, targets, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits[rows, positions].float().div_(temperature)  # indexing copies: in place is safe
    lse = torch.logsumexp(x, dim=-1)
    return x.gather(-1, targets[:, None]).squeeze(-1) - lse, lse


def _chunk_grad(logits, rows, positions, targets, lse, grad, temperature: float) -> torch.Tensor:
    g = grad[:, None] / temperature
    softmax = logits[rows, positions].float().div_(temperature).sub_(lse[:, None]).exp_()
    return softmax.mul_(-g).scatter_add_(-1, targets[:, None], g).to(logits.dtype)


def _chunks(n: int, vocab: int, chunk_elements: int) -> list[slice]:
    step = max(1, chunk_elements // vocab)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


@torch.no_grad()
def score_rows(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    max_tokens: int,
    pad_id: int,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """Per row ``i``: ``(len(responses[i]),)`` log-probs of its response under ``model``, without gradient,
    computed in length buckets of ``max_tokens`` (rows in input order, on the model's device)."""
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for mb in make_micro_batches(prompts, responses, max_tokens, pad_id):
        lp = response_log_probs(model, mb, temperature)
        for row, i in enumerate(mb.indices):
            out[i] = lp[row, : int(mb.response_lengths[row])].clone()
    return out  # type: ignore[return-value]


def gather_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Right-pad per-row ``(R_i,)`` tensors with 0 into ``(len(rows), width)`` (a micro-batch's layout)."""
    out = rows[0].new_zeros((len(rows), width))
    for j, r in enumerate(rows):
        out[j, : r.numel()] = r
    return out
