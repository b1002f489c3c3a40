"""Which schedule a pruned generation runs when ``engine.detect_first`` is null: the one the engine's own step cost
models faster for the generation's shape.

Decisions:
- **Both schedules decode the same tokens.** Detect-first does it in fewer engine steps (or as many) and computes each
  survivor's prompt and first L_detect tokens again past the blocks prefix caching holds. It pays where a step's
  fixed cost dominates (a GPU's memory-bound decode, small models) and the blocks are small (16 tokens on CUDA, 32 on
  CPU by default), and loses where computing those prefixes again costs more than the steps save (compute-bound
  decoding with large blocks: vLLM's CPU default of 128 computes a short prompt again whole).
- **The step cost is measured once**, on the engine's first generation of :data:`CALIBRATION_STEPS` steps or more
  (seconds against the tokens each step computed, :func:`~arrol_pl.core.decode_cost.fit_step_cost`), and then kept:
  a run never changes its mind about a shape, and its checkpoint keeps the fit, so a resume schedules as the run it
  resumes. Before the fit, one pass. Two fresh runs on machines of different speed may choose differently near the
  break-even, where it matters least; ``engine.detect_first=true|false`` makes the choice independent of the machine.
- The model (:func:`~arrol_pl.core.decode_cost.plan_schedule`) takes every rollout at its token budget and the
  pruned ones spread evenly, the survivor count varying as the draw lets it (``pruning.draw``: binomially for
  independent draws, not at all for the fixed-size draw when κG is whole); with a slot for every rollout nothing
  waits, and one pass always runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from arrol_pl.core.decode_cost import SchedulePlan, StepCost, fit_step_cost, plan_schedule
from arrol_pl.core.pruning import PrunerParams

CALIBRATION_STEPS = 16
"""The fewest engine steps a generation needs to fit :attr:`Scheduling.step_cost` on."""


class Scheduling:
    """``engine.detect_first`` (``setting``: True, False or None, the modelled choice) for ``slots`` slots and KV blocks
    of ``block`` tokens (None: no prefix caching)."""

    def __init__(self, setting: bool | None, slots: int, block: int | None) -> None:
        self.setting, self.slots, self.block = setting, slots, block
        self.step_cost: StepCost | None = None
        """Seconds per engine step, ``fixed + per_request × tokens computed``; None until measured."""
        self.plan: SchedulePlan | None = None
        """The modelled seconds of the last generation's two schedules, when it chose between them."""

    def measured(self, step_seconds: Sequence[float], step_tokens: Sequence[int]) -> None:
        """A generation's steps: the first long enough fixes :attr:`step_cost`."""
        if self.step_cost is None and len(step_seconds) >= CALIBRATION_STEPS:
            self.step_cost = fit_step_cost(step_seconds, step_tokens)

    def detect_first(
        self, prompt_lengths: Sequence[int], group_size: int, pruner: PrunerParams, detect_length: int, response: int
    ) -> bool:
        """Whether a pruned generation of this shape runs detect-first (its figures in :attr:`plan` when modelled)."""
        self.plan = None
        if len(prompt_lengths) * group_size <= self.slots:
            return False
        if self.setting is not None:
            return self.setting
        if self.step_cost is None:
            return False
        self.plan = plan_schedule(
            prompt_lengths,
            group_size,
            pruner.keep_ratio,
            detect_length,
            response,
            self.slots,
            self.block,
            self.step_cost,
            fixed_size=pruner.draw == "fixed_size",
        )
        return self.plan.chosen
