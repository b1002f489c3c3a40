"""The held-out evaluation of a training run (before training, every ``trainer.eval_every`` steps and at the end):
greedy accuracy and avg@k at the RL temperature, per problem, on the engine's current weights. The test-time
evaluation of a finished policy (votes, pass@k, several datasets) is :mod:`arrol_pl.analysis.evaluation`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch


@dataclass
class HeldoutResult:
    """``accuracy``: mean over problems and ``samples`` sampled completions (avg@k), ``accuracy_se`` its standard
    error over problems (the samples of one problem are correlated); ``greedy_accuracy``."""

    accuracy: float
    greedy_accuracy: float
    samples: int
    problems: int
    accuracy_se: float = float("nan")
    per_problem: list[float] = field(default_factory=list)
    """avg@k of each problem, in the held-out set's order: two policies evaluated on the same problems compare
    paired by problem, without the problems' spread in difficulty in the difference's standard error."""


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
    # Lengths: a reward with DAPO's overlong penalty needs them (accuracy itself ignores the penalty).
    greedy_acc = reward.score([r.text for r in greedy.rollouts], golds,
                              lengths=[len(r.response_token_ids) for r in greedy.rollouts]).accuracy
    sampled_golds = [golds[r.prompt_index] for r in sampled.rollouts]
    correct = torch.as_tensor(reward.score([r.text for r in sampled.rollouts], sampled_golds,
                                           lengths=[len(r.response_token_ids) for r in sampled.rollouts]).correct,
                              dtype=torch.float64)
    per_problem = torch.zeros(len(problems), dtype=torch.float64).index_add_(
        0, torch.tensor([r.prompt_index for r in sampled.rollouts]), correct) / samples
    se = float(per_problem.std() / len(problems) ** 0.5) if len(problems) > 1 else float("nan")
    return HeldoutResult(accuracy=float(per_problem.mean()), greedy_accuracy=greedy_acc, samples=samples,
                         problems=len(problems), accuracy_se=se, per_problem=per_problem.tolist())
