"""One rank of the multi-rank checks (``test_distributed.py``), on one fixed step's rollouts, no engine:

- :func:`update`: a PPO update of a tiny Qwen3, sharded with FSDP2 over ``WORLD_SIZE`` ranks, or plain on
  one process;
- :func:`pruning_state`: the survivors gathered over ranks, then the calibrator, the head's replay window and
  its update, the next step's δ and the step's balance and head metrics.

Run by the test as ``python rank_worker.py OUT BACKEND`` in each rank's process, with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set (torchrun sets them too). Rank 0 saves the
gathered weights, a second run's with a per-rank normaliser (the error the global one prevents) and both
runs' gradient norms to ``OUT``; every rank saves its pruning state to ``OUT.rank<r>``. Needs torch,
transformers and this package.
"""

from __future__ import annotations

import os
import sys

import torch
from tiny_qwen3 import tiny_qwen3

from arrol_pl.core.head_training import FeatureReplay, head_quality, head_update
from arrol_pl.core.pruning import PruningConfig, build_pruner_params
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.train.config.sections import AlgoConfig
from arrol_pl.train.policy.sharding import full_value, full_weights, shard_policy
from arrol_pl.train.policy.update import UpdateHooks
from arrol_pl.train.step.metrics import balance_metrics
from arrol_pl.train.step.context import StepContext
from arrol_pl.train.step.phases import advantage_phase, logprob_phase, update_phase
from arrol_pl.train.step.rank_sync import RankSync, shard_prompts
from arrol_pl.train.step.survivors import Survivors

GROUP_SIZES = (4, 2, 3, 4, 1, 4, 3, 2)
"""Survivors per prompt of the fixed step (B = 8, G = 4, some pruned)."""

ALGO = AlgoConfig(
    prompts_per_step=8,
    group_size=4,
    ppo_mini_batch_size=4,
    ppo_epochs=2,
    micro_batch_tokens=40,
    loss_agg_mode="token-mean",
    clip_low=0.2,
    clip_high=0.28,
    kl_coef=0.5,
)
"""Two mini-batches, two epochs (so the later steps are off-policy and the clip acts), small length buckets
(so ranks differ in micro-batches), a KL term to a frozen reference (sharded like the policy on several ranks),
no gradient clipping: SGD then shows any error of the normaliser or of the reference's log-probs."""

LR = 0.2

FEATURES = 16
"""Width of the detect-time features of the pruning-state check."""
PRUNING = PruningConfig(keep_ratio=0.5, cold_start_steps=0, num_bins=8, buffer_capacity=64)


def step_rollouts() -> tuple[Survivors, torch.Tensor]:
    """The step's survivors in prompt order, as the engine returns them, and their 0/1 rewards."""
    g = torch.Generator().manual_seed(1)
    groups = [b for b, n in enumerate(GROUP_SIZES) for _ in range(n)]
    prompts = {b: torch.randint(1, 64, (3 + b % 3,), generator=g).tolist() for b in range(len(GROUP_SIZES))}
    n = len(groups)
    surv = Survivors(
        prompt_ids=[prompts[b] for b in groups],
        response_ids=[torch.randint(1, 64, (2 + (5 * i) % 11,), generator=g).tolist() for i in range(n)],
        texts=[""] * n,
        group_ids=torch.tensor(groups),
        features=torch.randn(n, FEATURES, generator=g),
        scores=torch.randn(n, generator=g),
        survival=torch.rand(n, generator=g) * 0.5 + 0.5,
        golds=[""] * n,
    )
    return surv, torch.randint(0, 2, (n,), generator=g).float()


def rank_share(surv: Survivors, rewards: torch.Tensor, rank: int, world_size: int) -> tuple[Survivors, torch.Tensor]:
    """The survivors of the prompts :func:`shard_prompts` gives ``rank``, with local prompt indices."""
    mine = shard_prompts(list(range(len(GROUP_SIZES))), rank, world_size)
    rows = [i for i, b in enumerate(surv.group_ids.tolist()) if b in mine]
    local = torch.tensor([mine.index(int(surv.group_ids[i])) for i in rows])
    return Survivors(
        prompt_ids=[surv.prompt_ids[i] for i in rows],
        response_ids=[surv.response_ids[i] for i in rows],
        texts=[""] * len(rows),
        group_ids=local,
        features=surv.features[rows],
        scores=surv.scores[rows],
        survival=surv.survival[rows],
        golds=[""] * len(rows),
    ), rewards[rows]


class PerRankNormaliser(RankSync):
    """The mistake to detect: each rank normalises by its own tokens and the gradients are averaged."""

    def counts(self, tokens: int, seqs: int) -> tuple[int, int]:
        return tokens, seqs

    def scaled(self, backward):
        return backward


def update(ranks: RankSync, device: torch.device) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One training step's update on this rank's share (``RankSync(0, 1)``: the whole step on one process,
    unsharded); returns the full weights and the gradient norms."""
    rank, world_size = ranks.rank, ranks.world_size
    policy = tiny_qwen3().to(device)
    reference = tiny_qwen3(seed=1).to(device).eval().requires_grad_(False)
    if not ranks.alone:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (world_size,))
        shard_policy(policy, mesh)
        shard_policy(reference, mesh)  # as the trainer does: a forward gathers one block at a time
    surv, rewards = rank_share(*step_rollouts(), rank, world_size)
    ctx = StepContext(0, ALGO, ranks=ranks)
    advantages, train_mask = advantage_phase(ctx, rewards, surv.group_ids)
    optimizer = torch.optim.SGD(policy.parameters(), lr=LR)
    norms: list[float] = []

    def optimizer_step(last: bool) -> float:
        norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), float("inf"))
        optimizer.step()
        optimizer.zero_grad()
        norms.append(float(full_value(norm)))
        return norms[-1]

    logps = logprob_phase(ctx, policy, reference, surv, train_mask)
    backward = ranks.scaled(lambda loss: loss.backward())
    update_phase(ctx, policy, surv, advantages, train_mask, logps, UpdateHooks(backward, optimizer_step))
    return {k: v.detach().cpu().clone() for k, v in full_weights(iter(policy.state_dict().items()))}, norms


def pruning_state(ranks: RankSync) -> dict:
    """One step's pruning-state update from this rank's survivors (all of them on one process): the calibrator
    and the head's replay window take the gathered survivors, the head trains on them, δ is solved for the next
    step; returns those and the step's balance and head metrics."""
    surv, labels = rank_share(*step_rollouts(), ranks.rank, ranks.world_size)
    groups, scores, labels, weights, features = ranks.gather_survivors(
        surv.group_ids, surv.scores, labels, 1.0 / surv.survival, surv.features
    )
    calibrator = PRUNING.make_calibrator()
    calibrator.update(scores, labels, weights)
    torch.manual_seed(3)
    head = QualityHead(FEATURES, 8)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-2)
    replay = FeatureReplay(256)
    replay.add(features, labels, weights)
    head_update(head, optimizer, replay, 4, 8, torch.Generator().manual_seed(5))
    params = build_pruner_params(PRUNING, calibrator, 1)
    return {
        "calibrator": calibrator.state_dict(),
        "head": head.state_dict(),
        "delta": params.delta,
        "groups": groups,
        "metrics": {
            **balance_metrics(labels, groups),
            **head_quality(scores, params.posterior(scores), labels, groups),
        },
    }


def main(out: str, backend: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
        torch.cuda.set_device(device)
    torch.save(pruning_state(RankSync()), f"{out}.rank{dist.get_rank()}")
    weights, norms = update(RankSync(), device)
    per_rank, per_rank_norms = update(PerRankNormaliser(), device)
    if dist.get_rank() == 0:
        torch.save(
            {"weights": weights, "norms": norms, "per_rank_weights": per_rank, "per_rank_norms": per_rank_norms}, out
        )
    # Leave together, then skip the interpreter's teardown: once in CI a rank aborted after its work was done
    # ("terminate called without an active exception", a native thread still alive at exit), which says
    # nothing about what this check is for. The run's own exit is checked by test_distributed_run.py.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
