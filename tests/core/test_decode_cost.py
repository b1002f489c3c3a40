"""The decode-cost model behind the oracle's credit: the simulated schedule, the fitted step cost, and the credit
for pruning at L_detect, with and without detect-first scheduling."""

from __future__ import annotations

import pytest

from arrol_pl.core.decode_cost import StepCost, fit_step_cost, pruning_credit, schedule


def test_schedule_decodes_first_in_first_out_in_the_slots():
    assert schedule([3, 1, 2], slots=8) == [3, 2, 1], "all at once: the longest sets the step count"
    assert schedule([3, 1, 2], slots=1) == [1] * 6, "one slot: one request after another"
    assert schedule([2, 2, 2], slots=2) == [2, 2, 1, 1]
    assert schedule([], slots=4) == [] and schedule([0, 2], slots=4) == [1, 1]
    with pytest.raises(ValueError, match="slots must be >= 1"):
        schedule([1], slots=0)


def test_fit_recovers_the_step_cost_and_ignores_prefill_outliers():
    requests = [1, 2, 4, 8, 16, 32] * 5
    seconds = [0.004 + 0.0005 * n for n in requests]
    cost = fit_step_cost([0.5] + seconds, [32] + requests)  # a prefill-heavy first step
    assert cost.fixed == pytest.approx(0.004) and cost.per_request == pytest.approx(0.0005)
    flat = fit_step_cost([0.01, 0.012, 0.011], [4, 4, 4])
    assert flat.per_request == 0.0 and flat.fixed == pytest.approx(0.011)
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_step_cost([0.1], [0])


def test_credit_is_the_modelled_time_of_the_steps_pruning_removes():
    # 2 rollouts decode together: 10 and 6 tokens; the first is pruned at L_detect = 4.
    steps = schedule([10, 6], slots=4)
    seconds = [0.01 + 0.002 * n for n in steps]
    credit = pruning_credit([10, 6], [True, False], 4, 4, seconds, steps)
    # real: 6 steps of 2 and 4 steps of 1; pruned: 4 steps of 2 and 2 steps of 1
    expected = StepCost(0.01, 0.002).seconds([2] * 6 + [1] * 4) - StepCost(0.01, 0.002).seconds([2] * 4 + [1] * 2)
    assert credit.seconds == pytest.approx(expected) and credit.tokens == 6
    none = pruning_credit([10, 6], [False, False], 4, 4, seconds, steps)
    assert none.seconds == pytest.approx(0.0) and none.tokens == 0


def test_detect_first_credit_counts_the_wait_for_a_slot():
    lengths, pruned = [20, 20, 20, 20], [True, False, True, False]
    steps = schedule(lengths, slots=2)
    seconds = [0.01] * len(steps)  # a flat step cost: the credit counts steps
    one = pruning_credit(lengths, pruned, 5, 2, seconds, steps)
    two = pruning_credit(lengths, pruned, 5, 2, seconds, steps, detect_first=True)
    # one request each: 40 steps real; pruned 5 + 20 (slots 1-2) then 20 (the last survivor) ...
    assert len(steps) == 40
    assert one.seconds == pytest.approx(0.01 * (40 - len(schedule([5, 20, 5, 20], 2))))
    assert two.seconds == pytest.approx(0.01 * (40 - 10 - 15)), "two passes of 5 to L_detect, then 15 for both"
    assert two.seconds > one.seconds


def test_the_credit_never_exceeds_the_time_the_steps_took():
    # a noisy generation whose fit overstates the full schedule: the credit is capped by the measured steps
    steps = [4, 4, 1, 1, 1, 1]
    credit = pruning_credit([6, 2, 2, 2], [True, False, False, False], 1, 8, [0.001] * 5 + [5.0], steps)
    assert 0.0 <= credit.seconds <= sum([0.001] * 5 + [5.0])


def test_modelled_saving_in_steps_needs_rollouts_waiting_for_slots():
    from arrol_pl.core.decode_cost import main, modelled_saving

    at_once = modelled_saving(128, 16, 0.5, rollouts=128, slots=128)
    assert at_once["steps"] == 1.0, "every rollout decodes at once: the longest survivor sets the step count"
    assert at_once["tokens"] == pytest.approx(128 * 128 / (64 * 128 + 64 * 16))
    limited = modelled_saving(128, 16, 0.5, rollouts=128, slots=32, cost=StepCost(0.004, 0.0))
    # 4 waves of 128 steps, against 4 waves of 16 to L_detect and 2 of 112 for the survivors
    assert limited["steps"] == pytest.approx(512 / (64 + 224)) == limited["seconds"]
    with pytest.raises(ValueError, match="detect_length < response"):
        modelled_saving(16, 16, 0.5, 8, 8)
    main(["--response", "64", "--detect-length", "8", "--rollouts", "16", "--slots", "4"])


def test_the_schedule_plan_weighs_steps_saved_against_prompts_computed_again():
    from arrol_pl.core.decode_cost import StepCost, plan_schedule, recomputed_tokens, spread_pruned

    assert spread_pruned(8, 0.5) == [False, True] * 4 and sum(spread_pruned(10, 0.25)) == 7
    assert recomputed_tokens(20, 12, 16) == 16 and recomputed_tokens(20, 12, 128) == 32  # a CPU's blocks: all of it
    assert recomputed_tokens(20, 12, None) == 32 and recomputed_tokens(5, 12, 16) == 1  # a full block, then one
    assert recomputed_tokens(4, 12, 16) == 16  # all cached: vLLM still computes the last token, a whole block
    shape = dict(prompt_lengths=[20] * 16, group_size=8, keep_ratio=0.5, detect_length=12, response=48, slots=32)
    steps = plan_schedule(**shape, block=16, cost=StepCost(1.0, 0.0))
    tokens = plan_schedule(**shape, block=16, cost=StepCost(0.0, 1.0))
    assert steps.detect_first < steps.one_pass and steps.chosen  # fewer steps, nothing else counts
    # the same tokens decoded, plus each survivor's prompt and first tokens past the cached block again
    assert tokens.detect_first - tokens.one_pass == 64 * 16 and not tokens.chosen
    cpu = plan_schedule(**shape, block=128, cost=StepCost(0.0, 1.0))
    assert cpu.detect_first - cpu.one_pass == 64 * 32


def test_the_plan_prices_a_survivor_count_just_over_the_slots():
    """κN = 32 survivors fit 32 slots in one wave of continuations; drawn, the count is over 32 half the time, and
    then detect-first pays a second wave: the plan, a mean over the counts, prices that in."""
    from arrol_pl.core.decode_cost import StepCost, plan_schedule

    plan = plan_schedule([18] * 16, 8, 0.25, 32, 128, 32, 128, StepCost(0.011, 0.00048))
    exact = StepCost(0.011, 0.00048).seconds([32] * 128) + 0.011 * 96 + 0.00048 * (32 * 96 + 32 * 50)
    assert plan.detect_first > exact * 1.05  # the one-wave figure, were exactly κN to survive
    assert not plan.chosen
    # the fixed-size draw keeps κG = 2 of every group: exactly 32, one wave, and detect-first is the faster
    fixed = plan_schedule([18] * 16, 8, 0.25, 32, 128, 32, 128, StepCost(0.011, 0.00048), fixed_size=True)
    assert fixed.detect_first == pytest.approx(exact) and fixed.detect_first < plan.detect_first
