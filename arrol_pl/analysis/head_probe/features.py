"""The probe's features: the engine's detect-time hidden state (and the probe-only variants) at every detection
length, the prefix log-prob statistics and DeepConf's trace confidence over the same prefixes.

Decisions:
- **The engine's feature.** The feature at L of a rollout with prompt length P and n response tokens is
  transformers' ``last_hidden_state[P + min(n, L) - 2]`` over ``prompt + response``: the position
  convention of :mod:`arrol_pl.engine.engine` (the state that sampled token L, or the last token of a
  shorter rollout). ``last_hidden_state`` is post-norm, like the engine's tap; it is read from the
  decoder (``model.base_model``) so no LM-head logits are computed. One forward per rollout serves every
  L; right padding leaves the real tokens' positions and attention as they are.
- **Eligibility is the engine's.** At L a rollout is a prune candidate only if it reached token L
  unfinished, i.e. it has more than L response tokens (L < max_tokens); a rollout whose L-th token ended
  it is complete and is never scored for pruning. Only eligible rollouts enter the probe at L.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn

from arrol_pl.analysis.evaluation import DeepConfSettings, trace_scores
from arrol_pl.core.confidence import PREFIX_STATISTICS, STATISTICS_TOPK, prefix_statistics
from arrol_pl.engine.console import progress


def detect_lengths(fractions: Sequence[float], max_tokens: int) -> list[int]:
    """L = floor(fraction · max_tokens) for each fraction; each must give a distinct 1 <= L < max_tokens."""
    out = []
    for f in fractions:
        length = math.floor(f * max_tokens)
        if not 1 <= length < max_tokens:
            raise ValueError(f"fraction {f:g} of max_tokens={max_tokens} gives L={length}; need 1 <= L < max_tokens")
        if length in out:
            raise ValueError(f"fraction {f:g} of max_tokens={max_tokens} gives L={length} twice: pass distinct lengths")
        out.append(length)
    return out


def detect_position(prompt_length: int, response_length: int, detect_length: int) -> int:
    """0-based index into ``prompt + response`` of the engine's feature at ``detect_length`` (module docstring)."""
    if prompt_length < 1 or response_length < 1 or detect_length < 1:
        raise ValueError(
            f"detect_position needs positive lengths, got prompt={prompt_length}, response={response_length}, "
            f"L={detect_length}"
        )
    return prompt_length + min(response_length, detect_length) - 2


def eligible_at(response_lengths: torch.Tensor, detect_length: int) -> torch.Tensor:
    """``(N,)`` bool: the rollout reached token ``detect_length`` unfinished (the engine's ``eligible``)."""
    return torch.as_tensor(response_lengths) > detect_length


FEATURE_KINDS = ("last", "mean", "middle", "stats", "last+stats")
"""Head inputs the probe compares (module docstring): the paper's ``last``, a ``mean`` over the prefix, a
``middle`` layer, the prefix ``stats`` the engine samples with (no forward pass), and ``last+stats``
concatenated (what ``head.input=last+stats`` feeds the online head)."""


@torch.no_grad()
def prefix_features(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    lengths: Sequence[int],
    kinds: Sequence[str] = ("last",),
    pad_id: int = 0,
    batch_tokens: int = 16384,
) -> dict[str, dict[int, torch.Tensor]]:
    """Hidden-state features of every rollout at every L in ``lengths``, one forward per distinct prompt.

    The rows that sampled response tokens ``1..min(n, L)`` are the prompt's last position and the first
    ``min(n, L) - 1`` response tokens; so each distinct prompt is run once (its KV cache then shared by
    every rollout of it, as the engine's prefix cache shares it) and each response only up to
    ``max(lengths) - 1`` tokens. Right padding never reaches the rows read (causal attention).

    Args:
        model: a transformers causal LM (``base_model`` is its decoder).
        prompt_ids, response_ids: N token lists (the engine's ``Rollout.prompt_token_ids`` / ``response_token_ids``).
        lengths: detection lengths L.
        kinds: any of ``last`` (post-norm final layer at :func:`detect_position`: the engine's feature),
            ``mean`` (``last`` averaged over the rows that sampled tokens ``1..min(n, L)``) and ``middle``
            (the residual stream after decoder layer ``num_layers // 2`` at the same position).
        pad_id: right-padding id.
        batch_tokens: rows × response length per response forward.
    Returns:
        ``{kind: {L: (N, D) float32 on CPU}}``.
    """
    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ValueError(f"need as many prompts as responses (> 0), got {len(prompt_ids)} and {len(response_ids)}")
    hidden = [k for k in FEATURE_KINDS if "stats" not in k]
    unknown = set(kinds) - set(hidden)
    if unknown:
        raise ValueError(f"prefix_features kinds {sorted(unknown)}: choose from {hidden}")
    if any(len(p) < 1 or len(r) < 1 for p, r in zip(prompt_ids, response_ids)):
        raise ValueError("every prompt and response needs at least one token")
    decoder = model.base_model
    device = next(model.parameters()).device
    middle = model.config.num_hidden_layers // 2
    width = max(lengths)
    out = {
        kind: {length: torch.empty(len(prompt_ids), model.config.hidden_size) for length in lengths} for kind in kinds
    }
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompt_ids):
        by_prompt.setdefault(tuple(p), []).append(i)
    for prompt, members in progress(by_prompt.items(), desc="features", leave=False):
        head = decoder(input_ids=torch.tensor([prompt], device=device), use_cache=True, output_hidden_states=True)
        rows_per_batch = max(1, batch_tokens // max(width - 1, 1))
        for start in range(0, len(members), rows_per_batch):
            idx = members[start : start + rows_per_batch]
            n_resp = [len(response_ids[i]) for i in idx]
            # rows 0..k-1: the prompt's last position, then response tokens 0..k-2
            final = [head.last_hidden_state[0, -1:].expand(len(idx), 1, -1)]
            mid = [head.hidden_states[middle][0, -1:].expand(len(idx), 1, -1)]
            if width > 1:
                tail = torch.full((len(idx), width - 1), pad_id, dtype=torch.long)
                for j, i in enumerate(idx):
                    toks = list(response_ids[i][: width - 1])
                    tail[j, : len(toks)] = torch.tensor(toks)
                cache = copy.deepcopy(head.past_key_values)
                cache.batch_repeat_interleave(len(idx))
                body = decoder(
                    input_ids=tail.to(device), past_key_values=cache, use_cache=True, output_hidden_states=True
                )
                final.append(body.last_hidden_state)
                mid.append(body.hidden_states[middle])
            final_rows, mid_rows = torch.cat(final, 1).float().cpu(), torch.cat(mid, 1).float().cpu()
            for length in lengths:
                k = torch.tensor([min(n, length) for n in n_resp])
                rows = torch.arange(len(idx))
                if "last" in kinds:
                    out["last"][length][idx] = final_rows[rows, k - 1]
                if "middle" in kinds:
                    out["middle"][length][idx] = mid_rows[rows, k - 1]
                if "mean" in kinds:
                    upto = (torch.arange(final_rows.shape[1])[None, :] < k[:, None]).float()
                    out["mean"][length][idx] = (final_rows * upto[..., None]).sum(1) / k[:, None].float()
    return out


def detect_features(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    lengths: Sequence[int],
    pad_id: int = 0,
    batch_tokens: int = 16384,
) -> dict[int, torch.Tensor]:
    """The engine's detect-time feature (``last``) at every L: ``{L: (N, D)}``, row i at
    ``detect_position(P_i, n_i, L)`` (:func:`prefix_features`)."""
    return prefix_features(model, prompt_ids, response_ids, lengths, ("last",), pad_id, batch_tokens)["last"]


def prefix_stats(
    response_ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[dict[int, float]] | None],
    detect_length: int,
    topk: int = STATISTICS_TOPK,
) -> torch.Tensor:
    """``(N, 5)`` :func:`~arrol_pl.core.confidence.prefix_statistics` of each rollout's first ``min(n, L)``
    tokens from the log-probs the engine sampled with (the engine's ``stats`` feature; no forward pass).
    NaN rows without log-probs."""
    out = torch.full((len(response_ids), len(PREFIX_STATISTICS)), float("nan"))
    for i, (tokens, lp) in enumerate(zip(response_ids, logprobs)):
        if lp:
            out[i] = prefix_statistics(tokens, lp, detect_length, topk).float()
    return out


def deepconf_at(
    logprobs: Sequence[Sequence[dict[int, float]] | None], detect_length: int, settings: DeepConfSettings
) -> torch.Tensor:
    """``(N,)`` float64 DeepConf trace confidence over each rollout's first ``detect_length`` tokens (NaN without
    log-probs)."""
    return torch.tensor(
        [trace_scores(None if lp is None else list(lp[:detect_length]), settings) for lp in logprobs],
        dtype=torch.float64,
    )
