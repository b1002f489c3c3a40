"""ARRoL's pruning in a training loop of one's own: plain PyTorch, no Lightning, the real vLLM engine
(docs/library.md, "Use ARRoL in your own trainer").

Each step is the per-step contract: h_t from the pruning state (:class:`~arrol_pl.core.online.OnlinePruning`) →
generate with pruning at L_detect inside the engine → reward the survivors → ``observe`` (the calibrator, the
replay window and the quality head learn from them, weighted 1/p) → update the policy on the survivors → sync the
policy's and the head's weights into the engine. On the built-in arithmetic task with the tiny local policy
(warm-started as ``make run``'s and cached under ``--cache-dir``), on CPU in a minute or two::

    .venv/bin/python examples/custom_loop.py --steps 5

Decisions: on-policy GRPO with one optimizer step per training step, so the PPO ratio is 1 and the clipped loss
is the plain policy gradient ``-A · log π`` (token mean per sequence, mean over sequences), with GRPO's group
advantages over each group's survivors; no KL term, no mini-batches; the rollouts are sampled at temperature 1,
which the log-probs use too. Everything else a real trainer adds (PPO epochs, DAPO, FSDP, checkpoints) is the
Lightning trainer's (``experiments/run.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from arrol_pl.core.advantages import compute_advantages
from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.online import OnlinePruning
from arrol_pl.core.pruning import PruningConfig

# vLLM logs every weight sync at INFO/WARNING: the loop's own line per step is what matters here
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=5, help="training steps")
    parser.add_argument("--prompts", type=int, default=8, help="B: prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="G: rollouts per prompt")
    parser.add_argument("--keep-ratio", type=float, default=0.5, help="κ: the fraction of rollouts kept")
    parser.add_argument("--cold-start", type=int, default=1, help="steps before pruning starts")
    parser.add_argument("--detect-length", type=int, default=12, help="L_detect, in tokens")
    parser.add_argument("--max-tokens", type=int, default=48, help="longest response")
    parser.add_argument("--lr", type=float, default=3e-4, help="the policy's learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cache-dir", default=None, help="where the tiny policy is built and cached (default: the user's model cache)"
    )
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=1000,
        help="the tiny policy's supervised warm start (0: untrained, every reward 0)",
    )
    parser.add_argument("--reward-workers", type=int, default=None, help="math-verify processes (0: in this one)")
    parser.add_argument("--metrics", type=Path, default=None, help="also write each step's metrics here (JSONL)")
    return parser.parse_args(argv)


def tiny_policy(args: argparse.Namespace) -> Path:
    """The tiny local policy's directory (built, warm-started and cached on first use)."""
    from arrol_pl.train.config.model import ModelConfig, WarmStartConfig
    from arrol_pl.train.config.run import DataConfig
    from arrol_pl.train.run.warmstart import prepare_tiny_policy

    model = ModelConfig(cache_dir=args.cache_dir, warm_start=WarmStartConfig(steps=args.warm_start_steps))
    return prepare_tiny_policy(model, DataConfig(), args.max_tokens, args.seed)


def grpo_loss(policy: torch.nn.Module, survivors: list, rewards: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``-mean_i(A_i · mean_t log π(y_it))`` over the survivors, ``A`` GRPO's advantage within each group."""
    advantages = compute_advantages("grpo", rewards, torch.tensor([r.prompt_index for r in survivors]))
    sequences = [r.prompt_token_ids + r.response_token_ids for r in survivors]
    ids = torch.full((len(sequences), max(map(len, sequences))), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    response = torch.zeros(ids.shape[0], ids.shape[1] - 1)  # which next-token predictions are response tokens
    for i, (seq, r) in enumerate(zip(sequences, survivors)):
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        response[i, len(r.prompt_token_ids) - 1 : len(seq) - 1] = 1
    logits = policy(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    token_logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    per_sequence = (token_logp * response).sum(1) / response.sum(1).clamp_min(1)
    return -(advantages * per_sequence).mean()


def main(argv: list[str] | None = None) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arrol_pl.engine import ArrolEngine, EngineConfig
    from arrol_pl.tasks.registry import load_problems
    from arrol_pl.tasks.reward import MathReward, RewardConfig

    args = arguments(argv)
    torch.manual_seed(args.seed)
    policy_dir = tiny_policy(args)
    pad_id = AutoTokenizer.from_pretrained(policy_dir).pad_token_id
    policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    problems = list(load_problems("arithmetic", split="train"))
    pruning = OnlinePruning(
        PruningConfig(cold_start_steps=args.cold_start, keep_ratio=args.keep_ratio),
        HeadConfig(),
        policy.config.hidden_size,
        args.seed,
    )
    engine = ArrolEngine(
        str(policy_dir),
        EngineConfig(dtype="float32", detect_length=args.detect_length),
        seed=args.seed,
        head_hidden_dim=pruning.recipe.hidden_dim,
    )
    engine.sync_weights(None, pruning.head.state_dict())  # the engine scores with this run's head from the start
    reward = MathReward(RewardConfig(num_workers=args.reward_workers))
    sampling = {"temperature": 1.0, "max_tokens": args.max_tokens}
    draw, rows = random.Random(args.seed), []
    try:
        for step in range(args.steps):
            start = time.perf_counter()
            batch = draw.sample(problems, args.prompts)
            params = pruning.params_for(step)  # h_t
            engine.seed_sampling(args.seed * 100_003 + step)
            generation = engine.generate(
                [p.prompt for p in batch], args.group_size, sampling, args.detect_length, params
            )
            survivors = [r for r in generation.rollouts if not r.pruned]
            scored = reward.score(
                [r.text for r in survivors],
                [batch[r.prompt_index].answer for r in survivors],
                prompts=[batch[r.prompt_index].prompt for r in survivors],
            )
            rewards = torch.as_tensor(scored.rewards, dtype=torch.float32)
            head_loss = pruning.observe(generation, rewards)  # calibrator, replay window, head: 1/p-weighted
            loss = grpo_loss(policy, survivors, rewards, pad_id)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            # every tensor under each of its names (a tied LM head is sent as the embedding and as lm_head); a name
            # the engine does not take, or a weight left out, is an error naming it
            engine.sync_weights(
                ((name, t.detach()) for name, t in policy.state_dict().items()),
                pruning.head.state_dict(),
                every_weight=True,
            )
            row = {
                "step": step,
                "pruning_active": bool(params.active),
                "rollouts": len(generation.rollouts),
                "pruned": len(generation.rollouts) - len(survivors),
                "keep_ratio": generation.keep_ratio,
                "reward_accuracy": scored.accuracy,
                "policy_loss": float(loss.detach()),
                "head_loss": head_loss,
                "calibrator_labels": len(pruning.calibrator),
                "seconds": time.perf_counter() - start,
            }
            rows.append(row)
            print(
                f"step {step}: pruning {'on ' if row['pruning_active'] else 'off'} keep {row['keep_ratio']:.2f} "
                f"({row['pruned']} of {row['rollouts']} pruned)  accuracy {row['reward_accuracy']:.3f}  "
                f"policy loss {row['policy_loss']:+.4f}  head loss {head_loss:.4f}  "
                f"calibrator {row['calibrator_labels']} labels  {row['seconds']:.1f} s",
                flush=True,
            )
            if args.metrics is not None:
                with args.metrics.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    finally:
        reward.close()
        engine.close()
    return rows


if __name__ == "__main__":  # the reward's worker processes import this file: no work at its top level
    main()
