"""The survivors of a step: the rollouts left once the pruned ones are dropped (Algorithm 1 line 8), flattened.
Rewards, advantages, the policy loss and the head loss see only these (§4.3 (ii)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from arrol_pl.core.sampling import joint_rows


@dataclass
class Survivors:
    """The unpruned rollouts of a step, flattened; ``group_ids`` are prompt indices."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    group_ids: torch.Tensor
    features: torch.Tensor
    scores: torch.Tensor
    survival: torch.Tensor
    golds: list[str]
    rollout_log_probs: list[torch.Tensor] | None = None
    """Per survivor, ``(R_i,)``: the engine's log-prob of each sampled response token (None if not returned)."""
    joint: torch.Tensor | None = None
    """``(N, 1 + G)``: the draw's pair chances (:func:`~arrol_pl.core.sampling.joint_rows`); None: independent."""

    def subset(self, index: Sequence[int]) -> "Survivors":
        """The survivors at ``index``, in that order."""
        index = list(index)
        pick = torch.tensor(index, dtype=torch.long)
        return Survivors(
            [self.prompt_ids[i] for i in index],
            [self.response_ids[i] for i in index],
            [self.texts[i] for i in index],
            self.group_ids[pick],
            self.features[pick],
            self.scores[pick],
            self.survival[pick],
            [self.golds[i] for i in index],
            None if self.rollout_log_probs is None else [self.rollout_log_probs[i] for i in index],
            None if self.joint is None else self.joint[pick],
        )


def collect_survivors(rollouts: Sequence, golds_by_prompt: Sequence[str]) -> Survivors:
    """Drop pruned rollouts (Algorithm 1 line 8); ``rollouts`` are the engine's, ``golds_by_prompt[b]``."""
    kept = [r for r in rollouts if not r.pruned]
    if not kept:
        raise RuntimeError("every rollout was pruned; the per-group floor (pruning.min_keep_per_group) prevents this")
    return Survivors(
        prompt_ids=[r.prompt_token_ids for r in kept],
        response_ids=[r.response_token_ids for r in kept],
        texts=[r.text for r in kept],
        group_ids=torch.tensor([r.prompt_index for r in kept], dtype=torch.long),
        features=torch.stack([r.feature for r in kept]).float(),
        scores=torch.tensor([r.score for r in kept], dtype=torch.float32),
        survival=torch.tensor([1.0 if r.survival is None else r.survival for r in kept], dtype=torch.float32),
        golds=[golds_by_prompt[r.prompt_index] for r in kept],
        rollout_log_probs=sampled_log_probs(kept),
        joint=joint_rows([r.sample_index for r in kept], [r.joint for r in kept]),
    )


def sampled_log_probs(rollouts: Sequence) -> list[torch.Tensor] | None:
    """The engine's log-prob of every sampled token, ``(R_i,)`` per rollout; None unless every rollout has them."""
    if any(r.sampled_logprobs is None for r in rollouts):
        return None
    return [r.sampled_logprobs for r in rollouts]
