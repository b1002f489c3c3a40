"""The held-out evaluation of a training run (before training, every ``trainer.eval_every`` steps and at the end):
greedy accuracy and avg@k at the RL temperature, per problem, on the engine's current weights. The test-time
evaluation of a finished policy (votes, pass@k, several datasets) is :mod:`arrol_pl.analysis.evaluation`.

Decisions:
- **One rank, no chunk**: one generation call over the whole set, greedy then ``samples`` per problem, sampled
  from ``seed``'s stream.
- **Split over the ranks**: with several ranks (or a ``chunk``) the problems are cut, in order, into chunks of
  ``chunk`` problems; rank ``r`` of ``W`` generates and scores chunks ``r, r + W, …`` (as
  :func:`~arrol_pl.train.step.rank_sync.shard_prompts` deals a step's prompts), each sampled from a seed of its own
  (``seed`` and the chunk's index), and every rank gathers the per-problem results: all ranks return the same
  :class:`HeldoutResult`, and no rank evaluates alone while the others wait. It is a function of the weights,
  ``seed`` and ``chunk``, not of ``W``: one rank with the same ``chunk`` computes it too. It is not the unchunked
  one-rank figure: the greedy accuracy is the same (greedy decoding draws nothing), the sampled one another draw
  of the same avg@k. Both hold up to the engine's own scheduling: a prompt prefix that an earlier chunk left in
  a rank's prefix cache shortens a prefill, which can change which rollouts share a sampling step, and float
  rounding differs between batch compositions.
- **Progress on the console**: each generation call draws the engine's bar of finished rollouts (``held-out
  greedy``, then ``held-out avg@k``), on rank 0 only, as the warm start and training draw theirs: an evaluation
  takes tens of seconds on CPU.
- **A random stream of its own**: the engine samples from torch's global generators (no per-request seeds); the
  evaluation forks them (the CPU's and, once CUDA is initialised, the current device's), so the same weights give
  the same figure wherever the evaluation falls, and training's stream continues as if no evaluation had run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from arrol_pl.train.run.rank_errors import rank_wait
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync

SPLIT_CHUNK = 16
"""Problems per chunk of a split evaluation when none is set (``trainer.eval_chunk``): MATH500 makes 32 chunks, 4
per rank of an 8-GPU node; each generation call holds 16 × (1 + samples) rollouts."""


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


def chunk_seed(seed: int, chunk: int) -> int:
    """The sampling seed of chunk ``chunk`` of an evaluation seeded with ``seed``."""
    return (seed * 1_000_003 + chunk) % (2**63 - 1)


def rng_devices() -> list[int]:
    """The CUDA devices whose generator an evaluation forks: the current one once CUDA is initialised."""
    return [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []


def evaluate_heldout(
    engine,
    reward,
    problems: Sequence,
    samples: int,
    temperature: float,
    max_tokens: int,
    stop: Sequence[str] = (),
    seed: int | None = None,
    ranks: RankSync = ONE_RANK,
    chunk: int | None = None,
    progress: str | None = "held-out",
) -> HeldoutResult:
    """Held-out accuracy of the engine's current weights: greedy, and avg@k at the RL temperature.

    With ``seed``, sampling draws from a random stream of its own (see the module docstring). ``ranks``: the
    ranks that share the evaluation (every one of them calls this at the same point, each with its own engine);
    ``chunk``: problems per chunk of a split evaluation (None: one chunk on one rank, :data:`SPLIT_CHUNK` on
    several). Every rank returns the same result. ``progress``: the description of rank 0's progress bars (None:
    silent).
    """
    base = {"max_tokens": max_tokens, **({"stop": list(stop)} if stop else {})}
    progress = progress if ranks.rank == 0 else None
    with torch.random.fork_rng(devices=rng_devices(), enabled=seed is not None):
        if chunk is None and ranks.alone:
            greedy, per_problem = score_problems(engine, reward, problems, samples, temperature, base, seed, progress)
        else:
            chunk = chunk or SPLIT_CHUNK
            mine = {}
            for c in range(ranks.rank, -(-len(problems) // chunk), ranks.world_size):
                mine[c] = score_problems(
                    engine,
                    reward,
                    problems[c * chunk : (c + 1) * chunk],
                    samples,
                    temperature,
                    base,
                    None if seed is None else chunk_seed(seed, c),
                    progress and f"{progress} {c + 1}/{-(-len(problems) // chunk)}",
                )
            with rank_wait("the other ranks' held-out chunks"):
                every = {c: scored for part in ranks.gather(mine) for c, scored in part.items()}
            greedy = np.concatenate([every[c][0] for c in sorted(every)])
            per_problem = torch.cat([every[c][1] for c in sorted(every)])
    se = float(per_problem.std() / len(problems) ** 0.5) if len(problems) > 1 else float("nan")
    return HeldoutResult(
        accuracy=float(per_problem.mean()),
        greedy_accuracy=float(greedy.mean()),
        samples=samples,
        problems=len(problems),
        accuracy_se=se,
        per_problem=per_problem.tolist(),
    )


def score_problems(
    engine,
    reward,
    problems: Sequence,
    samples: int,
    temperature: float,
    base: dict,
    seed: int | None,
    progress: str | None = None,
) -> tuple[np.ndarray, torch.Tensor]:
    """One generation call per decoding over ``problems`` (seeded with ``seed`` unless None; each with a progress bar
    described by ``progress`` unless None), scored: whether each greedy completion is right ``(n,)`` bool, and each
    problem's avg@``samples`` ``(n,)`` float64."""
    prompts = [p.prompt for p in problems]
    golds = [p.answer for p in problems]
    if seed is not None:
        torch.manual_seed(seed)
    # nothing here reads a hidden row or a head score: the tap only counts, the head never runs
    greedy = engine.generate(
        prompts, 1, {"temperature": 0.0, **base}, features=False, progress=progress and f"{progress} greedy"
    )
    sampled = engine.generate(
        prompts,
        samples,
        {"temperature": temperature, **base},
        features=False,
        progress=progress and f"{progress} avg@{samples}",
    )
    # Lengths: a reward with DAPO's overlong penalty needs them (accuracy itself ignores the penalty).
    greedy_correct = reward.score(
        [r.text for r in greedy.rollouts],
        golds,
        prompts=prompts,
        lengths=[len(r.response_token_ids) for r in greedy.rollouts],
    ).correct
    sampled_golds = [golds[r.prompt_index] for r in sampled.rollouts]
    correct = torch.as_tensor(
        reward.score(
            [r.text for r in sampled.rollouts],
            sampled_golds,
            lengths=[len(r.response_token_ids) for r in sampled.rollouts],
            prompts=[prompts[r.prompt_index] for r in sampled.rollouts],
        ).correct,
        dtype=torch.float64,
    )
    per_problem = (
        torch.zeros(len(problems), dtype=torch.float64).index_add_(
            0, torch.tensor([r.prompt_index for r in sampled.rollouts]), correct
        )
        / samples
    )
    return np.asarray(greedy_correct, dtype=bool), per_problem
