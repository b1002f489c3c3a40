"""Several ranks: what the ranks of one training step share, as functions over a process group.

Decisions (the colocated layout of verl and TRL: every rank generates, trains and holds an engine):
- Prompts are shared out as whole groups, interleaved like ``DistributedSampler``: rank ``r`` of ``W`` takes
  prompts ``r, r + W, r + 2W, …`` of the step's B (:func:`shard_prompts`). With PPO mini-batches of whole
  groups in prompt order, rank ``r``'s mini-batch ``j`` is then its share of the one-rank mini-batch ``j``
  whenever B is a multiple of ``W`` × the number of mini-batches and no group is filtered out.
- The loss normaliser is global: each mini-batch's token (and sequence) count is summed over the ranks
  before any loss is formed, and the backward is scaled by ``W`` because DDP and FSDP average gradients
  over ranks; so W ranks with B/W prompts each make the update one rank makes with B (verl's
  ``loss_scale_factor`` and global token count, ``dp_actor.update_policy``).
- FSDP gathers parameters in every forward and reduces gradients in every backward, collectively: all ranks
  must run the same number of forwards and backwards. A rank with fewer micro-batches (length buckets differ,
  dynamic sampling drops groups) runs idle passes on one padding token that add nothing to the gradient.
- One pruning state: the survivors' group ids, scores, labels, weights and detect-time features are
  all-gathered in global prompt order before the calibrator and head updates, so every rank updates the same
  calibrator and trains the same head on the same replay window with the same generator: they stay
  identical without any gradient exchange, and the step's balance, keep-ratio and head metrics are global.
- Waiting for one rank: rank 0 alone builds the policy (a hub download, the tiny policy's warm start), loads
  its weights and writes checkpoints and the export while the others wait in a collective. The process
  group's timeout (``trainer.rank_timeout_minutes``, :func:`rank_timeout`) bounds every such wait: NCCL's own
  default (10 min) is shorter than a large model's download or checkpoint write. A timeout in
  :func:`~arrol_pl.train.policy.rank_errors.rank_wait` names that setting. Work every rank can share is shared
  instead: each rank evaluates its chunks of the held-out problems
  (:func:`~arrol_pl.train.run.heldout.evaluate_heldout`).

Single process: every function here is the identity (``world() == (0, 1)``), and so is every collective of a
one-rank :class:`RankSync` (``RankSync(0, 1)``, what the update runs with on one device): the update has one
path whatever the number of ranks, and on one rank it computes exactly what it computed without the collectives.
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
from typing import Callable, Iterator, Sequence, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from arrol_pl.train.policy.logprobs import length_buckets, pack, response_log_probs
from arrol_pl.train.policy.rank_errors import TIMEOUT_MINUTES, RankTimeout, rank_wait, timeout_setting  # noqa: F401

T = TypeVar("T")

SUMMED_METRICS = ("tokens/generated", "tokens/kept", "policy/loss", "policy/trained_tokens", "policy/trained_rollouts")
"""Per-step metrics whose global value is the sum over ranks (each rank's ``policy/loss`` is its share of the
globally normalised loss); the others are means."""


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group; ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_prompts(prompts: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s whole groups of the step's prompts: every ``world_size``-th one from ``rank`` on."""
    if len(prompts) % world_size:
        raise ValueError(f"algo.prompts_per_step={len(prompts)} must be a multiple of the {world_size} ranks "
                         "(trainer.devices × trainer.num_nodes): each rank generates whole groups")
    return list(prompts[rank::world_size])


def global_prompt_index(local: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Index in the step's B prompts of rank ``rank``'s local prompt indices (inverse of :func:`shard_prompts`)."""
    return local * world_size + rank


def micro_batch_count(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], max_tokens: int) -> int:
    """How many length buckets :func:`~arrol_pl.train.policy.logprobs.make_micro_batches` makes of these rows."""
    return len(length_buckets([len(p) + len(r) for p, r in zip(prompts, responses)], max_tokens))


def _device() -> torch.device:
    """Where the process group's collectives take tensors: the current CUDA device under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class RankSync:
    """The update's view of the other ranks (see the module docstring): ``RankSync()`` over the default group,
    ``RankSync(0, 1)`` one rank alone (every collective is then the identity, none touches a process group)."""

    def __init__(self, rank: int | None = None, world_size: int | None = None) -> None:
        self.rank, self.world_size = world() if rank is None or world_size is None else (rank, world_size)

    @property
    def alone(self) -> bool:
        return self.world_size == 1

    def sum(self, *values: float) -> list[float]:
        """Element-wise sums over ranks (float64: token counts stay exact)."""
        if self.alone:
            return [float(v) for v in values]
        t = torch.tensor(values, dtype=torch.float64, device=_device())
        dist.all_reduce(t)
        return t.cpu().tolist()

    def max(self, value: int) -> int:
        if self.alone:
            return int(value)
        t = torch.tensor([value], dtype=torch.int64, device=_device())
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

    def idle_passes(self, policy: nn.Module, n: int, pad_id: int,
                    backward: Callable[[torch.Tensor], None] | None = None) -> None:
        """``n`` forwards of ``policy`` on one padding token (with ``backward``: and a backward of zero loss), so
        this rank joins the collectives of other ranks' extra micro-batches without changing any gradient."""
        batch = pack([[pad_id]], [[pad_id]], [0], pad_id)
        for _ in range(n):
            if backward is None:
                with torch.no_grad():
                    response_log_probs(policy, batch)
            else:
                backward(response_log_probs(policy, batch).sum() * 0.0)

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
        local = [k for k in metrics if k.startswith(("pruning/keep_ratio", "pruning/eligible", "tokens/", "policy/",
                                                     "reward/frac_"))]
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
            slots = [torch.empty_like(torch.cat([t, pad])).to(_device()) for _ in range(self.world_size)]
            dist.all_gather(slots, torch.cat([t, pad]).to(_device()))
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
"""One device: the update's ranks when nothing is sharded."""


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


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A ``DTensor`` (the gradient norm of an FSDP2 policy) as a plain tensor; a plain tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_weights(weights: Iterator[tuple[str, torch.Tensor]],
                 dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) pairs from (name, possibly sharded tensor) ones: an FSDP2 ``DTensor`` is all-gathered
    (every rank must iterate the same names in the same order), a plain tensor passes through. With ``dtype``
    each rank casts its shard before the gather: a bfloat16 engine's weights cross the wire at half the bytes of
    float32, and a cast is element-wise, so the gathered tensor is the full one cast. One tensor under several
    names in a row (a tied LM head) is cast and gathered once."""
    source, full = None, None
    for name, tensor in weights:
        if tensor is not source:
            source, full = tensor, full_value(tensor if dtype is None else tensor.to(dtype))
        yield name, full


def shard_policy(policy: nn.Module, mesh) -> nn.Module:
    """FSDP2 over ``mesh``: each decoder block its own unit (one block's parameters gathered at a time), then the
    root (embeddings, final norm, LM head). The trainer shards the frozen reference the same way; the quality head
    stays whole on every rank (small, and trained identically everywhere)."""
    from torch.distributed.fsdp import fully_shard

    for block in policy.base_model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(policy, mesh=mesh)
    return policy


def load_on_rank0(path, dtype: torch.dtype) -> nn.Module:
    """The transformers causal LM in ``path`` as :func:`shard_from_rank0` fills it: rank 0 of several loads the
    checkpoint (on the CPU), the other ranks build the model from its config on the meta device, holding no
    weights (verl and Lightning's meta-device start). One rank loads the checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    rank, _ = world()
    if rank == 0:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)


def shard_from_rank0(model: nn.Module, mesh) -> nn.Module:
    """:func:`shard_policy`, then every rank's shards set from rank 0's weights (every rank calls it at the same
    point): rank 0's full state dict is broadcast a tensor at a time and each rank keeps its shard; the buffers
    (the rotary ``inv_freq``, non-persistent, so in no state dict) are broadcast whole. The other ranks'
    model may live on the meta device (:func:`load_on_rank0`): it is materialised first, on the device the
    collectives use, with its parameter objects kept, so tied weights stay tied. Rank 0 holds its full
    tensors until the broadcast ends: one copy of the model, as before sharding."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank, _ = world()
    full = dict(model.state_dict()) if rank == 0 else {}
    shard_policy(model, mesh)
    if rank == 0:
        model.to(_device())
    else:
        model.to_empty(device=_device())
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    return model


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

    ``trainer``: the run's :class:`~arrol_pl.train.config.run.TrainerConfig`.
    """
    import os

    from arrol_pl.train.config.loader import ConfigError

    world_size = os.environ.get("WORLD_SIZE")
    if world_size is None or int(world_size) != trainer.ranks:
        raise ConfigError(f"trainer.devices × trainer.num_nodes = {trainer.ranks} ranks, but the launcher started "
                          f"{world_size or 'none'}: on one node run experiments/run.py (it starts torchrun), on "
                          f"several start torchrun --nnodes {trainer.num_nodes} --nproc-per-node {trainer.devices} "
                          "on each node")
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
