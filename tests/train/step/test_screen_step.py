"""One step's group screen without an engine: which prompts generate, what the engine is told, the audit's
counts and the heads' extra rows (:class:`arrol_pl.core.screening.ScreenStep`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.pruning import PruningConfig
from arrol_pl.core.screen_audit import audit_totals
from arrol_pl.core.screening import ScreenConfig, ScreenStep
from arrol_pl.train.step.screening import PromptScorer


@dataclass
class FakeRollout:  # the Rollout fields the screen reads
    audited: bool
    screened: bool
    full_text: str | None
    feature: torch.Tensor
    score: float
    group_p0: float | None = None
    generated_tokens: int = 4
    prompt_index: int = 0


def scorer_that_prefers(features_to_q: dict[int, float], hidden: int = 4) -> PromptScorer:
    """A prompt scorer whose calibrated q for prompt feature ``e_i`` (one-hot) is ``features_to_q[i]``."""
    scorer = PromptScorer(hidden, HeadConfig(hidden_dim=8), PruningConfig(num_bins=8), seed=0)
    scorer.scores = lambda f: f.argmax(dim=1).float()  # the "score" is the prompt's id
    scorer.posteriors = lambda s: torch.tensor([features_to_q[int(i)] for i in s])
    return scorer


def test_the_prompt_stage_passes_the_prompts_nearest_an_even_split_and_shadows_audited_drops():
    step = ScreenStep(
        ScreenConfig(stages="prompt", prompt_oversample=1.0, audit=1.0),
        prompts_per_step=2,
        group_size=4,
        active=True,
        seed=3,
    )
    q = {0: 0.02, 1: 0.5, 2: 0.97, 3: 0.4}
    step.plan_prompts(4, scorer_that_prefers(q), torch.eye(4))
    assert step.order[:2] == [1, 3] and sorted(step.order[2:]) == [0, 2], "kept first, then the audited drops"
    screen = step.engine_screen()
    assert screen.keep is None and screen.shadow == frozenset({2, 3}) and screen.audited == frozenset({0, 1})
    assert step.metrics["screen/prompt_p0_kept"] < step.metrics["screen/prompt_p0_dropped"]


def test_an_inactive_prompt_stage_passes_a_random_subset():
    passed = set()
    for seed in range(10):
        step = ScreenStep(ScreenConfig(stages="prompt", audit=0.0), 2, 4, active=False, seed=seed)
        step.plan_prompts(4, scorer_that_prefers({0: 0.02, 1: 0.5, 2: 0.97, 3: 0.4}), torch.eye(4))
        assert len(step.order) == 2
        passed.add(tuple(sorted(step.order)))
    assert len(passed) > 2


def test_without_a_prompt_stage_every_drawn_prompt_generates():
    step = ScreenStep(ScreenConfig(stages="detect", oversample=1.0, audit=0.0), 2, 4, active=True, seed=0)
    step.plan_prompts(4)
    assert step.order == [0, 1, 2, 3] and step.engine_screen().keep == 2


def rollouts_of(groups: list[tuple[bool, bool]], size: int) -> list[FakeRollout]:
    """``groups``: (audited, screened) per generation-order group."""
    return [
        FakeRollout(a, s, f"g{k}" if a else None, torch.full((2,), float(k)), float(k), prompt_index=k)
        for k, (a, s) in enumerate(groups)
        for _ in range(size)
    ]


def test_the_audit_counts_each_stage_and_the_heads_get_the_dropped_groups_rows():
    size = 2
    step = ScreenStep(
        ScreenConfig(stages="prompt+detect", oversample=1.0, prompt_oversample=0.5, audit=0.5),
        prompts_per_step=2,
        group_size=size,
        active=True,
        seed=0,
    )
    # 6 drawn, 4 passed (generation order 0-3), 2 kept by the detect stage; one shadow group (order 4).
    step.drawn, step.passed, step.order = 6, 4, [0, 1, 2, 3, 4]
    step.prompt_audited = torch.tensor([True, False, True, False, True, False])
    step.detect_audited = torch.tensor([False, True, True, False])
    step.features = torch.eye(6)
    rollouts = rollouts_of([(True, False), (True, True), (True, True), (False, False), (True, True)], size)
    correct = {"g0": [1.0, 0.0], "g1": [0.0, 0.0], "g2": [1.0, 1.0], "g4": [0.0, 0.0]}
    metrics = step.audit(rollouts, lambda texts, ks: [correct[t][i % size] for i, t in enumerate(texts)])
    # prompt stage: audited prompts 0, 2 (passed) and 4 (shadow, dropped): zero advantage for 2 and 4
    assert [metrics[f"screen/prompt_audit_{k}"] for k in ("audited", "audited_zero", "screened", "screened_zero")] == [
        3,
        2,
        1,
        1,
    ]
    assert metrics["screen/prompt_audit_dropped_share_sum"] == pytest.approx(3 * (1 - 4 / 6))
    # detect stage: audited groups 1 and 2, both dropped, both zero advantage
    assert [metrics[f"screen/detect_audit_{k}"] for k in ("audited", "audited_zero", "screened", "screened_zero")] == [
        2,
        2,
        2,
        2,
    ]
    assert audit_totals([metrics, metrics], "detect").audited == 4

    rows = (
        torch.zeros(3, 2),
        torch.zeros(3),
        torch.ones(3),
        torch.ones(3),
        torch.tensor([0, 0, 3]),
        torch.full((3,), 0.5),
        torch.full((3, 1 + 2), 0.25),
    )
    feats, scores, labels, weights, group_ids, survival, joint = step.with_dropped_audit(rows, rollouts)
    assert feats.shape == (3 + 4, 2) and scores[3:].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert labels[3:].tolist() == [0.0, 0.0, 1.0, 1.0] and weights[3:].tolist() == [2.0] * 4  # 1 / audit share
    assert group_ids.tolist() == [0, 0, 3, 1, 1, 2, 2], "each dropped row keeps its prompt: its group"
    assert survival.tolist() == [0.5] * 3 + [1.0] * 4, "an audited group's every rollout ran to its end"
    assert joint.shape == (7, 3) and joint[3:].isnan().all(), "no draw chose among an audited group's rollouts"

    prompt_rows = step.prompt_rows(torch.tensor([0, 0, 3]), torch.tensor([1.0, 0.0, 1.0]), torch.ones(3))
    pf, pl, pw = prompt_rows
    assert pf.shape == (3 + size, 6) and torch.equal(pf[3], torch.eye(6)[4]), "the shadow group's prompt feature"
    assert pl[3:].tolist() == [0.0, 0.0] and pw[3:].tolist() == [2.0, 2.0]


def test_a_cold_start_step_counts_nothing_but_keeps_the_labels():
    size = 2
    step = ScreenStep(ScreenConfig(stages="detect", audit=1.0), 1, size, active=False, seed=0)
    step.plan_prompts(2)
    step.detect_audited = torch.tensor([True, True])
    rollouts = rollouts_of([(True, False), (True, True)], size)
    metrics = step.audit(rollouts, lambda texts, ks: [1.0] * len(texts))
    assert metrics["screen/detect_audit_audited"] == 0 and set(step.audit_correct) == {0, 1}
