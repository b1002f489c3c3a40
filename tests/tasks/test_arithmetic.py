"""The built-in arithmetic task: deterministic, disjoint splits, and solutions the real reward accepts."""

import re
from dataclasses import replace

import pytest

from arrol_pl.tasks.arithmetic import (
    ArithmeticConfig,
    arithmetic_splits,
    is_heldout,
    sft_examples,
    sft_texts,
    solution_steps,
    tokenizer_corpus,
    worked_solution,
)
from arrol_pl.tasks.registry import load_problems

SMALL = ArithmeticConfig(n_train=400, n_heldout=100)


def test_deterministic_in_the_seed():
    assert arithmetic_splits(SMALL) == arithmetic_splits(SMALL)
    other_train, _ = arithmetic_splits(replace(SMALL, seed=1))
    assert [p.prompt for p in other_train] != [p.prompt for p in arithmetic_splits(SMALL)[0]]


def test_splits_are_disjoint_and_unique_even_across_seeds():
    train, heldout = arithmetic_splits(SMALL)
    assert len(train) == 400 and len(heldout) == 100
    train_prompts = {p.prompt for p in train}
    heldout_prompts = {p.prompt for p in heldout}
    assert len(train_prompts) == 400 and len(heldout_prompts) == 100
    assert not train_prompts & heldout_prompts
    # The split is a function of the text: another seed's training set never holds these held-out problems.
    other_train, _ = arithmetic_splits(replace(SMALL, seed=7, n_train=2000))
    assert not {p.prompt for p in other_train} & heldout_prompts
    assert all(is_heldout(p, SMALL.heldout_fraction) for p in heldout_prompts)
    assert len({p.id for p in train + heldout}) == 500


@pytest.mark.slow  # math-verify on every solution of a task: outside the quick tier
@pytest.mark.parametrize(
    "config",
    [
        ArithmeticConfig(n_train=300, n_heldout=50),
        ArithmeticConfig(n_train=300, n_heldout=50, operators="+-*", max_operands=4, seed=3),
        ArithmeticConfig(
            n_train=100, n_heldout=20, min_operands=2, max_operands=2, min_digits=2, max_digits=2, operators="-"
        ),
    ],
)
def test_every_solution_scores_one_through_the_real_reward(reward, config):
    train, heldout = arithmetic_splits(config)
    problems = train + heldout
    completions = [completion for _, completion in sft_examples(problems)]
    result = reward.score(completions, [p.answer for p in problems])
    assert result.status == ["ok"] * len(problems)
    assert result.correct.all()
    # The same values written differently ("420.0") skip the identical-text shortcut: math-verify decides.
    decimals = [re.sub(r"\\boxed\{(-?\d+)\}", r"\\boxed{\1.0}", c) for c in completions[:100]]
    assert all(".0}" in d for d in decimals)
    assert reward.score(decimals, [p.answer for p in problems[:100]]).correct.all()
    # And a wrong final number scores 0: the reward is not trivially satisfied.
    wrong = [re.sub(r"\\boxed\{(-?\d+)\}", lambda m: f"\\boxed{{{int(m.group(1)) + 1}}}", c) for c in completions]
    assert not reward.score(wrong, [p.answer for p in problems]).correct.any()


def test_solution_steps_follow_precedence_and_match_python():
    steps, value = solution_steps("3 + 4 * 5 - 6")
    assert steps == ["4 * 5 = 20", "3 + 20 = 23", "23 - 6 = 17"]
    assert value == 17
    train, heldout = arithmetic_splits(ArithmeticConfig(n_train=200, n_heldout=50, operators="+-*", max_operands=4))
    for p in train + heldout:
        expression = p.prompt.removeprefix("Compute ").removesuffix(".")
        assert int(p.answer) == eval(expression)  # noqa: S307 — digits and + - * only


def test_worked_solution_format():
    assert worked_solution("Compute 47 + 385 - 12.") == "47 + 385 = 432\n432 - 12 = 420\n\\boxed{420}"
    with pytest.raises(ValueError, match="arithmetic task"):
        worked_solution("What is 2+2?")


def test_difficulty_is_respected():
    config = ArithmeticConfig(n_train=200, n_heldout=20, min_operands=3, max_operands=4, min_digits=2, max_digits=3)
    train, heldout = arithmetic_splits(config)
    for p in train + heldout:
        tokens = p.prompt.removeprefix("Compute ").removesuffix(".").split()
        numbers = tokens[0::2]
        assert 3 <= len(numbers) <= 4
        assert all(2 <= len(n) <= 3 for n in numbers)
        assert set(tokens[1::2]) <= {"+", "-"}


def test_sft_texts_and_tokenizer_corpus():
    train, heldout = arithmetic_splits(SMALL)
    pairs = sft_examples(train[:5])
    assert [p + c for p, c in pairs] == sft_texts(train[:5])
    assert all(c.startswith("\n") and c.rstrip().endswith("}") for _, c in pairs)
    corpus = tokenizer_corpus(SMALL)
    assert len(corpus) == len(train) + 1
    chars = set("".join(corpus))
    assert set("".join(sft_texts(heldout))) <= chars  # held-out texts need no unknown character
    assert set("*") <= chars


def test_too_small_a_problem_space_fails_with_advice():
    with pytest.raises(ValueError, match="max_digits"):
        arithmetic_splits(
            ArithmeticConfig(min_operands=2, max_operands=2, max_digits=1, operators="+", n_train=500, n_heldout=50)
        )


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"min_operands": 3, "max_operands": 2}, "min_operands"),
        ({"min_digits": 0}, "min_digits"),
        ({"operators": "+/"}, "operators"),
        ({"heldout_fraction": 1.0}, "heldout_fraction"),
    ],
)
def test_config_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ArithmeticConfig(**kwargs)


def test_registry_serves_both_splits():
    train = load_problems("arithmetic", split="train", n_train=50, n_heldout=10)
    heldout = load_problems("arithmetic", split="heldout", n_train=50, n_heldout=10)
    assert len(train) == 50 and len(heldout) == 10
    assert train.problems == arithmetic_splits(ArithmeticConfig(n_train=50, n_heldout=10))[0]
    with pytest.raises(ValueError, match="data.path"):
        load_problems("arithmetic", path="x.jsonl")


def test_check_prefix_compares_each_complete_line_with_the_worked_solution():
    from arrol_pl.tasks.arithmetic import CHECK_SCORES, check_prefix
    from arrol_pl.tasks.registry import prefix_checker

    wrong, unknown, right = CHECK_SCORES
    p = "Compute 4 + 5 - 3."
    assert check_prefix(p, "\n4 + 5 = 9\n9 - 3 = 6\n\\boxed{6}") == right
    assert check_prefix(p, "\n4 + 5 = 9\n9 - 3 = 7") == right, "the last line is not complete yet"
    assert check_prefix(p, "\n4 + 5 = 9\n9 - 3 = 7\n") == wrong
    assert check_prefix(p, "\n4+5 =  9\n") == right, "spaces are ignored"
    assert check_prefix(p, "\n4 + 5 = 8\n8 - 3") == wrong
    assert check_prefix(p, "\n4 + 5") == unknown == check_prefix(p, "")
    assert check_prefix(p, "\n4 + 5 = 9\n9 - 3 = 6\n\\boxed{6}\nmore\n") == wrong, "a line past the solution"
    assert prefix_checker("arithmetic") is check_prefix and prefix_checker("gsm8k") is None
