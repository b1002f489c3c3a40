"""What the trainer may ask of a rollout engine, importable without vLLM.

:class:`RolloutEngine` is the boundary between the trainer (``arrol_pl.train``) and a rollout backend
(:class:`~arrol_pl.engine.engine.ArrolEngine` on vLLM): generate with the pruning parameters h_t of the
step as an argument (Algorithm 1 l. 12–28), load new weights (l. 14), re-seed sampling, close. The
records a generation returns, :class:`Rollout` and :class:`GenerationResult`, live here too, so code
that reads rollouts (phases, probe, tests) needs no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.scorers import PrefixScorer
from arrol_pl.core.screening import GroupScreen

FINISH_REASONS = ("stop", "length", "pruned")


@dataclass
class Rollout:
    """One generated rollout; ``feature``/``score`` follow the engine's position convention."""

    prompt_index: int
    sample_index: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    text: str
    finish_reason: str
    """``stop`` | ``length`` | ``pruned``."""
    pruned: bool
    feature: torch.Tensor | None
    """(D,) float32 on CPU: the head's training input. None only if no hidden row was captured."""
    score: float | None
    """The score at L_detect the decision read: the raw quality-head logit on ``feature``, computed inside the
    engine step, or another prefix scorer's (:mod:`arrol_pl.core.scorers`)."""
    eligible: bool = False
    """True if the rollout reached ``L_detect`` unfinished (a prune candidate)."""
    survival: float | None = None
    """p_i of Eq. 2 (None without pruner params)."""
    posterior: float | None = None
    """q_i of Eq. 1 (None without pruner params)."""
    joint: tuple[float, ...] | None = None
    """π_ij of the draw: its chance of surviving together with each rollout of its group, by sample index (its own
    survival at its own index; None without a decision)."""
    generated_tokens: int = 0
    """Tokens the engine generated for it (> ``len(response_token_ids)`` only for a pruned rollout that kept
    running while its group waited)."""
    logprobs: list[dict[int, float]] | None = None
    """Per response token: {token id: log-prob} of the top-k (plus the sampled token)."""
    sampled_logprobs: torch.Tensor | None = None
    """``(len(response_token_ids),)`` float32: the log-prob of each sampled response token (what a trainer compares
    its own against); None when no log-probs were asked for."""
    screened: bool = False
    """Its whole group was dropped by the group screen (:mod:`arrol_pl.core.screening`); then ``pruned`` too."""
    audited: bool = False
    """Its group ran to completion for the screen's audit, whatever was decided."""
    full_text: str | None = None
    """An audited rollout's complete text (``text`` is cut at L_detect when it was pruned or screened)."""
    group_p0: float | None = None
    """The detect stage's estimate of its group's chance of zero advantage (None without that stage)."""
    head_score: float | None = None
    """The quality head's logit on ``feature`` (equal to ``score`` when the head is the scorer)."""


def sampled_token_log_probs(logprobs: Sequence[Mapping[int, float]], tokens: Sequence[int]) -> torch.Tensor:
    """``(len(tokens),)`` float32: each sampled token's log-prob from the per-token top-k dicts, which always hold
    the sampled token (vLLM adds it to the top k)."""
    if len(logprobs) != len(tokens):
        raise RuntimeError(f"{len(logprobs)} log-prob entries for {len(tokens)} response tokens")
    return torch.tensor([lp[t] for lp, t in zip(logprobs, tokens)], dtype=torch.float32)


@dataclass
class GenerationResult:
    rollouts: list[Rollout]
    wall_seconds: float
    steps: int
    generated_tokens: int
    step_seconds: list[float] = field(default_factory=list)
    """Each engine step's wall seconds with the bookkeeping that follows it, in order (the decode-cost model's data:
    :mod:`arrol_pl.core.decode_cost`)."""
    step_requests: list[int] = field(default_factory=list)
    """How many requests each engine step advanced."""
    detect_first: bool = False
    """Whether the rollouts ran detect-first (``engine.detect_first``): to L_detect, then the survivors."""

    @property
    def keep_ratio(self) -> float:
        """Fraction of the rollouts of unscreened groups not pruned (≥ κ: rollouts finishing before L_detect are
        never pruned); the group screen's drops are counted apart."""
        unscreened = [r for r in self.rollouts if not r.screened]
        return sum(not r.pruned for r in unscreened) / max(len(unscreened), 1)


class RolloutEngine(Protocol):
    """The calls the trainer makes on its rollout backend."""

    hidden_size: int
    """The policy's hidden size (the width of the paper's detect-time feature, ``head.input=last``)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the backend holds the policy in: what a weight sync sends (each rank casts its shard to it
        before gathering)."""
        ...

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        group_size: int,
        sampling: Mapping[str, Any],
        detect_length: int | None = None,
        pruner: PrunerParams | None = None,
        logprobs_topk: int | None = None,
        progress: str | None = None,
        features: bool = True,
        screen: GroupScreen | None = None,
        scorer: PrefixScorer | None = None,
    ) -> GenerationResult:
        """``len(prompts) × group_size`` rollouts ordered by (prompt, sample), scored at ``detect_length`` (by the
        quality head, or by ``scorer``), screened per ``screen`` and pruned per ``pruner`` (h_t; None prunes
        nothing); ``features=False`` generates without reading hidden states (no score, no pruning: a benchmark's
        baseline)."""
        ...

    def prompt_features(self, prompts: Sequence[str | Sequence[int]]) -> torch.Tensor:
        """``(len(prompts), hidden_size)``: the final-layer hidden state of each prompt's last token (the prompt
        stage of the group screen); one prefill per prompt."""
        ...

    def sync_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | None = None,
        head_state: Mapping[str, torch.Tensor] | None = None,
        every_weight: bool = False,
    ) -> float:
        """Load policy weights (HF names, full tensors) and the quality head's state; returns the seconds taken.
        ``every_weight``: ``weights`` are all of the policy's, and a name the backend's model does not take or a weight
        left without data is an error (a level-2 sleep discarded what the backend held)."""
        ...

    def seed_sampling(self, seed: int) -> None:
        """Make the next generations' sampling a function of ``seed`` and the weights."""
        ...

    def sleep(self, level: int = 1) -> bool:
        """Free the backend's memory (weights and KV cache) for the update; False where unsupported, and then a
        no-op (the trainer calls it every step whatever the backend). ``level=2`` may discard the weights: only
        before a sync that sends every weight."""
        ...

    def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        """Undo :meth:`sleep` before the next generation, all parts or the ``tags`` named (``"weights"``,
        ``"kv_cache"``); False where unsupported."""
        ...

    def close(self) -> None:
        """Release the backend and every reference to what it started (idempotent; any later use raises); a new one
        may then start in this process."""
        ...


def engine_step_cost(engine: Any) -> dict[str, float] | None:
    """The engine's fitted step cost (``ArrolEngine.scheduling.step_cost``) for a checkpoint; None before it is
    measured, or for a backend without one."""
    cost = getattr(getattr(engine, "scheduling", None), "step_cost", None)
    return None if cost is None else {"fixed": cost.fixed, "per_request": cost.per_request}


def restore_engine_step_cost(engine: Any, state: Mapping[str, float] | None) -> None:
    """Give the engine back the step cost a checkpoint kept, so a resumed run schedules as the run it resumes."""
    if state is not None and hasattr(engine, "scheduling"):
        from arrol_pl.core.decode_cost import StepCost

        engine.scheduling.step_cost = StepCost(float(state["fixed"]), float(state["per_request"]))
