"""DAPO's dynamic sampling with refill (verl's filter_groups), without an engine: which groups are kept."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import AlgoConfig
from arrol_pl.train.step.refill import generate_with_refill, informative_groups, refill_indices


@dataclass
class R:  # the fields of a Rollout that refill reads or rewrites
    prompt_index: int
    tag: str


def round_of(name: str, n: int, size: int = 2) -> tuple[list[str], list[R]]:
    return [f"{name}{p}" for p in range(n)], [R(p, f"{name}{p}.{g}") for p in range(n) for g in range(size)]


def test_informative_groups_judge_the_survivors_rewards():
    assert informative_groups([1, 0, 1, 1, 0, 0, 1], [0, 0, 1, 1, 2, 2, 3]) == [0]
    assert informative_groups([], []) == []


def test_refill_indices_are_distinct_and_a_function_of_the_step_and_round():
    a = refill_indices(100, 8, seed=0, step=5, round_=1)
    assert len(set(a)) == 8 and all(0 <= i < 100 for i in a)
    assert a == refill_indices(100, 8, seed=0, step=5, round_=1)
    assert a != refill_indices(100, 8, seed=0, step=5, round_=2) and a != refill_indices(
        100, 8, seed=0, step=6, round_=1
    )


def test_refill_keeps_the_first_b_informative_groups_across_rounds():
    first_problems, first = round_of("a", 4)
    calls = []

    def next_round(r):
        calls.append(r)
        problems, rollouts = round_of("bc"[r - 1], 4)
        return problems, rollouts, {1: [0, 3], 2: [1, 2]}[r], 10 * r

    out = generate_with_refill(first_problems, first, [2], 4, 4, next_round)
    assert calls == [1, 2], "stops once 4 informative groups are in hand"
    assert out.problems == ["a2", "b0", "b3", "c1"]
    assert [x.prompt_index for x in out.rollouts] == [0, 0, 1, 1, 2, 2, 3, 3], "prompt indices renumbered"
    assert [x.tag for x in out.rollouts][::2] == ["a2.0", "b0.0", "b3.0", "c1.0"]
    assert (out.rounds, out.informative, out.generated, out.tokens) == (3, 5, 24, 30)


def test_a_full_first_round_generates_nothing_more():
    problems, rollouts = round_of("a", 3)
    out = generate_with_refill(problems, rollouts, [0, 1, 2], 3, 4, lambda r: pytest.fail("no refill needed"))
    assert out.rounds == 1 and out.problems == problems


def test_a_step_still_short_after_the_last_batch_tops_up_with_the_first_rounds_groups():
    problems, rollouts = round_of("a", 4)
    out = generate_with_refill(problems, rollouts, [3], 4, 2, lambda r: (*round_of("b", 4), [2], 5))
    assert out.rounds == 2 and out.informative == 2
    assert out.problems == ["a0", "a1", "a3", "b2"], "informative ones plus the first round's others, B in all"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dynamic_sampling_refill": True}, "but algo.dynamic_sampling=false: set both true"),
        ({"dynamic_sampling": True, "max_num_gen_batches": 0}, "algo.max_num_gen_batches must be >= 1"),
    ],
)
def test_refill_config_errors_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        AlgoConfig(**kwargs)
