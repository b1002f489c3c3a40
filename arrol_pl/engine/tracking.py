"""The bookkeeping of one generation, apart from vLLM: which request is at which length, what was decided.

:class:`GenerationTracker` consumes the engine's streamed deltas (:class:`RequestDelta`, one per request
and engine step), says which rollouts reached their detection target in that step, draws the keep/prune
decisions of complete groups with :func:`~arrol_pl.core.decisions.decide_group` (paper Eq. 1–2, Algorithm 1
l. 20–26) and builds the final :class:`~arrol_pl.engine.protocol.Rollout` records. The engine does the
rest: it feeds the deltas, scores the resolved rollouts and aborts what the tracker pruned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from arrol_pl.core.decisions import decide_groups
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.sampling import joint_by_sample_index
from arrol_pl.core.screening import GroupScreen, select_groups, zero_advantage_probability
from arrol_pl.engine.protocol import FINISH_REASONS, Rollout, sampled_token_log_probs


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
    head_score: float | None = None
    decided: bool = False
    pruned: bool = False
    survival: float | None = None
    posterior: float | None = None
    joint: tuple[float, ...] | None = None
    screened: bool = False
    """Its group was dropped by the screen (or, a shadow group, before generation)."""
    audited: bool = False
    """Runs to completion whatever is decided (the screen's audit)."""
    paused: bool = False
    """Detect-first scheduling: its first request stopped at L_detect and it waits to be continued."""


class GenerationTracker:
    """Rollouts of one ``generate`` call, grouped by prompt.

    ``target`` is the response length at which a rollout's feature is taken: ``detect_length``, or past
    any reachable length when ``detect_length`` is None (features at the end, nothing eligible).

    With a ``screen`` (:class:`~arrol_pl.core.screening.GroupScreen`) the groups are first screened, once all
    of them have resolved: the ``screen.keep`` with the lowest chance of zero advantage pass (a random
    ``keep`` while ``screen.active`` is False), the others are dropped whole; within-group pruning then
    decides the groups that passed. Audited groups run to completion whatever is decided; shadow groups
    take no part in either decision and are reported screened.
    """

    def __init__(
        self,
        detect_length: int | None,
        target: int,
        pruner: PrunerParams | None,
        want_logprobs: bool,
        screen: GroupScreen | None = None,
        pause_at: int | None = None,
    ) -> None:
        if pruner is not None and detect_length is None:
            raise ValueError("pruner params given without detect_length: pruning happens at L_detect")
        if screen is not None and screen.keep is not None and pruner is None:
            raise ValueError("a detect-stage screen needs pruner params (the calibrated posteriors it ranks by)")
        self.detect_length = detect_length
        self.target = target
        self.pruner = pruner
        self.screen = screen
        self.want_logprobs = want_logprobs
        self.pause_at = pause_at
        """Detect-first scheduling: first requests end at this many tokens, and a rollout that reached it without
        finishing is paused, not finished (None: one request per rollout)."""
        self.tracks: dict[str, Track] = {}
        self.requests: dict[str, Track] = {}
        """Request id → its rollout: a continued rollout has a second request."""
        self.requested: list[str] = []
        """Every request id handed out (:meth:`request_id`), before its request is added."""
        self.groups: list[list[Track]] = []
        self.steps = 0
        self.screen_done = screen is None or screen.keep is None
        self.group_p0: dict[int, float] = {}
        """Prompt index → the detect stage's P0 of its group."""

    def request_id(self, prompt_index: int, sample_index: int, continued: bool = False) -> str:
        """The id rollout ``(prompt_index, sample_index)``'s request (or its continuation) is added under, recorded
        first: a generation cut short (an error, a signal inside ``add_request``) aborts every id recorded."""
        self.requested.append(f"arrol-{prompt_index}-{sample_index}" + ("-continued" if continued else ""))
        return self.requested[-1]

    def add(self, ext_id: str, internal_id: str, prompt_index: int, sample_index: int, prompt_ids: list[int]) -> Track:
        """Register a request; prompts must be added in order (``prompt_index`` 0, 1, ...)."""
        if prompt_index == len(self.groups):
            self.groups.append([])
        elif prompt_index != len(self.groups) - 1:
            raise ValueError(f"prompt {prompt_index} added after prompt {len(self.groups) - 1}: add prompts in order")
        tr = Track(
            ext_id, internal_id, prompt_index, sample_index, prompt_ids, logprobs=[] if self.want_logprobs else None
        )
        if self.screen is not None:
            tr.audited = self.screen.is_audited(prompt_index)
            tr.screened = self.screen.is_shadow(prompt_index)
        self.tracks[ext_id] = self.requests[ext_id] = tr
        self.groups[prompt_index].append(tr)
        return tr

    def paused(self) -> list[Track]:
        """The rollouts waiting to be continued (detect-first scheduling): paused and not pruned, or audited."""
        return [tr for group in self.groups for tr in group if tr.paused and tr.finish_reason is None]

    def resume(self, tr: Track, request_id: str, internal_id: str) -> None:
        """``tr`` goes on as request ``request_id``, which vLLM calls ``internal_id``."""
        tr.paused, tr.internal_id = False, internal_id
        self.requests[request_id] = tr

    def consume(self, deltas: Iterable[RequestDelta]) -> list[Track]:
        """Accumulate one engine step's deltas; returns the rollouts that resolved in this step."""
        self.steps += 1
        resolved: list[Track] = []
        for out in deltas:
            tr = self.requests.get(out.request_id)
            if tr is None:
                continue
            tr.tokens.extend(out.token_ids)
            tr.text.append(out.text)
            if self.want_logprobs and out.logprobs:
                tr.logprobs.extend(out.logprobs)
            finished = out.finished
            if (
                finished
                and not tr.resolved
                and self.pause_at is not None
                and out.finish_reason == "length"
                and len(tr.tokens) == self.pause_at
            ):
                tr.paused, finished = True, False  # stopped at L_detect by its cap, not by the rollout's end
            elif finished:
                tr.finish_reason = out.finish_reason
            if not tr.resolved and (finished or len(tr.tokens) >= self.target):
                tr.resolved = True
                # running at L_detect: not finished in this step, or (an output read only at the end) longer
                tr.eligible = self.detect_length is not None and (not finished or len(tr.tokens) > self.target)
                resolved.append(tr)
        return resolved

    def decide(self, prompt_indices: Iterable[int]) -> list[str]:
        """Draw keep/prune for every group among ``prompt_indices`` whose members have all resolved (their
        scores set), after the screen when there is one; returns the internal ids of pruned rollouts still
        running, to abort (audited ones run on). Without pruner params nothing is decided."""
        if self.pruner is None:
            return []
        to_abort: list[str] = []
        candidates = sorted(set(prompt_indices))
        if not self.screen_done:
            if any(not tr.resolved for g in self._screened_pool() for tr in self.groups[g]):
                return []
            to_abort.extend(self._screen_groups())
            candidates = self._screened_pool()
        ready = [
            p
            for p in candidates
            if not any(not tr.resolved for tr in self.groups[p])
            and not self.groups[p][0].decided
            and not self.groups[p][0].screened
        ]
        scores = [torch.tensor([tr.score for tr in self.groups[p]], dtype=torch.float32) for p in ready]
        eligible = [torch.tensor([tr.eligible for tr in self.groups[p]], dtype=torch.bool) for p in ready]
        decisions = decide_groups(self.pruner, scores, eligible, [self.pruner.group_generator(p) for p in ready])
        for p, d in zip(ready, decisions):
            group = self.groups[p]
            by_index = joint_by_sample_index(d.inclusion, [tr.sample_index for tr in group])
            for i, tr in enumerate(group):
                tr.decided = True
                tr.survival, tr.posterior, tr.joint = float(d.survival[i]), float(d.posterior[i]), by_index[i]
                if not bool(d.keep[i]):
                    to_abort.extend(self._prune(tr))
        return to_abort

    def _screened_pool(self) -> list[int]:
        """The groups the detect-stage screen chooses among (every group but the shadow ones)."""
        return [p for p in range(len(self.groups)) if not self.screen.is_shadow(p)]

    def _screen_groups(self) -> list[str]:
        """The detect stage: rank the pool's groups by P0 from their members' calibrated posteriors and drop all
        but ``screen.keep``; returns the ids to abort."""
        self.screen_done = True
        pool = self._screened_pool()
        q = torch.cat(
            [
                self.pruner.posterior(torch.tensor([tr.score for tr in self.groups[p]], dtype=torch.float32))
                for p in pool
            ]
        )
        ids = torch.tensor([p for p in pool for _ in self.groups[p]])
        p0 = zero_advantage_probability(q, ids)
        keep = select_groups(
            p0 if self.screen.active else None, min(self.screen.keep, len(pool)), self.screen.generator(), len(pool)
        )
        to_abort: list[str] = []
        for k, p in enumerate(pool):
            self.group_p0[p] = float(p0[k])
            if bool(keep[k]):
                continue
            for tr in self.groups[p]:
                tr.screened = True
                to_abort.extend(self._prune(tr))
        return to_abort

    def _prune(self, tr: Track) -> list[str]:
        """Mark ``tr`` pruned; its id if it is still running and must be aborted (not when audited, nor when it is
        paused: its request has ended)."""
        tr.pruned = True
        if tr.audited or tr.finish_reason is not None:
            return []
        tr.finish_reason = "pruned"
        return [] if tr.paused else [tr.internal_id]

    @property
    def finished(self) -> int:
        """Rollouts that finished or were pruned."""
        return sum(t.finish_reason is not None for t in self.tracks.values())

    def running(self) -> list[str]:
        """Internal ids of the requests still running."""
        return [t.internal_id for t in self.tracks.values() if t.finish_reason is None and not t.paused]

    def rollouts(self, decode: Callable[[list[int]], str]) -> list[Rollout]:
        """The records, ordered by (prompt index, sample index). A pruned rollout is cut to ``detect_length``
        tokens and its text re-decoded with ``decode``: the incremental detokenizer holds back a trailing
        partial character, and an aborted request never flushes it."""
        return [self._rollout(tr, decode) for group in self.groups for tr in group]

    def _rollout(self, tr: Track, decode: Callable[[list[int]], str]) -> Rollout:
        generated = len(tr.tokens)
        tokens, text, logprobs = tr.tokens, "".join(tr.text), tr.logprobs
        full_text = text if tr.audited else None
        finish_reason = "pruned" if tr.pruned or tr.screened else tr.finish_reason
        if tr.pruned and self.detect_length is not None:
            tokens = tokens[: self.detect_length]
            text = decode(tokens)
            logprobs = None if logprobs is None else logprobs[: self.detect_length]
        if tr.finish_reason not in FINISH_REASONS:
            raise RuntimeError(f"rollout {tr.ext_id} ended with unexpected finish reason {tr.finish_reason!r}")
        try:
            sampled = None if logprobs is None else sampled_token_log_probs(logprobs, tokens)
        except RuntimeError as exc:
            raise RuntimeError(f"rollout {tr.ext_id}: {exc}") from None
        return Rollout(
            prompt_index=tr.prompt_index,
            sample_index=tr.sample_index,
            prompt_token_ids=list(tr.prompt_ids),
            response_token_ids=list(tokens),
            text=text,
            finish_reason=finish_reason,
            pruned=tr.pruned or tr.screened,
            feature=tr.feature,
            score=tr.score,
            eligible=tr.eligible,
            survival=tr.survival,
            posterior=tr.posterior,
            joint=tr.joint,
            generated_tokens=generated,
            logprobs=logprobs,
            sampled_logprobs=sampled,
            screened=tr.screened,
            audited=tr.audited,
            full_text=full_text,
            group_p0=self.group_p0.get(tr.prompt_index),
            head_score=tr.head_score,
        )
