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
from arrol_pl.engine.protocol import GenerationResult
from arrol_pl.train.phases import collect_survivors


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


def generate_with_refill(first_problems: Sequence, first_rollouts: Sequence, first_informative: list[int],
                         prompts_per_step: int, max_rounds: int,
                         next_round: Callable[[int], tuple[list, list, list[int], int]]) -> RefillResult:
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
        chosen += [(0, p) for p in range(len(rounds[0][0])) if p not in taken][:prompts_per_step - len(chosen)]
        chosen.sort()
    problems, rollouts = [], []
    for new_index, (r, p) in enumerate(chosen):
        problems.append(rounds[r][0][p])
        rollouts.extend(dataclasses.replace(x, prompt_index=new_index) for x in rounds[r][1] if x.prompt_index == p)
    return RefillResult(problems, rollouts, len(rounds), found, sum(len(x[1]) for x in rounds), tokens)


class Refiller:
    """The refill rounds of a training step over ``problems`` (the module calls it after the first round's rewards)."""

    def __init__(self, engine, reward, problems: Sequence, cfg) -> None:
        self.engine, self.reward, self.problems, self.cfg = engine, reward, list(problems), cfg

    def __call__(self, step: int, batch, gen, surv, scored, sampling, params, timer):
        """Returns the step's problems, generation, survivors and rewards over the B groups kept, and the refill
        metrics (``refill/*``)."""
        algo, engine = self.cfg.algo, self.engine

        def next_round(r: int):
            extra = [self.problems[i] for i in refill_indices(len(self.problems), algo.prompts_per_step,
                                                              self.cfg.trainer.seed, step, r)]
            round_params = dataclasses.replace(params, seed=(params.seed * 31 + r) % (2**31 - 1))  # draws of its own
            with timer("generation"):
                more = engine.generate([p.prompt for p in extra], algo.group_size, sampling,
                                       self.cfg.engine.detect_length, round_params, logprobs_topk=0)
            kept = [x for x in more.rollouts if not x.pruned]
            with timer("reward"):
                rewards = self.reward.score([x.text for x in kept], [extra[x.prompt_index].answer for x in kept],
                                            lengths=[len(x.response_token_ids) for x in kept]).rewards
            return extra, more.rollouts, informative_groups(rewards, [x.prompt_index for x in kept]), \
                more.generated_tokens

        first = informative_groups(scored.rewards, surv.group_ids.tolist())
        result = generate_with_refill(list(batch), gen.rollouts, first, algo.prompts_per_step,
                                      algo.max_num_gen_batches, next_round)
        metrics = {"refill/rounds": float(result.rounds), "refill/informative_groups": float(result.informative),
                   "refill/short": float(result.informative < algo.prompts_per_step),
                   "refill/rollouts_generated": float(result.generated)}
        if result.rounds == 1:
            return batch, gen, surv, scored, metrics
        gen = GenerationResult(result.rollouts, gen.wall_seconds, gen.steps, gen.generated_tokens + result.tokens)
        surv = collect_survivors(gen.rollouts, [p.answer for p in result.problems])
        with timer("reward"):  # the kept groups, scored together (a few ms)
            scored = self.reward.score(surv.texts, surv.golds, lengths=[len(r) for r in surv.response_ids])
        return result.problems, gen, surv, scored, metrics
