"""Scoring the rollouts that reached L_detect in one engine step, apart from vLLM: the head's features from the
hidden rows the tap copied (and the prefix statistics of the log-probs, for a head that reads them), the head's
logit, and, with a prefix scorer (:mod:`arrol_pl.core.scorers`), the score the decision reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from arrol_pl.core.confidence import prefix_statistics
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.core.scorers import Prefix, PrefixScorer
from arrol_pl.engine.tracking import Track


def tapped_rows(tap, tracks: Sequence[Track], target: int) -> list[torch.Tensor]:
    """The hidden row the tap (:class:`~arrol_pl.engine.adapter.HiddenStateTap`) kept for each track that resolved
    this step: the one that sampled its ``min(n, target)``-th token, or an error naming the rollout."""
    rows = []
    for tr in tracks:
        row = tap.release(tr.internal_id)
        expected = min(len(tr.tokens), target) - 1
        if row is None or row.num_output != expected:
            got = None if row is None else row.num_output
            raise RuntimeError(
                f"hidden-state tap out of step for rollout {tr.ext_id}: row sampled after {got} tokens, "
                f"expected {expected} (vLLM runner contract changed? run tests/engine/test_adapter_contract.py)"
            )
        rows.append(row.feature())
    return rows


def score_tracks(
    tracks: Sequence[Track],
    rows: Sequence[torch.Tensor],
    head: QualityHead,
    device: torch.device,
    target: int,
    scorer: PrefixScorer | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> None:
    """Set each track's ``feature``, ``head_score`` and ``score`` (the head's logit, or ``scorer``'s score of the
    first ``min(n, target)`` tokens, all sampled by this step). ``rows``: the tap's hidden row of each track."""
    kinds = head.input_kind.split("+")
    parts = [torch.stack(list(rows)).to(device=device, dtype=torch.float32)] if "last" in kinds else []
    if "stats" in kinds:  # the log-probs of the same tokens, tracked as they streamed in
        stats = [prefix_statistics(tr.tokens, tr.logprobs, target) for tr in tracks]
        parts.append(torch.stack(stats).to(device=device, dtype=torch.float32))
    feats = torch.cat(parts, dim=1)
    with torch.inference_mode():
        scores = head(feats).float().cpu()
    feats = feats.cpu()
    for i, tr in enumerate(tracks):
        tr.feature = feats[i].clone()
        tr.head_score = tr.score = float(scores[i])
        if scorer is not None:
            n = min(len(tr.tokens), target)
            tokens = list(tr.tokens[:n])
            text = decode(tokens) if scorer.needs_text else None
            tr.score = float(
                scorer(Prefix(tr.prompt_index, tokens, None if tr.logprobs is None else tr.logprobs[:n], text))
            )
