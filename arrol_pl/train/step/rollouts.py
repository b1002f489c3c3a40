"""One round of rollouts: Algorithm 1 lines 7–8 and the reward. The engine generates ``len(problems) × G``
rollouts pruned at L_detect with h_t, the pruned ones are dropped, and the survivors are rewarded.

A step runs one round, or several with DAPO's refill (:mod:`.refill`); the group screen (:mod:`.screening`)
runs one round with the engine's screen. :class:`StepGroups` is what a step trains on, whichever chose it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.scorers import CheckerScorer, ConfidenceScorer, PrefixScorer
from arrol_pl.core.screening import GroupScreen
from arrol_pl.engine.protocol import GenerationResult, RolloutEngine
from arrol_pl.tasks import registry
from arrol_pl.train.step.context import PhaseTimer
from arrol_pl.train.step.survivors import Survivors, collect_survivors

if TYPE_CHECKING:
    from arrol_pl.core.screening import ScreenStep
    from arrol_pl.tasks.reward import RewardResult


@dataclass
class StepGroups:
    """The groups of one step: the problems in the order of the rollouts' prompt indices, their generation,
    the survivors and their rewards (both None when every rollout was pruned), and the metrics of choosing
    them (``screen/*``, ``refill/*``)."""

    problems: list
    generation: GenerationResult
    survivors: Survivors | None = None
    scored: RewardResult | None = None
    """The reward's result on the survivors."""
    metrics: dict[str, float] = field(default_factory=dict)
    screen: ScreenStep | None = None
    """The step's group screen (None without one)."""
    every_rollout: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    """``(prompt indices, scores, labels)``, ``(N,)`` each, of every rollout of the round, the pruned ones too, where
    their outcomes are known (the oracle's round decodes them all); None: only the survivors' are."""

    def head_rows(
        self,
        features: torch.Tensor,
        scores: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor,
        group_ids: torch.Tensor,
        survival: torch.Tensor,
        joint: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """The quality head's and calibrator's rows ``(features, scores, labels, weights, group ids, survival, joint)``
        (:func:`~arrol_pl.core.sampling.joint_rows`): the
        survivors', and with a detect-stage screen the audited groups it dropped, weighted 1 / audit share
        (otherwise both would see the kept groups only)."""
        rows = (features, scores, labels, weights, group_ids, survival, joint)
        return rows if self.screen is None else self.screen.with_dropped_audit(rows, self.generation.rollouts)

    def prompt_rows(self, labels: torch.Tensor, weights: torch.Tensor):
        """The prompt head's rows from the survivors' labels and weights
        (:meth:`~arrol_pl.core.screening.ScreenStep.prompt_rows`); None without a prompt stage."""
        return None if self.screen is None else self.screen.prompt_rows(self.survivors.group_ids, labels, weights)


def prefix_scorers(scorer: str, task: str) -> Callable[[Sequence], PrefixScorer | None]:
    """``scorer_for(problems) -> PrefixScorer | None``: what scores a round's rollouts at L_detect in place of the
    head (``pruning.scorer``; None for the head and the oracle, which the engine does not apply)."""
    if scorer == "confidence":
        confidence = ConfidenceScorer()
        return lambda problems: confidence
    if scorer == "checker":
        check = registry.prefix_checker(task)
        if check is None:
            raise ValueError(f"pruning.scorer=checker: data.name={task} cannot check a response prefix")
        return lambda problems: CheckerScorer(check, problems)
    return lambda problems: None


class RolloutRound:
    """One round of a step: :meth:`generate_groups` generates (timed as ``generation``), drops the pruned
    rollouts and rewards the survivors (``reward``). ``sampling``: vLLM sampling keywords; ``scorer_for``: the
    prefix scorer of a round's problems (:func:`prefix_scorers`; None: the head); ``logprobs``: the rollouts carry
    the engine's log-prob of each sampled token (``Rollout.sampled_logprobs``; they cost generation time)."""

    def __init__(
        self,
        engine: RolloutEngine,
        reward,
        sampling: dict,
        group_size: int,
        detect_length: int | None,
        timer: PhaseTimer,
        scorer_for: Callable[[Sequence], PrefixScorer | None] | None = None,
        logprobs: bool = True,
    ) -> None:
        self.engine, self.reward, self.sampling = engine, reward, sampling
        self.group_size, self.detect_length, self.timer = group_size, detect_length, timer
        self.scorer_for = scorer_for or (lambda problems: None)
        self.logprobs_topk = 0 if logprobs else None  # 0: the sampled token's alone

    def generate_groups(
        self, problems: Sequence, params: PrunerParams, screen: GroupScreen | None = None
    ) -> StepGroups:
        """The groups of ``problems``: their rollouts generated and pruned per ``params`` (and ``screen``), the
        survivors rewarded; ``survivors`` is None when every rollout was pruned (then nothing was rewarded)."""
        gen = self.generate(problems, params, screen)
        if all(r.pruned for r in gen.rollouts):
            return StepGroups(list(problems), gen)
        return self.rewarded(problems, gen)

    def generate(self, problems: Sequence, params: PrunerParams, screen: GroupScreen | None = None):
        """The round's rollouts, pruned inside the engine per ``params`` (timed as ``generation``)."""
        scorer = self.scorer_for(problems)
        extra = {} if scorer is None else {"scorer": scorer}  # an engine without prefix scorers still serves the head
        with self.timer("generation"):
            return self.engine.generate(
                [p.prompt for p in problems],
                self.group_size,
                self.sampling,
                self.detect_length,
                params,
                logprobs_topk=self.logprobs_topk,
                screen=screen,
                **extra,
            )

    def rewarded(self, problems: Sequence, gen: GenerationResult) -> StepGroups:
        """The survivors of ``gen`` (rollouts of ``problems``) and their rewards."""
        surv = collect_survivors(gen.rollouts, [p.answer for p in problems])
        with self.timer("reward"):
            scored = self.reward.score(
                surv.texts,
                surv.golds,
                lengths=[len(r) for r in surv.response_ids],
                prompts=[problems[g].prompt for g in surv.group_ids.tolist()],
            )
        return StepGroups(list(problems), gen, surv, scored)
