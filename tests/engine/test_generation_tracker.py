"""The engine's per-generation bookkeeping without vLLM: deltas in, resolution at the target, group
decisions (paper Algorithm 1 l. 20–26), aborts and the final records."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from arrol_pl.core.decisions import decide_group
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.screening import GroupScreen
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


@pytest.mark.subprocess
def test_the_engine_boundary_imports_without_vllm():
    code = (
        "import sys; import arrol_pl.engine.protocol, arrol_pl.engine.tracking, arrol_pl.train.step.module; "
        "assert 'vllm' not in sys.modules, sorted(m for m in sys.modules if m.startswith('vllm'))[:3]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the group screen (detect stage)
def screened_tracker(screen: GroupScreen, groups: int = 4, size: int = 3) -> GenerationTracker:
    params = PrunerParams(policy="none", keep_ratio=1.0, bin_posteriors=tuple((b + 0.5) / 64 for b in range(64)))
    tr = GenerationTracker(2, 2, params, want_logprobs=False, screen=screen)
    for b in range(groups):
        for g in range(size):
            tr.add(f"r-{b}-{g}", f"r-{b}-{g}-internal", b, g, [1, 2, 3])
    return tr


def reach_detect(tr: GenerationTracker, group_scores: dict[int, float]) -> list[str]:
    """Every rollout of the listed groups takes two tokens (L_detect = 2) and is scored; returns the aborts."""
    ids = [t.ext_id for p in group_scores for t in tr.groups[p]]
    resolved = tr.consume([delta(i, 5) for i in ids]) + tr.consume([delta(i, 6) for i in ids])
    for t in resolved:
        t.feature, t.score = torch.zeros(2), group_scores[t.prompt_index]
    return tr.decide(t.prompt_index for t in resolved)


def test_the_detect_screen_waits_for_every_group_then_keeps_the_lowest_p0():
    # Scores are logits; through the identity table q ≈ sigmoid: 0 → q 0.5 (lowest P0), ±4 → nearly sure.
    tr = screened_tracker(GroupScreen(keep=2, seed=1))
    assert reach_detect(tr, {0: 4.0, 1: 0.0}) == [], "two groups still below L_detect: no decision yet"
    aborted = reach_detect(tr, {2: -4.0, 3: 0.2})
    kept = [p for p in range(4) if not tr.groups[p][0].screened]
    assert kept == [1, 3]
    assert sorted(aborted) == sorted(t.internal_id for p in (0, 2) for t in tr.groups[p])
    tr.consume([delta(t.ext_id, 8, True, "stop") for p in kept for t in tr.groups[p]])
    records = tr.rollouts(lambda toks: "".join(map(str, toks)))
    for r in records:
        assert r.screened == (r.prompt_index in (0, 2)) and r.pruned == r.screened
        assert r.group_p0 is not None and (r.finish_reason == "pruned") == r.screened
    p0 = {r.prompt_index: r.group_p0 for r in records}
    assert p0[1] < p0[3] < p0[0] and p0[1] < p0[2]


def test_an_inactive_screen_keeps_a_random_subset_of_the_same_size():
    kept_sets = set()
    for seed in range(12):
        tr = screened_tracker(GroupScreen(keep=2, active=False, seed=seed))
        reach_detect(tr, {0: 4.0, 1: 0.0, 2: -4.0, 3: 0.2})
        kept = tuple(p for p in range(4) if not tr.groups[p][0].screened)
        assert len(kept) == 2
        kept_sets.add(kept)
    assert len(kept_sets) > 2, "the cold-start subset does not follow the scores"


def test_audited_groups_run_to_completion_and_shadow_groups_are_never_decided():
    tr = screened_tracker(GroupScreen(keep=1, seed=0, audited=frozenset({0}), shadow=frozenset({3})))
    aborted = reach_detect(tr, {0: 4.0, 1: 0.0, 2: -4.0})
    # Group 1 is kept; 0 (audited) and 2 are dropped, but only 2 is aborted. Shadow group 3 is not waited for.
    assert sorted(aborted) == sorted(t.internal_id for t in tr.groups[2])
    assert all(t.pruned and t.finish_reason is None for t in tr.groups[0]), "audited: still running"
    ids = [t.ext_id for p in (0, 3) for t in tr.groups[p]]
    tr.consume([delta(i, 7) for i in ids])
    tr.consume(
        [delta(i, 8, True, "stop") for i in ids[:3] + [t.ext_id for t in tr.groups[1]]] + [delta(i, 8) for i in ids[3:]]
    )
    tr.consume([delta(i, 9, True, "length") for i in ids[3:]])
    records = {(r.prompt_index, r.sample_index): r for r in tr.rollouts(lambda toks: "".join(map(str, toks)))}
    dropped = records[(0, 0)]
    assert dropped.screened and dropped.pruned and dropped.audited and dropped.finish_reason == "pruned"
    assert dropped.response_token_ids == [5, 6] and dropped.full_text == "<5><6><7><8>"
    shadow = records[(3, 1)]
    assert shadow.screened and shadow.audited and shadow.group_p0 is None
    assert shadow.full_text == "<7><8><9>" and shadow.response_token_ids == [7, 8, 9], "complete, never cut"
    assert records[(1, 0)].full_text is None and not records[(1, 0)].screened


def test_a_detect_screen_needs_pruner_params():
    with pytest.raises(ValueError, match="needs pruner params"):
        GenerationTracker(2, 2, None, want_logprobs=False, screen=GroupScreen(keep=1))
