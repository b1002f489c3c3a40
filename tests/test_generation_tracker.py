"""The engine's per-generation bookkeeping without vLLM: deltas in, resolution at the target, group
decisions (paper Algorithm 1 l. 20–26), aborts and the final records."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from arrol_pl.core.pruning import PrunerParams, decide_group
from arrol_pl.engine.tracking import GenerationTracker, RequestDelta


def delta(rid: str, token: int, finished: bool = False, reason: str | None = None) -> RequestDelta:
    return RequestDelta(rid, [token], f"<{token}>", [{token: -0.5}], finished, reason if finished else None)


def tracker_with(groups: int, size: int, pruner: PrunerParams | None, detect: int | None = 2) -> GenerationTracker:
    tr = GenerationTracker(detect, detect if detect is not None else 99, pruner, want_logprobs=True)
    for b in range(groups):
        for g in range(size):
            tr.add(f"r-{b}-{g}", f"r-{b}-{g}-internal", b, g, [1, 2, 3])
    return tr


def score(tracks, value: float = 0.0) -> None:
    for t in tracks:
        t.feature, t.score = torch.zeros(4), value


def test_rollouts_resolve_at_the_target_and_a_finished_one_is_not_eligible():
    tr = tracker_with(1, 3, None)
    assert tr.consume([delta("r-0-0", 7), delta("r-0-1", 8, True, "stop"), delta("r-0-2", 9)]) == [tr.tracks["r-0-1"]]
    resolved = tr.consume([delta("r-0-0", 7), delta("r-0-2", 9), delta("unknown", 1)])
    assert [t.ext_id for t in resolved] == ["r-0-0", "r-0-2"]
    assert [t.eligible for t in tr.groups[0]] == [True, False, True]
    assert tr.consume([delta("r-0-0", 7)]) == [], "a rollout resolves once"
    assert tr.steps == 3 and tr.finished == 1 and tr.running() == ["r-0-0-internal", "r-0-2-internal"]
    assert tr.decide([0]) == [], "no pruner params: nothing decided"


def test_a_group_is_decided_only_when_complete_and_pruned_running_rollouts_are_aborted():
    params = PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=3)
    tr = tracker_with(2, 4, params)
    first = tr.consume([delta(f"r-0-{g}", 5) for g in range(4)] + [delta(f"r-1-{g}", 5) for g in range(3)])
    first += tr.consume([delta(f"r-0-{g}", 6) for g in range(4)] + [delta(f"r-1-{g}", 6) for g in range(3)])
    score(first)
    aborted = tr.decide(t.prompt_index for t in first)
    expected = decide_group(params, torch.zeros(4), torch.ones(4, dtype=torch.bool), params.group_generator(0))
    assert [not t.pruned for t in tr.groups[0]] == expected.keep.tolist()
    assert aborted == [t.internal_id for t in tr.groups[0] if t.pruned]
    assert not any(t.decided for t in tr.groups[1]), "group 1 still waits for its fourth rollout"
    assert all(t.finish_reason == "pruned" for t in tr.groups[0] if t.pruned)


def test_a_member_that_finished_while_its_group_waited_is_reported_cut_to_l_detect():
    params = PrunerParams(policy="random", keep_ratio=0.01, p_min=0.0, min_keep_per_group=0, seed=0)
    tr = tracker_with(1, 2, params)
    done = tr.consume([delta("r-0-0", 4), delta("r-0-1", 4)])
    done += tr.consume([delta("r-0-0", 5)])  # r-0-0 reaches L_detect = 2; r-0-1 is one token behind
    tr.consume([delta("r-0-0", 6, True, "length")])
    done += tr.consume([delta("r-0-1", 5)])
    score(done)
    assert tr.decide([0]) == ["r-0-1-internal"], "the finished member needs no abort"
    rollouts = tr.rollouts(lambda tokens: "decoded" + str(tokens))
    assert [r.response_token_ids for r in rollouts] == [[4, 5], [4, 5]]
    assert [r.generated_tokens for r in rollouts] == [3, 2]
    assert rollouts[0].text == "decoded[4, 5]" and rollouts[0].logprobs == [{4: -0.5}, {5: -0.5}]
    assert all(r.pruned and r.finish_reason == "pruned" and r.survival == pytest.approx(0.01) for r in rollouts)


def test_bad_use_is_refused():
    with pytest.raises(ValueError, match="without detect_length"):
        GenerationTracker(None, 99, PrunerParams(), want_logprobs=False)
    tr = tracker_with(2, 1, None)
    with pytest.raises(ValueError, match="in order"):
        tr.add("late", "late-internal", 0, 1, [1])
    tr.consume([delta("r-0-0", 1, True, "abort")])
    tr.consume([delta("r-1-0", 1, True, "stop")])
    with pytest.raises(RuntimeError, match="unexpected finish reason 'abort'"):
        tr.rollouts(str)


def test_the_engine_boundary_imports_without_vllm():
    code = ("import sys; import arrol_pl.engine.protocol, arrol_pl.engine.tracking, arrol_pl.train.module; "
            "assert 'vllm' not in sys.modules, sorted(m for m in sys.modules if m.startswith('vllm'))[:3]")
    subprocess.run([sys.executable, "-c", code], check=True)
