"""Which rollouts each subset trains on: a prompt's G (+ G) + R rollouts split into its group, the controls' part
and the reference, the group's survivors under each rule (decided by the project's own decision code), and the two
controls without pruning.

Decisions:
- **The reference apart.** A prompt's rollouts are sampled alike; the first G are its group (the rules choose among
  them), the last R the reference, which shares no rollout with any subset, so no cosine is raised by a shared one.
- **Two controls without pruning.** The *count-matched* κG trains on as many rollouts as κ keeps. The
  *cost-matched* G' decodes as many tokens as pruning does: pruning at κ decodes its survivors whole and the
  pruned rollouts up to L_detect, G' = (those tokens per prompt) / L̄ with L̄ the group rollouts' mean length, about
  G·(κ + (1 − κ)·L_detect / L̄) (:func:`cost_matched_size`, measured on the default rule's own decisions). A
  fractional G' is met on average: each prompt trains on ⌊G'⌋ or ⌈G'⌉ rollouts, drawn with the seed
  (:func:`fresh_counts`). Both controls read the first rollouts of their part (the count-matched ones are the
  first κG).
- **The controls share the group's rollouts** (``controls=shared``, the default): rollouts sampled alike are
  exchangeable, so the first G' of a group, taken before any score is read, are distributed as G' rollouts sampled
  for that prompt alone: the control's expected measures are those of a run that samples G'. Sharing them with the
  rules' survivors is common random numbers: each paired difference keeps its mean and loses the variance of two
  independent draws, and a prompt samples G + R rollouts, not 2G + R. ``controls=fresh`` gives the controls G
  rollouts of their own (:attr:`Parts.fresh`), as a check.
- **Training's decisions.** A rule's survivors are :func:`~arrol_pl.core.decisions.decide_group`'s on h_t made by
  :func:`~arrol_pl.core.pruning.build_pruner_params` from the scorer's calibrator (δ solved over its window, as the
  trainer solves it before a step), with the floor of 2 survivors and rollouts that finished before L_detect kept.
  Random pruning is the same call with ``policy=random`` (survival κ).
- **Common random numbers.** Every rule decides a prompt's group with the same uniform draws (the generator of
  the prompt's index under one seed): two rules differ only where their survival probabilities differ.
- **The rules compared** are the paper's Eq. 2 (``balance_target=global``) and the project's default, read from
  :class:`~arrol_pl.core.pruning.PruningConfig` when the probe runs (one rule when they are the same), and any other
  the probe is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.metrics import balance_stats
from arrol_pl.core.decisions import decide_groups
from arrol_pl.core.pruning import PrunerParams, PruningConfig, build_pruner_params

CONTROLS = ("fresh_count", "fresh_cost")
"""The subsets without pruning: the count-matched κG and the cost-matched G' (keys as recorded)."""
PAPER_RULE = "global"
"""The paper's Eq. 2: one δ for every rollout (``balance_target``)."""


def compared_rules(extra: Sequence[str] = (), default: str | None = None, paper: bool = True) -> list[str]:
    """The default ``balance_target`` (``default``, else :class:`PruningConfig`'s now), then Eq. 2's (``paper``), then
    ``extra``, each once."""
    return list(dict.fromkeys([default or PruningConfig().balance_target, *([PAPER_RULE] if paper else []), *extra]))


def kappa_key(key: str, kappa: float, keep_ratio: float) -> str:
    """A subset's key at ``kappa``: as it is at the probe's ``keep_ratio``, with ``@<κ>`` at any other."""
    return key if kappa == keep_ratio else f"{key}@{kappa:g}"


@dataclass(frozen=True)
class Parts:
    """Where a prompt's ``group_size + fresh_size + reference_size`` rollouts go, in sample order
    (``fresh_size`` 0: the controls read the group)."""

    group_size: int
    fresh_size: int
    reference_size: int

    @classmethod
    def of(cls, group_size: int, reference_size: int, controls: str = "shared") -> Parts:
        """The parts of a probe whose controls are ``controls`` (``shared`` or ``fresh``)."""
        return cls(group_size, group_size if controls == "fresh" else 0, reference_size)

    @property
    def controls(self) -> slice:
        """The rollouts the controls take their first ones from: their own part, else the group."""
        return self.fresh if self.fresh_size else self.group

    @property
    def samples(self) -> int:
        """Rollouts sampled per prompt."""
        return self.group_size + self.fresh_size + self.reference_size

    @property
    def group(self) -> slice:
        return slice(0, self.group_size)

    @property
    def fresh(self) -> slice:
        return slice(self.group_size, self.group_size + self.fresh_size)

    @property
    def reference(self) -> slice:
        return slice(self.group_size + self.fresh_size, self.samples)


def is_control(key: str) -> bool:
    """Whether subset ``key`` (at any κ) is a control without pruning: it decodes only the rollouts it keeps."""
    return key.split("@")[0] in CONTROLS


def subset_rows(parts: Parts, prompts: list[int], part: slice, keep: torch.Tensor) -> list[int]:
    """Rows of a generation ordered (prompt, sample) that a subset trains on: the rollouts ``keep: (len(prompts), n)``
    picks from ``part`` (``parts.group``, ``.controls`` or ``.reference``) of each of ``prompts``."""
    return [
        p * parts.samples + part.start + s for j, p in enumerate(prompts) for s in keep[j].nonzero().flatten().tolist()
    ]


def pruner_params(
    policy: str, calibrator: BinnedCalibrator, keep_ratio: float, seed: int, balance_target: str = PAPER_RULE
) -> PrunerParams:
    """h_t of a rule (``policy=arrol`` with ``balance_target``) or of random pruning (``policy=random``) from a
    scorer's ``calibrator``, active, without a gate: what the trainer builds for a step past its cold start."""
    config = PruningConfig(
        policy=policy,
        keep_ratio=keep_ratio,
        balance_target=balance_target,
        cold_start_steps=0,
        num_bins=calibrator.num_bins,
        buffer_capacity=calibrator.capacity,
        seed=seed,
    )
    return build_pruner_params(config, calibrator, 0)


def survivors(
    params: PrunerParams, scores: torch.Tensor, eligible: torch.Tensor, prompt_indices: list[int]
) -> torch.Tensor:
    """``(P, G)`` bool: each prompt's survivors under ``params``. ``scores, eligible: (P, G)``; row p decides with
    the generator of ``prompt_indices[p]`` (common random numbers across rules)."""
    decisions = decide_groups(params, list(scores), list(eligible), [params.group_generator(i) for i in prompt_indices])
    return torch.stack([d.keep for d in decisions]) if decisions else torch.zeros(scores.shape, dtype=torch.bool)


def decoded_tokens(
    lengths: torch.Tensor, keep: torch.Tensor, eligible: torch.Tensor, detect_length: int
) -> torch.Tensor:
    """``(P,)`` tokens each prompt's generation decodes when its group keeps ``keep``: a survivor (or a rollout that
    finished before L_detect) whole, a pruned one up to L_detect. ``lengths, keep, eligible: (P, n)``."""
    pruned = ~keep & eligible
    return torch.where(pruned, lengths.clamp(max=detect_length), lengths).double().sum(1)


def cost_matched_size(lengths: torch.Tensor, keep: torch.Tensor, eligible: torch.Tensor, detect_length: int) -> float:
    """G': the fresh rollouts per prompt that decode as many tokens as pruning to ``keep`` does, over ``P`` prompts
    (:func:`decoded_tokens` over the mean length of the group's rollouts), at most the group's size.
    ``lengths, keep, eligible: (P, G)``."""
    mean_length = float(lengths.double().mean())
    if mean_length <= 0:
        return float(keep.shape[1])
    return min(float(decoded_tokens(lengths, keep, eligible, detect_length).mean()) / mean_length, float(keep.shape[1]))


def fresh_counts(prompts: int, size: float, seed: int) -> torch.Tensor:
    """``(prompts,)`` long: ⌊size⌋ or ⌈size⌉ rollouts per prompt, ⌈size⌉ with probability size − ⌊size⌋ (drawn
    with ``seed``), so the mean count is ``size`` in expectation."""
    whole, frac = int(size), size - int(size)
    draws = torch.rand(prompts, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return whole + (draws < frac).long()


def first_of(counts: torch.Tensor, size: int) -> torch.Tensor:
    """``(P, size)`` bool: the first ``counts[p]`` of each prompt's ``size`` rollouts."""
    return torch.arange(size).unsqueeze(0) < counts.clamp(max=size).unsqueeze(1)


def balance(keep: torch.Tensor, correct: torch.Tensor, group_size: int) -> dict[str, float]:
    """What a subset trains on of ``P`` prompts: ``kept_share`` (its rollouts per prompt / ``group_size``: a rule's
    kept share of the group; the fresh group's κ), the kept ``positive_ratio`` and the share of prompts with
    ``zero_advantage`` (one outcome or fewer than 2 rollouts), from :func:`balance_stats`.
    ``keep: (P, n)`` bool, ``correct: (P, n)`` 0/1 over the rollouts it chose from."""
    groups = torch.arange(keep.shape[0]).unsqueeze(1).expand_as(keep)
    stats = balance_stats(correct[keep].double(), groups[keep])
    return {
        "kept_share": float(keep.double().sum(1).mean()) / group_size,
        "positive_ratio": stats["positive_ratio"],
        "zero_advantage": stats["zero_advantage_fraction"],
    }
