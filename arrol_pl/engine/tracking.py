"""The bookkeeping of one generation, apart from vLLM: which request is at which length, what was decided.

:class:`GenerationTracker` consumes the engine's streamed deltas (:class:`RequestDelta`, one per request
and engine step), says which rollouts reached their detection target in that step, draws the keep/prune
decisions of complete groups with :func:`~arrol_pl.core.pruning.decide_group` (paper Eq. 1–2, Algorithm 1
l. 20–26) and builds the final :class:`~arrol_pl.engine.protocol.Rollout` records. The engine does the
rest: it feeds the deltas, scores the resolved rollouts and aborts what the tracker pruned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from arrol_pl.core.pruning import PrunerParams, decide_group
from arrol_pl.engine.protocol import FINISH_REASONS, Rollout


@dataclass
class RequestDelta:
    """What one engine step produced for one request (vLLM's streamed ``DELTA`` output, as plain data)."""

    request_id: str
    token_ids: list[int]
    text: str
    logprobs: list[dict[int, float]] | None
    """Per new token: {token id: log-prob}; None when not requested."""
    finished: bool
    finish_reason: str | None


@dataclass
class Track:
    """One rollout in flight."""

    ext_id: str
    internal_id: str
    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    finish_reason: str | None = None
    resolved: bool = False
    """Reached its target length or finished: its feature is due."""
    eligible: bool = False
    feature: torch.Tensor | None = None
    score: float | None = None
    decided: bool = False
    pruned: bool = False
    survival: float | None = None
    posterior: float | None = None


class GenerationTracker:
    """Rollouts of one ``generate`` call, grouped by prompt.

    ``target`` is the response length at which a rollout's feature is taken: ``detect_length``, or past
    any reachable length when ``detect_length`` is None (features at the end, nothing eligible).
    """

    def __init__(self, detect_length: int | None, target: int, pruner: PrunerParams | None,
                 want_logprobs: bool) -> None:
        if pruner is not None and detect_length is None:
            raise ValueError("pruner params given without detect_length: pruning happens at L_detect")
        self.detect_length = detect_length
        self.target = target
        self.pruner = pruner
        self.want_logprobs = want_logprobs
        self.tracks: dict[str, Track] = {}
        self.groups: list[list[Track]] = []
        self.steps = 0

    def add(self, ext_id: str, internal_id: str, prompt_index: int, sample_index: int, prompt_ids: list[int]) -> Track:
        """Register a request; prompts must be added in order (``prompt_index`` 0, 1, ...)."""
        if prompt_index == len(self.groups):
            self.groups.append([])
        elif prompt_index != len(self.groups) - 1:
            raise ValueError(f"prompt {prompt_index} added after prompt {len(self.groups) - 1}: add prompts in order")
        tr = Track(ext_id, internal_id, prompt_index, sample_index, prompt_ids,
                   logprobs=[] if self.want_logprobs else None)
        self.tracks[ext_id] = tr
        self.groups[prompt_index].append(tr)
        return tr

    def consume(self, deltas: Iterable[RequestDelta]) -> list[Track]:
        """Accumulate one engine step's deltas; returns the rollouts that resolved in this step."""
        self.steps += 1
        resolved: list[Track] = []
        for out in deltas:
            tr = self.tracks.get(out.request_id)
            if tr is None:
                continue
            tr.tokens.extend(out.token_ids)
            tr.text.append(out.text)
            if self.want_logprobs and out.logprobs:
                tr.logprobs.extend(out.logprobs)
            if out.finished:
                tr.finish_reason = out.finish_reason
            if not tr.resolved and (out.finished or len(tr.tokens) >= self.target):
                tr.resolved = True
                tr.eligible = self.detect_length is not None and not out.finished
                resolved.append(tr)
        return resolved

    def decide(self, prompt_indices: Iterable[int]) -> list[str]:
        """Draw keep/prune for every group among ``prompt_indices`` whose members have all resolved (their
        scores set); returns the internal ids of pruned rollouts still running, to abort. Without pruner
        params nothing is decided."""
        if self.pruner is None:
            return []
        to_abort: list[str] = []
        for p in sorted(set(prompt_indices)):
            group = self.groups[p]
            if any(not tr.resolved for tr in group) or group[0].decided:
                continue
            scores = torch.tensor([tr.score for tr in group], dtype=torch.float32)
            eligible = torch.tensor([tr.eligible for tr in group], dtype=torch.bool)
            d = decide_group(self.pruner, scores, eligible, self.pruner.group_generator(p))
            for i, tr in enumerate(group):
                tr.decided = True
                tr.survival, tr.posterior = float(d.survival[i]), float(d.posterior[i])
                if not bool(d.keep[i]):
                    tr.pruned = True
                    if tr.finish_reason is None:
                        to_abort.append(tr.internal_id)
                    tr.finish_reason = "pruned"
        return to_abort

    @property
    def finished(self) -> int:
        """Rollouts that finished or were pruned."""
        return sum(t.finish_reason is not None for t in self.tracks.values())

    def running(self) -> list[str]:
        """Internal ids of the requests still running."""
        return [t.internal_id for t in self.tracks.values() if t.finish_reason is None]

    def rollouts(self, decode: Callable[[list[int]], str]) -> list[Rollout]:
        """The records, ordered by (prompt index, sample index). A pruned rollout is cut to ``detect_length``
        tokens and its text re-decoded with ``decode``: the incremental detokenizer holds back a trailing
        partial character, and an aborted request never flushes it."""
        return [self._rollout(tr, decode) for group in self.groups for tr in group]

    def _rollout(self, tr: Track, decode: Callable[[list[int]], str]) -> Rollout:
        generated = len(tr.tokens)
        tokens, text, logprobs = tr.tokens, "".join(tr.text), tr.logprobs
        if tr.pruned:
            tokens = tokens[: self.detect_length]
            text = decode(tokens)
            logprobs = None if logprobs is None else logprobs[: self.detect_length]
        if tr.finish_reason not in FINISH_REASONS:
            raise RuntimeError(f"rollout {tr.ext_id} ended with unexpected finish reason {tr.finish_reason!r}")
        return Rollout(
            prompt_index=tr.prompt_index,
            sample_index=tr.sample_index,
            prompt_token_ids=list(tr.prompt_ids),
            response_token_ids=list(tokens),
            text=text,
            finish_reason=tr.finish_reason,
            pruned=tr.pruned,
            feature=tr.feature,
            score=tr.score,
            eligible=tr.eligible,
            survival=tr.survival,
            posterior=tr.posterior,
            generated_tokens=generated,
            logprobs=logprobs,
        )
