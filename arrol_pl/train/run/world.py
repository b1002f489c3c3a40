"""The world of ranks the launcher starts: the process group torchrun's ranks join (:func:`init_launcher_world`) and
leave (:func:`leave_world`), and rank 0's work the others wait for (:func:`rank_zero_first`).

Waiting for one rank: rank 0 alone builds the policy (a hub download, the tiny policy's warm start), loads its
weights and writes checkpoints and the export while the others wait in a collective. The process group's timeout
(``trainer.rank_timeout_minutes``, :func:`rank_timeout`) bounds every such wait: NCCL's own default (10 min) is
shorter than a large model's download or checkpoint write. A timeout in
:func:`~arrol_pl.train.run.rank_errors.rank_wait` names that setting. Work every rank can share is shared instead:
each rank evaluates its chunks of the held-out problems (:func:`~arrol_pl.train.run.heldout.evaluate_heldout`).

Single process: :func:`rank_zero_first` is plain ``fn()``, and :func:`leave_world` does nothing.
"""

from __future__ import annotations

import atexit
import datetime
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

from arrol_pl.train.policy.collectives import world
from arrol_pl.train.run.rank_errors import TIMEOUT_MINUTES, rank_wait

T = TypeVar("T")


def rank_timeout(trainer) -> datetime.timedelta:
    """How long a rank waits in a collective for the others (``trainer.rank_timeout_minutes``)."""
    return datetime.timedelta(minutes=trainer.rank_timeout_minutes)


def init_launcher_world(trainer) -> int:
    """Initialise the process group of the ranks torchrun started (``experiments/run.py`` starts torchrun itself
    on one node; on several, ``srun torchrun ...``) before any engine joins it; Lightning's strategy then
    reuses it (its torchelastic environment). gloo on CPU, NCCL on CUDA (one device per local rank), with
    :func:`rank_timeout` for every collective of the group. Lightning's FSDP mesh takes this group as its
    data-parallel dimension (data-parallel size = world size), so its collectives wait as long; its
    tensor-parallel groups hold one rank each and never wait. Returns this rank.

    ``trainer``: the run's :class:`~arrol_pl.train.config.sections.TrainerConfig`.
    """
    import os

    from arrol_pl.train.config.loader import ConfigError

    world_size = os.environ.get("WORLD_SIZE")
    if world_size is None or int(world_size) != trainer.ranks:
        raise ConfigError(
            f"trainer.devices × trainer.num_nodes = {trainer.ranks} ranks, but the launcher started "
            f"{world_size or 'none'}: on one node run experiments/run.py (it starts torchrun), on "
            f"several start torchrun --nnodes {trainer.num_nodes} --nproc-per-node {trainer.devices} "
            "on each node"
        )
    cuda = trainer.accelerator in ("gpu", "cuda") or (trainer.accelerator == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    TIMEOUT_MINUTES.append(trainer.rank_timeout_minutes)
    if not dist.is_initialized():
        with rank_wait("the other ranks to start"):
            dist.init_process_group("nccl" if cuda else "gloo", timeout=rank_timeout(trainer))
        # Lightning tears down only a group it created. gloo left to the interpreter's exit, or torn down by one
        # rank while another still works, can abort a rank ("terminate called without an active exception")
        # after the run has written its files.
        atexit.register(leave_world)
    return dist.get_rank()


def leave_world() -> None:
    """At exit: wait for the other ranks, then destroy the default process group if it still exists. A rank
    that is gone (its peers see a closed connection) does not hold the others: the wait is best effort."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
    except Exception:  # noqa: BLE001 - a peer that failed; destroying the group is all that is left to do
        pass
    dist.destroy_process_group()


def rank_zero_first(fn: Callable[[], T], what: str = "rank 0 to prepare the policy") -> T:
    """``fn()`` on rank 0, then on the other ranks: a cache ``fn`` fills (the tiny policy's build and warm start)
    is built once, and the others read it; they wait for it up to ``trainer.rank_timeout_minutes``
    (:func:`rank_wait`, ``what``: what rank 0 does, in words). Plain ``fn()`` without a process group."""
    rank, world_size = world()
    if world_size > 1 and rank:
        with rank_wait(what):
            dist.barrier()
    out = fn()
    if world_size > 1 and not rank:
        with rank_wait("the other ranks"):
            dist.barrier()
    return out
