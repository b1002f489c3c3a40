"""The phases of one ARRoL training step (Algorithm 1, frontend), each a function the module calls.

Decisions:
- Rewards, advantages, the policy loss and the head loss see only survivors (pruned rollouts are
  dropped before anything is computed on them; §4.3 (ii)).
- One PPO epoch per step on fresh on-policy samples, so the "old" log-probs equal the current ones
  detached (ratio 1 at the first and only update) and no extra forward is spent on them.
- The head is trained with BCE on the detached detect-time features the engine returned, labelled by
  final correctness; with importance weighting each survivor counts 1/p, like in the calibrator.
- Policy weights go to the engine as (HF name, full tensor) pairs; under FSDP the caller gathers them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from arrol_pl.core.advantages import compute_advantages, dynamic_sampling_mask
from arrol_pl.core.losses import ppo_clip_loss
from arrol_pl.core.metrics import balance_stats, binary_auc, expected_calibration_error, spearman
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.train.config import AlgoConfig
from arrol_pl.train.logprobs import make_micro_batches, response_log_probs


class PhaseTimer:
    """Accumulates wall seconds per named phase (Table 5's decomposition)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


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
    )


def step_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, algo: AlgoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Group advantages over survivors and the rows that train (all, or DAPO's dynamic-sampling filter)."""
    adv = compute_advantages(algo.advantage, rewards, group_ids)
    train_rows = dynamic_sampling_mask(rewards, group_ids) if algo.dynamic_sampling else torch.ones_like(rewards, dtype=torch.bool)
    return adv, train_rows


def policy_update(
    policy: nn.Module,
    reference: nn.Module | None,
    survivors: Survivors,
    advantages: torch.Tensor,
    rows: torch.Tensor,
    algo: AlgoConfig,
    pad_id: int,
    backward,
    timer: PhaseTimer,
) -> dict[str, float]:
    """Re-batch the training rows into length buckets and accumulate the PPO-clip gradient.

    ``backward(loss)`` is the caller's (Lightning's ``manual_backward``). Returns loss statistics.
    """
    idx = torch.nonzero(rows, as_tuple=True)[0].tolist()
    if not idx:
        return {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0, "trained_tokens": 0.0, "trained_rollouts": 0.0}
    prompts = [survivors.prompt_ids[i] for i in idx]
    responses = [survivors.response_ids[i] for i in idx]
    batches = make_micro_batches(prompts, responses, algo.micro_batch_tokens, pad_id)
    total_tokens = sum(mb.num_tokens for mb in batches)
    adv = advantages[idx]
    ref_lp: dict[int, torch.Tensor] = {}
    if reference is not None and algo.kl_coef > 0:
        with timer("ref_logprob"), torch.no_grad():
            for k, mb in enumerate(batches):
                ref_lp[k] = response_log_probs(reference, mb, algo.temperature)
    loss_sum = clip_sum = kl_sum = 0.0
    for k, mb in enumerate(batches):
        with timer("update"):
            lp = response_log_probs(policy, mb, algo.temperature)
            out = ppo_clip_loss(
                lp, lp.detach(), adv[mb.indices].to(lp.device), mb.response_mask.to(lp.device),
                algo.clip_low, algo.clip_high, algo.loss_agg_mode,
                ref_log_probs=ref_lp.get(k), kl_coef=algo.kl_coef, kl_estimator=algo.kl_estimator,
                norm_length=algo.max_response_tokens, total_tokens=total_tokens, total_seqs=len(idx),
            )
            backward(out.loss)
        share = mb.num_tokens / total_tokens
        loss_sum += float(out.loss.detach())
        clip_sum += float(out.clip_fraction) * share
        kl_sum += float(out.kl) * share
    return {"loss": loss_sum, "clip_fraction": clip_sum, "kl": kl_sum,
            "trained_tokens": float(total_tokens), "trained_rollouts": float(len(idx)),
            "micro_batches": float(len(batches))}


class FeatureReplay:
    """A sliding window of labelled detect-time features ``(features (N, D), labels (N,), weights (N,))``.

    One RL step yields only B×G×κ labelled features; the head learns from several minibatches drawn
    from the recent window instead of a single gradient step on the newest ones.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"algo.head_replay must be >= 1, got {capacity}")
        self.capacity = capacity
        self.features = torch.empty(0)
        self.labels = torch.empty(0)
        self.weights = torch.empty(0)

    def __len__(self) -> int:
        return int(self.labels.numel())

    def add(self, features: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> None:
        keep = slice(-self.capacity, None)
        if len(self) == 0:
            self.features, self.labels, self.weights = features.float(), labels.float(), weights.float()
        else:
            self.features = torch.cat([self.features, features.float()])
            self.labels = torch.cat([self.labels, labels.float()])
            self.weights = torch.cat([self.weights, weights.float()])
        self.features, self.labels, self.weights = self.features[keep], self.labels[keep], self.weights[keep]

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        return {"capacity": self.capacity, "features": self.features, "labels": self.labels, "weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = int(state["capacity"])
        self.features, self.labels, self.weights = state["features"], state["labels"], state["weights"]


def head_update(head: QualityHead, optimizer: torch.optim.Optimizer, replay: FeatureReplay, steps: int,
                batch_size: int, generator: torch.Generator) -> float:
    """``steps`` minibatch BCE steps of the head on the replay window (features are detached: no
    gradient reaches the policy); weights normalised to mean 1 per minibatch. Returns the mean loss."""
    device = next(head.parameters()).device
    total = 0.0
    for _ in range(steps):
        idx = torch.randint(len(replay), (min(batch_size, len(replay)),), generator=generator)
        w = replay.weights[idx]
        loss = head.loss(replay.features[idx].to(device), replay.labels[idx].to(device), (w / w.mean()).to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
    return total / max(steps, 1)


def head_metrics(scores: torch.Tensor, posteriors: torch.Tensor | None, labels: torch.Tensor) -> dict[str, float]:
    """Quality of the in-engine scores against final correctness (Fig. 2): accuracy at logit 0, AUC,
    Spearman, and the calibration error of the calibrated posteriors."""
    labels = labels.float()
    out = {
        "head/accuracy": float(((scores > 0).float() == labels).float().mean()),
        "head/auc": binary_auc(scores, labels),
        "head/spearman": spearman(scores, labels),
    }
    if posteriors is not None:
        out["head/calibration_error"] = expected_calibration_error(posteriors, labels)
        out["head/posterior_accuracy"] = float(((posteriors > 0.5).float() == labels).float().mean())
    return {k: v for k, v in out.items() if not np.isnan(v)}


def generation_metrics(result, keep_ratio_target: float, pruning_active: bool) -> dict[str, float]:
    rollouts = result.rollouts
    eligible = [r for r in rollouts if r.eligible]
    return {
        "pruning/keep_ratio": result.keep_ratio,
        "pruning/keep_ratio_target": keep_ratio_target if pruning_active else 1.0,
        "pruning/eligible_fraction": len(eligible) / max(len(rollouts), 1),
        "pruning/active": float(pruning_active),
        "tokens/generated": float(result.generated_tokens),
        "tokens/kept": float(sum(len(r.response_token_ids) for r in rollouts if not r.pruned)),
    }


def balance_metrics(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    stats = balance_stats(rewards, group_ids)
    return {"balance/positive_ratio": stats["positive_ratio"], "balance/rho_1_minus_rho": stats["balance"],
            "balance/zero_advantage_fraction": stats["zero_advantage_fraction"]}


def policy_weights(policy: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) pairs for the engine's ``reload_weights``: every tensor, or only the trained ones
    when part of the policy is frozen (:func:`freeze_lower_layers`; the engine keeps the others)."""
    if all(p.requires_grad for p in policy.parameters()):
        for name, tensor in policy.state_dict().items():
            yield name, tensor.detach()
        return
    for name, param in policy.named_parameters():
        if param.requires_grad:
            yield name, param.detach()


def freeze_lower_layers(policy: nn.Module, trainable_layers: int) -> int:
    """Freeze every parameter of a transformers causal LM except its top ``trainable_layers`` decoder blocks
    and final norm; returns the number of trainable parameters. The embeddings (and an LM head tied to them)
    stay frozen: with a 49k vocabulary they are most of a small model's weights, and of its sync."""
    decoder = policy.base_model
    blocks = getattr(decoder, "layers", None)
    if blocks is None or getattr(decoder, "norm", None) is None:
        raise ValueError(f"model.trainable_layers: {type(policy).__name__} has no decoder layers/norm to pick from")
    if not 1 <= trainable_layers <= len(blocks):
        raise ValueError(f"model.trainable_layers={trainable_layers}: the policy has {len(blocks)} decoder layers")
    policy.requires_grad_(False)
    for module in [*blocks[len(blocks) - trainable_layers:], decoder.norm]:
        module.requires_grad_(True)
    return sum(p.numel() for p in policy.parameters() if p.requires_grad)


@dataclass
class HeldoutResult:
    """``accuracy``: mean over problems and ``samples`` sampled completions (avg@k), ``accuracy_se`` its standard
    error over problems (the samples of one problem are correlated); ``greedy_accuracy``."""

    accuracy: float
    greedy_accuracy: float
    samples: int
    problems: int
    accuracy_se: float = float("nan")


def evaluate_heldout(engine, reward, problems: Sequence, samples: int, temperature: float, max_tokens: int,
                     stop: Sequence[str] = (), seed: int | None = None) -> HeldoutResult:
    """Held-out accuracy of the engine's current weights: greedy, and avg@k at the RL temperature.

    With ``seed``, sampling draws from a random stream of its own (the engine samples from torch's global
    generator): the same weights give the same figure wherever the evaluation falls, and training's stream
    continues afterwards as if no evaluation had run.
    """
    prompts = [p.prompt for p in problems]
    golds = [p.answer for p in problems]
    base = {"max_tokens": max_tokens, **({"stop": list(stop)} if stop else {})}
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        greedy = engine.generate(prompts, 1, {"temperature": 0.0, **base})
        sampled = engine.generate(prompts, samples, {"temperature": temperature, **base})
    greedy_acc = reward.score([r.text for r in greedy.rollouts], golds).accuracy
    sampled_golds = [golds[r.prompt_index] for r in sampled.rollouts]
    correct = torch.as_tensor(reward.score([r.text for r in sampled.rollouts], sampled_golds).correct,
                              dtype=torch.float64)
    per_problem = torch.zeros(len(problems), dtype=torch.float64).index_add_(
        0, torch.tensor([r.prompt_index for r in sampled.rollouts]), correct) / samples
    se = float(per_problem.std() / len(problems) ** 0.5) if len(problems) > 1 else float("nan")
    return HeldoutResult(accuracy=float(per_problem.mean()), greedy_accuracy=greedy_acc, samples=samples,
                         problems=len(problems), accuracy_se=se)
