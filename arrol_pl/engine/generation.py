"""One generation's requests and engine steps: what it adds to vLLM, in which schedule, and the loop that drives it.

The steps of :meth:`ArrolEngine.generate <arrol_pl.engine.engine.ArrolEngine.generate>` that need none of the
engine's state: the prompts' token ids, the arguments checked, the log-probs the requests sample, whether a decision
may drop a rollout, the requests added (a rollout's first, and detect-first's second), and the step loop that scores
what resolved and aborts what was pruned. Every call to vLLM goes through :mod:`.adapter`.

- **Detect first** (``engine.detect_first``; Algorithm 1 l. 17 leaves the micro-batches to the backend). While
  pruning is active and the rollouts outnumber the slots (B×G > ``max_num_seqs``), every rollout's first request
  stops at ``L_detect``; once all are decided, the survivors go on as second requests prompted with the prompt and
  their first ``L_detect`` tokens (with prefix caching, only the last partial block is computed again). With one
  request per rollout, survivors keep their slots while later groups wait for theirs, so the last groups reach
  ``L_detect`` late and their survivors set the generation's length. Features, scores and decisions are the same
  rule either way; only which requests share an engine step changes. Sampling that depends on the text so far
  (:func:`.adapter.continuable`) keeps one request per rollout.
- **Which schedule, by default** (``engine.detect_first`` null): the one the engine's step cost, measured once,
  models faster for the generation's shape (:mod:`.scheduling`).
- **Outputs.** Where a decision may abort a request mid-flight (pruning or a detect screen, one request per
  rollout), outputs stream as deltas and the engine keeps each rollout's tokens, since an aborted request gets no
  final output from vLLM. Elsewhere (nothing pruned, or detect-first, whose first requests end at ``L_detect``)
  each output is read once, at its end, as ``vllm.LLM.generate`` does (one output per request, not per request
  and step), and the tap, not the outputs, counts the requests each step advanced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arrol_pl.core.confidence import STATISTICS_TOPK
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.scorers import PrefixScorer
from arrol_pl.core.screening import GroupScreen
from arrol_pl.engine import adapter
from arrol_pl.engine.tracking import GenerationTracker, Track

Clock = tuple[list[float], list[int], list[int]]
"""Per engine step: its seconds (with the tracking, scoring and aborts that follow it), the requests it advanced and
the tokens it computed."""


def prompt_token_ids(tokenizer: Any, prompts: Sequence[str | Sequence[int]], max_model_len: int) -> list[list[int]]:
    """Each prompt's token ids (a string tokenised without special tokens), refused when empty or when it leaves no
    room to generate within ``max_model_len``."""
    if len(prompts) == 0:
        raise ValueError("prompts is empty: pass at least one prompt (string or token-id list)")
    out = []
    for i, p in enumerate(prompts):
        ids = tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else [int(t) for t in p]
        if not ids:
            raise ValueError(f"prompt {i} is empty")
        if len(ids) >= max_model_len:
            raise ValueError(
                f"prompt {i} has {len(ids)} tokens, longer than the model context "
                f"(max_model_len={max_model_len} leaves no room to generate)"
            )
        out.append(ids)
    return out


def checked_sampling(
    sampling: Mapping[str, Any],
    group_size: int,
    detect_length: int | None,
    features: bool,
    pruner: PrunerParams | None,
    screen: GroupScreen | None,
    logprobs_topk: int | None,
) -> Any:
    """vLLM's sampling params of a generation (:func:`.adapter.sampling_params`), with ``generate``'s other arguments
    checked against them and against each other."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    base = adapter.sampling_params(sampling)
    if detect_length is not None and not 1 <= detect_length < base.max_tokens:
        raise ValueError(
            f"detect_length (L_detect) must satisfy 1 <= L_detect < max_tokens={base.max_tokens}, got {detect_length}"
        )
    if not features and (detect_length is not None or pruner is not None or screen is not None):
        raise ValueError("features=False (no hidden-state tap) cannot score or prune: drop detect_length/pruner/screen")
    if screen is not None and screen.keep is not None and detect_length is None:
        raise ValueError("a detect-stage screen (screen.keep) needs detect_length: groups are ranked at L_detect")
    if logprobs_topk is not None and logprobs_topk < 0:
        raise ValueError(f"logprobs_topk must be >= 0, got {logprobs_topk}")
    return base


def sample_topk(
    logprobs_topk: int | None,
    head_input: str,
    features: bool,
    scorer: PrefixScorer | None,
    detect_length: int | None,
) -> int | None:
    """How many top log-probs the requests sample: ``logprobs_topk``, at least the top 20 for a head reading the
    prefix statistics, and at least what ``scorer`` reads (a scorer needs ``detect_length`` and the features)."""
    topk = logprobs_topk
    if features and "stats" in head_input.split("+"):
        topk = max(logprobs_topk or 0, STATISTICS_TOPK)
    if scorer is not None:
        if not features or detect_length is None:
            raise ValueError("a prefix scorer scores at detect_length: pass detect_length, with features=True")
        if scorer.topk is not None:
            topk = max(topk or 0, scorer.topk)
    return topk


def prunes(pruner: PrunerParams | None, screen: GroupScreen | None) -> bool:
    """Whether a decision may drop rollouts: an active pruner that prunes within groups, or a detect-stage screen."""
    return (
        pruner is not None
        and pruner.active
        and ((pruner.policy != "none" and pruner.keep_ratio < 1.0) or (screen is not None and screen.keep is not None))
    )


def add_rollouts(
    llm: Any,
    tracker: GenerationTracker,
    base: Any,
    prompt_ids: Sequence[Sequence[int]],
    group_size: int,
    topk: int | None,
    *,
    max_tokens: int | None,
    final_only: bool,
    tap: Any,
    target: int,
) -> None:
    """Add every rollout's (first) request to ``llm`` and ``tracker``; each is registered with ``tap`` at ``target``
    (None: nothing is read from the hidden states)."""
    for b, ids in enumerate(prompt_ids):
        engine_input = adapter.render_token_prompt(llm, ids)
        for g in range(group_size):
            params = adapter.rollout_params(
                base,
                b * group_size + g,
                topk,
                max_tokens=max_tokens,
                final_only=final_only,
            )
            ext_id = tracker.request_id(b, g)
            internal = adapter.add_request(llm, ext_id, engine_input, params)
            tracker.add(ext_id, internal, b, g, ids)
            if tap is not None:
                tap.register(internal, target)


def continue_paused(
    llm: Any,
    tracker: GenerationTracker,
    base: Any,
    group_size: int,
    topk: int | None,
    final_only: bool,
    decode: Callable[[Sequence[int]], str],
) -> None:
    """Detect first's second requests: the survivors (and audited rollouts) go on from their first part's tokens,
    each prompted with its prompt and those tokens, with what is left of ``base.max_tokens``."""
    for tr in tracker.paused():
        params = adapter.rollout_params(
            base,
            tr.prompt_index * group_size + tr.sample_index,
            topk,
            max_tokens=base.max_tokens - len(tr.tokens),
            part=1,
            final_only=final_only,
        )
        request_id = tracker.request_id(tr.prompt_index, tr.sample_index, continued=True)
        tokens = tr.prompt_ids + tr.tokens
        internal = adapter.add_request(llm, request_id, adapter.render_token_prompt(llm, tokens), params)
        tr.text = [decode(tr.tokens)]  # the first part's whole text (its last delta may hold back)
        tracker.resume(tr, request_id, internal)


def run_steps(
    llm: Any,
    tap: Any,
    tracker: GenerationTracker,
    eager: bool,
    score: Callable[[list[Track]], None] | None,
    bar: Any,
    clock: Clock,
) -> None:
    """Step the engine until no request is left: score what resolved each step (``score``; None: nothing is read
    from the hidden states), abort what was pruned. Each step's seconds (with the tracking, scoring and aborts that
    follow it), the requests it advanced and the tokens it computed go to ``clock``."""
    while adapter.has_unfinished_requests(llm):
        started = time.perf_counter()
        tap.scheduled = 0
        deltas = adapter.step(llm, eager=eager)
        resolved = tracker.consume(deltas)
        if resolved and score is not None:
            score(resolved)
            adapter.abort_internal(llm, tracker.decide(tr.prompt_index for tr in resolved))
        bar.update(tracker.finished - bar.n)
        clock[0].append(time.perf_counter() - started)  # the step and its bookkeeping
        clock[1].append(tap.scheduled)
        clock[2].append(tap.tokens)
