"""DAPO's dynamic sampling with refill, as verl runs it (``algorithm.filter_groups``): generate whole groups,
drop those whose rewards all agree, and keep generating batches of fresh prompts until B groups with a
learning signal are in hand or ``algo.max_num_gen_batches`` batches were generated; then train on the first
B of them.

Decisions:
- **Which prompts refill.** Round ``r ≥ 1`` of step ``k`` draws B problems uniformly without replacement
  from the training set with a generator seeded by ``(seed, k, r)``: a pure function of the step, so a
  resumed run refills exactly as the uninterrupted one did, and the main stream's position stays the step
  count. A refill prompt may repeat one the stream gives at another step, as verl's next batches may.
- **Too few informative groups.** verl stops the run with an error once ``max_num_gen_batches`` is reached;
  here the step trains on what it has: the informative groups found, topped up with the first round's
  other groups (which the dynamic-sampling mask, ``algo.dynamic_sampling``, then drops, as before refill),
  and ``refill/short`` counts such steps.
- **With ARRoL.** Each round is pruned at L_detect like the first; "informative" is judged on the survivors,
  which are what the update sees.
- **Cost.** Every round's generation and reward time is the step's: refill is paid for in wall-clock time,
  which is how it is compared (``time/wall``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from arrol_pl.core.advantages import dynamic_sampling_mask
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.engine.protocol import GenerationResult
from arrol_pl.train.step.rollouts import RolloutRound, StepGroups


def refill_indices(num_problems: int, count: int, seed: int, step: int, round_: int) -> list[int]:
    """The problems of refill round ``round_`` (≥ 1) of ``step``: ``count`` distinct indices."""
    g = torch.Generator().manual_seed((seed * 1_000_033 + step * 101 + round_) % (2**63 - 1))
    return torch.randperm(num_problems, generator=g)[:count].tolist()


def informative_groups(rewards: Sequence[float], group_ids: Sequence[int]) -> list[int]:
    """Prompt indices, in order, whose survivors' rewards differ (non-zero group advantage): the groups DAPO's
    filter (:func:`~arrol_pl.core.advantages.dynamic_sampling_mask`) keeps."""
    ids = torch.as_tensor(list(group_ids), dtype=torch.long)
    keep = dynamic_sampling_mask(torch.as_tensor(list(rewards), dtype=torch.float32), ids)
    return sorted({int(g) for g in ids[keep]})


@dataclass
class RefillResult:
    problems: list
    """The step's problems, in the order of the merged rollouts' prompt indices."""
    rollouts: list
    """Every kept group's rollouts, prompt indices renumbered 0 .. len(problems) − 1."""
    rounds: int
    informative: int
    """Informative groups found over all rounds (before keeping B)."""
    generated: int
    """Rollouts generated over all rounds."""
    tokens: int


def generate_with_refill(
    first_problems: Sequence,
    first_rollouts: Sequence,
    first_informative: list[int],
    prompts_per_step: int,
    max_rounds: int,
    next_round: Callable[[int], tuple[list, list, list[int], int]],
) -> RefillResult:
    """Merge rounds until ``prompts_per_step`` informative groups (or ``max_rounds`` rounds).

    ``next_round(r)`` generates round ``r`` and returns ``(problems, rollouts, informative prompt indices,
    generated tokens)``; the first round's are given.
    """
    rounds = [(list(first_problems), list(first_rollouts), list(first_informative))]
    found = len(first_informative)
    tokens = 0
    while found < prompts_per_step and len(rounds) < max_rounds:
        problems, rollouts, informative, round_tokens = next_round(len(rounds))
        rounds.append((problems, rollouts, informative))
        found += len(informative)
        tokens += round_tokens
    chosen = [(r, p) for r, (_, _, inf) in enumerate(rounds) for p in inf][:prompts_per_step]
    if len(chosen) < prompts_per_step:  # short: top up with the first round's other groups
        taken = {p for r, p in chosen if r == 0}
        chosen += [(0, p) for p in range(len(rounds[0][0])) if p not in taken][: prompts_per_step - len(chosen)]
        chosen.sort()
    problems, rollouts = [], []
    for new_index, (r, p) in enumerate(chosen):
        problems.append(rounds[r][0][p])
        rollouts.extend(dataclasses.replace(x, prompt_index=new_index) for x in rounds[r][1] if x.prompt_index == p)
    return RefillResult(problems, rollouts, len(rounds), found, sum(len(x[1]) for x in rounds), tokens)


def refilled(
    first: StepGroups, rollout_round: RolloutRound, problems: Sequence, params: PrunerParams, algo, seed: int, step: int
) -> StepGroups:
    """A step's groups with refill: ``first`` is the first round's; each further round draws
    ``algo.prompts_per_step`` of the training ``problems`` (a function of ``seed``, ``step`` and the round) and
    prunes with draws of its own. Adds the ``refill/*`` metrics."""

    def next_round(r: int):
        extra = [problems[i] for i in refill_indices(len(problems), algo.prompts_per_step, seed, step, r)]
        round_params = dataclasses.replace(params, seed=(params.seed * 31 + r) % (2**31 - 1))
        more = rollout_round.generate_groups(extra, round_params)
        found = (
            [] if more.survivors is None else informative_groups(more.scored.rewards, more.survivors.group_ids.tolist())
        )
        return extra, more.generation.rollouts, found, more.generation.generated_tokens

    result = generate_with_refill(
        first.problems,
        first.generation.rollouts,
        informative_groups(first.scored.rewards, first.survivors.group_ids.tolist()),
        algo.prompts_per_step,
        algo.max_num_gen_batches,
        next_round,
    )
    # a refilled step trains on groups of several rounds, and ranks refill apart, so none gathers every rollout
    groups = dataclasses.replace(first, every_rollout=None)
    if result.rounds > 1:
        gen = first.generation
        # the kept groups, scored together (a few ms)
        groups = rollout_round.rewarded(
            result.problems,
            GenerationResult(result.rollouts, gen.wall_seconds, gen.steps, gen.generated_tokens + result.tokens),
        )
    groups.metrics.update(
        {
            "refill/rounds": float(result.rounds),
            "refill/informative_groups": float(result.informative),
            "refill/short": float(result.informative < algo.prompts_per_step),
            "refill/rollouts_generated": float(result.generated),
        }
    )
    return groups
