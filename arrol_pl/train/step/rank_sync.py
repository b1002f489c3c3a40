"""What the ranks of one training step share (:class:`RankSync`): each rank's prompts, the survivors of every rank,
and the step's metrics over all ranks.

Decisions:
- Prompts are shared out as whole groups, interleaved like ``DistributedSampler``: rank ``r`` of ``W`` takes
  prompts ``r, r + W, r + 2W, …`` of the step's B (:func:`shard_prompts`). With PPO mini-batches of whole
  groups in prompt order, rank ``r``'s mini-batch ``j`` is then its share of the one-rank mini-batch ``j``
  whenever B is a multiple of ``W`` × the number of mini-batches and no group is filtered out.
- One pruning state: the survivors' group ids, scores, labels, weights and detect-time features are
  all-gathered in global prompt order before the calibrator and head updates, so every rank updates the same
  calibrator and trains the same head on the same replay window with the same generator: they stay
  identical without any gradient exchange, and the step's balance, keep-ratio and head metrics are global.
- What the update asks of the other ranks (a global loss normaliser, idle passes) is
  :class:`~arrol_pl.train.policy.collectives.UpdateRanks`', which :class:`RankSync` extends.

Single process: every collective of a one-rank :class:`RankSync` (:data:`ONE_RANK`) is the identity.
"""

from __future__ import annotations

import hashlib
from typing import Sequence, TypeVar

import torch
import torch.distributed as dist

from arrol_pl.train.policy.collectives import UpdateRanks, collective_device

T = TypeVar("T")

SUMMED_METRICS = ("tokens/generated", "tokens/kept", "policy/loss", "policy/trained_tokens", "policy/trained_rollouts")
"""Per-step metrics whose global value is the sum over ranks (each rank's ``policy/loss`` is its share of the
globally normalised loss); the others are means."""


def shard_prompts(prompts: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s whole groups of the step's prompts: every ``world_size``-th one from ``rank`` on."""
    if len(prompts) % world_size:
        raise ValueError(
            f"algo.prompts_per_step={len(prompts)} must be a multiple of the {world_size} ranks "
            "(trainer.devices × trainer.num_nodes): each rank generates whole groups"
        )
    return list(prompts[rank::world_size])


def global_prompt_index(local: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Index in the step's B prompts of rank ``rank``'s local prompt indices (inverse of :func:`shard_prompts`)."""
    return local * world_size + rank


class RankSync(UpdateRanks):
    """The step's view of the other ranks (see the module docstring): ``RankSync()`` over the default group,
    ``RankSync(0, 1)`` one rank alone (every collective is then the identity, none touches a process group)."""

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank; every rank gets the same answer."""
        return self.max(int(flag)) == 1

    def reduce_metrics(self, metrics: dict[str, float], summed: Sequence[str] = ()) -> dict[str, float]:
        """Over the ranks that report a key (a rank without training rows has no log-prob mismatch): the mean
        of this rank's ``metrics``, the sum for keys in ``summed``. A ratio over rollouts is global this way:
        every rank decodes the same number of rollouts (B/W prompts × G)."""
        if self.alone:
            return dict(metrics)
        every = self.gather(metrics)
        out = {}
        for key in dict.fromkeys(k for m in every for k in m):
            values = [m[key] for m in every if key in m]
            out[key] = sum(values) if key in summed else sum(values) / len(values)
        return out

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value`` (any picklable object), in rank order; every rank gets the same list."""
        if self.alone:
            return [value]
        every: list = [None] * self.world_size
        dist.all_gather_object(every, value)
        return every

    def reduce_step_metrics(self, metrics: dict[str, float]) -> None:
        """Several ranks: the metrics each rank computed from its own rollouts (generation, reward fractions,
        policy loss statistics) become global, in place; those of the gathered survivors already are."""
        if self.alone:
            return
        local = [
            k
            for k in metrics
            if k.startswith(("pruning/keep_ratio", "pruning/eligible", "tokens/", "policy/", "reward/frac_"))
        ]
        metrics.update(self.reduce_metrics({k: metrics[k] for k in local}, SUMMED_METRICS))

    def identical(self, *states) -> bool:
        """Whether every rank holds bitwise the same ``states`` (nested dicts, lists, tensors, numbers): the
        invariant of one pruning state, checked each step at the cost of one small all-gather."""
        return self.alone or len(set(self.gather(_digest(states)))) == 1

    def gather_rows(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """All-gather row-aligned tensors of this rank's rows (dim 0, any length per rank), concatenated in
        rank order; every rank gets the same result."""
        if self.alone:
            return list(tensors)
        n = tensors[0].shape[0]
        sizes = self.gather(n)
        out = []
        for t in tensors:
            pad = t.new_zeros((max(sizes) - n, *t.shape[1:]))
            slots = [torch.empty_like(torch.cat([t, pad])).to(collective_device()) for _ in range(self.world_size)]
            dist.all_gather(slots, torch.cat([t, pad]).to(collective_device()))
            out.append(torch.cat([s[:k].to(t.device) for s, k in zip(slots, sizes)]))
        return out

    def gather_survivors(self, group_ids: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """The step's survivors of all ranks, ordered by global prompt index (a stable sort keeps each group's
        rollouts in engine order): ``[global group ids (N,), *tensors (N, ...)]`` for ``N`` survivors in all.
        ``group_ids``: this rank's local prompt indices ``(n,)``; ``tensors``: row-aligned with them."""
        if self.alone:
            return [group_ids, *tensors]
        gathered = self.gather_rows(global_prompt_index(group_ids, self.rank, self.world_size), *tensors)
        order = torch.sort(gathered[0], stable=True).indices
        return [t[order] for t in gathered]


ONE_RANK = RankSync(0, 1)
"""One device: the step's ranks when nothing is sharded."""


def _digest(state) -> str:
    h = hashlib.sha256()

    def walk(x) -> None:
        if isinstance(x, torch.Tensor):
            h.update(f"{x.dtype}{tuple(x.shape)}".encode())
            h.update(x.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        elif isinstance(x, dict):
            for key in x:
                h.update(repr(key).encode())
                walk(x[key])
        elif isinstance(x, (list, tuple)):
            for item in x:
                walk(item)
        else:
            h.update(repr(x).encode())

    walk(state)
    return h.hexdigest()
