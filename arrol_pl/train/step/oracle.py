"""The oracle scorer's round (``pruning.scorer=oracle``, a study arm): what any scorer of a given AUC at L_detect
would do to learning, with only the decode time it would save modelled.

Every rollout runs to its end (the decision reads its outcome, which only the end knows) and is rewarded; the
outcomes, through Gaussian noise of AUC ``pruning.oracle_auc`` (:func:`~arrol_pl.core.scorers.oracle_scores`), are
the scores the calibrator, h_t and the survival rule read, exactly where the head's would be. The pruned rollouts
are then dropped before the log-probs, the update and the head, which run on the survivors in real time (every
rollout's score and outcome stay with the step's groups, so its scorer AUC is exact, not estimated). The
generation time that aborting the pruned ones at L_detect would have saved is credited by the decode-cost model
(:func:`~arrol_pl.core.decode_cost.pruning_credit`) as ``time/credit``, never taken out of ``time/wall``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from arrol_pl.core.decode_cost import pruning_credit
from arrol_pl.core.decisions import decide_batch
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.scorers import oracle_scores
from arrol_pl.core.screening import GroupScreen
from arrol_pl.train.step.rollouts import RolloutRound, StepGroups


class OracleRound(RolloutRound):
    """A :class:`~.rollouts.RolloutRound` whose decisions read the outcome at AUC ``auc``; ``slots``: the engine's
    ``max_num_seqs``; ``detect_first``: ``engine.detect_first`` (the credit models the schedule real pruning
    would have run; null: the faster of the two by the fitted step cost)."""

    def __init__(self, *args, auc: float, slots: int, detect_first: bool | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.detect_length is None:
            raise ValueError("the oracle prunes at L_detect: it needs engine.detect_length")
        self.auc, self.slots, self.detect_first = auc, slots, detect_first

    def generate_groups(
        self, problems: Sequence, params: PrunerParams, screen: GroupScreen | None = None
    ) -> StepGroups:
        """The groups of ``problems``: every rollout generated to its end and rewarded, then pruned on its outcome's
        noisy score; the saved decode time is credited as ``time/credit``."""
        if screen is not None:
            raise ValueError("the oracle decides after the rollouts end; it takes no group screen")
        gen = self.generate(problems, dataclasses.replace(params, active=False))
        groups = self.rewarded(problems, gen)  # nothing is pruned yet: survivor i is rollout i
        labels = torch.as_tensor(groups.scored.correct, dtype=torch.float32)
        scores = oracle_scores(labels, self.auc, torch.Generator().manual_seed(params.seed * 31 + 17))
        eligible = torch.tensor([r.eligible for r in gen.rollouts], dtype=torch.bool)
        decision = decide_batch(
            params, scores, eligible, groups.survivors.group_ids, [r.sample_index for r in gen.rollouts]
        )
        for i, r in enumerate(gen.rollouts):
            r.score, r.survival, r.posterior = (
                float(scores[i]),
                float(decision.survival[i]),
                float(decision.posterior[i]),
            )
            r.pruned = not bool(decision.keep[i])
            r.joint = tuple(decision.joint[i, 1:].tolist()) if not torch.isnan(decision.joint[i, 0]) else None
        surv = dataclasses.replace(
            groups.survivors, scores=scores, survival=decision.survival.clone(), joint=decision.joint
        )
        kept = torch.nonzero(decision.keep, as_tuple=True)[0].tolist()
        many_rollouts = len(gen.rollouts) > self.slots
        credit = pruning_credit(
            [r.generated_tokens for r in gen.rollouts],
            [r.pruned for r in gen.rollouts],
            self.detect_length,
            self.slots,
            gen.step_seconds,
            gen.step_requests,
            detect_first=self.detect_first if many_rollouts and params.active else False,
        )
        metrics = {
            "time/credit": credit.seconds,
            "oracle/credited_tokens": float(credit.tokens),
            "oracle/step_fixed_seconds": credit.cost.fixed,
            "oracle/step_request_seconds": credit.cost.per_request,
        }
        return StepGroups(
            groups.problems,
            gen,
            surv.subset(kept),
            groups.scored.subset(kept),
            metrics,
            every_rollout=(surv.group_ids, scores, labels),
        )
