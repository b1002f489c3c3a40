"""The ranks a sharded policy spans, as its update sees them: which rank this process is (:func:`world`), where the
group's collectives take tensors, and :class:`UpdateRanks`, what the update and the log-prob phase ask of the others.

Decisions (the colocated layout of verl and TRL: every rank generates, trains and holds an engine):
- The loss normaliser is global: each mini-batch's token (and sequence) count is summed over the ranks
  before any loss is formed, and the backward is scaled by ``W`` because DDP and FSDP average gradients
  over ranks; so W ranks with B/W prompts each make the update one rank makes with B (verl's
  ``loss_scale_factor`` and global token count, ``dp_actor.update_policy``).
- FSDP gathers parameters in every forward and reduces gradients in every backward, collectively: all ranks
  must run the same number of forwards and backwards. A rank with fewer micro-batches (length buckets differ,
  dynamic sampling drops groups) runs idle passes on one padding token that add nothing to the gradient.

Single process: ``world() == (0, 1)``, and every collective of a one-rank :class:`UpdateRanks` (``UpdateRanks(0,
1)``) is the identity: the update has one path whatever the number of ranks, and on one rank it computes exactly what
it computed without the collectives. The step's traffic between ranks (its prompts, survivors and metrics) is
:class:`~arrol_pl.train.step.rank_sync.RankSync`'s, which extends this class.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from arrol_pl.train.policy.logprobs import pack, response_log_probs


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group; ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def collective_device() -> torch.device:
    """Where the process group's collectives take tensors: the current CUDA device under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class UpdateRanks:
    """The update's view of the other ranks (see the module docstring): ``UpdateRanks()`` over the default group,
    ``UpdateRanks(0, 1)`` one rank alone (every collective is then the identity, none touches a process group)."""

    def __init__(self, rank: int | None = None, world_size: int | None = None) -> None:
        self.rank, self.world_size = world() if rank is None or world_size is None else (rank, world_size)

    @property
    def alone(self) -> bool:
        return self.world_size == 1

    def sum(self, *values: float) -> list[float]:
        """Element-wise sums over ranks (float64: token counts stay exact)."""
        if self.alone:
            return [float(v) for v in values]
        t = torch.tensor(values, dtype=torch.float64, device=collective_device())
        dist.all_reduce(t)
        return t.cpu().tolist()

    def max(self, value: int) -> int:
        if self.alone:
            return int(value)
        t = torch.tensor([value], dtype=torch.int64, device=collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t)

    def counts(self, tokens: int, seqs: int) -> tuple[int, int]:
        """The mini-batch's global ``(N_tok, N_seq)`` from this rank's."""
        n_tok, n_seq = self.sum(tokens, seqs)
        return int(n_tok), int(n_seq)

    def scaled(self, backward: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
        """``backward`` on ``W × loss``: undoes the gradient averaging of DDP/FSDP, the normaliser being global
        (``backward`` itself on one rank)."""
        return backward if self.alone else (lambda loss: backward(loss * self.world_size))

    def idle_passes(
        self, policy: nn.Module, n: int, pad_id: int, backward: Callable[[torch.Tensor], None] | None = None
    ) -> None:
        """``n`` forwards of ``policy`` on one padding token (with ``backward``: and a backward of zero loss), so
        this rank joins the collectives of other ranks' extra micro-batches without changing any gradient."""
        batch = pack([[pad_id]], [[pad_id]], [0], pad_id)
        for _ in range(n):
            if backward is None:
                with torch.no_grad():
                    response_log_probs(policy, batch)
            else:
                backward(response_log_probs(policy, batch).sum() * 0.0)
