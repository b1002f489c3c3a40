"""The built-in verifiable task of the CPU default experiment: multi-digit arithmetic from a seed.

A problem reads ``Compute 47 + 385 - 12.``; its worked solution writes one partial result per line
and ends in the boxed answer::

    47 + 385 = 432
    432 - 12 = 420
    \\boxed{420}

Decisions:
- Short prompts and solutions: a 2-layer policy with a locally trained tokenizer has to learn it.
- Multiplication binds tighter than + and −, as in the maths it is scored by: the solution reduces
  products first (left to right), then sums and differences left to right.
- The split is a function of the problem text (a hash bucket), so train and held-out can never share
  a problem, whatever the seed or sizes; the seed only decides which problems are drawn.
- Gold answers are integers and are scored by the same math-verify reward as the public datasets.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Sequence

from arrol_pl.tasks.problem import Problem, ProblemSet

_PROMPT_RE = re.compile(r"^Compute (.+)\.$")


@dataclass(frozen=True)
class ArithmeticConfig:
    """Difficulty and size of the generated task."""

    min_operands: int = 2
    """Fewest numbers in an expression."""
    max_operands: int = 4
    """Most numbers in an expression (2 to 4 by default: one to three steps, so some problems are easy for the
    tiny policy and some hard, and which is which shows in the prompt)."""
    min_digits: int = 1
    """Fewest digits of a number."""
    max_digits: int = 1
    """Most digits of a number."""
    operators: str = "+-"
    """Operators to draw from, any of ``+``, ``-``, ``*``."""
    n_train: int = 2048
    """Training problems."""
    n_heldout: int = 256
    """Held-out problems (accuracy before/after training)."""
    heldout_fraction: float = 0.1
    """Share of the problem space whose hash bucket is held out."""
    seed: int = 0
    """Seed of the draw (not of the split, which depends on the text only)."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_operands <= self.max_operands:
            raise ValueError(f"need 1 <= min_operands <= max_operands, got {self.min_operands}, {self.max_operands}")
        if self.max_operands < 2 and self.operators:
            raise ValueError(f"max_operands must be >= 2 to use an operator, got {self.max_operands}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}")
        if not self.operators or set(self.operators) - set("+-*"):
            raise ValueError(f"operators must be a non-empty subset of '+-*', got {self.operators!r}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.n_train < 0 or self.n_heldout < 0:
            raise ValueError(f"n_train and n_heldout must be >= 0, got {self.n_train}, {self.n_heldout}")


def is_heldout(prompt: str, heldout_fraction: float) -> bool:
    """Whether ``prompt`` belongs to the held-out split (a stable hash bucket of its text)."""
    bucket = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") / 2**64
    return bucket < heldout_fraction


def _draw_expression(rng: random.Random, c: ArithmeticConfig) -> str:
    n = rng.randint(c.min_operands, c.max_operands)
    numbers = []
    for _ in range(n):
        digits = rng.randint(c.min_digits, c.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        numbers.append(str(rng.randint(low, 10**digits - 1)))
    parts = [numbers[0]]
    for number in numbers[1:]:
        parts += [rng.choice(c.operators), number]
    return " ".join(parts)


def solution_steps(expression: str) -> tuple[list[str], int]:
    """The worked steps (``"a op b = c"``) and the value of ``expression`` (``"47 + 385 - 12"``)."""
    tokens = expression.split()
    values = [int(t) for t in tokens[0::2]]
    ops = tokens[1::2]
    if len(values) != len(ops) + 1 or set(ops) - set("+-*"):
        raise ValueError(f"not an arithmetic expression of this task: {expression!r}")
    steps = []
    while "*" in ops:
        i = ops.index("*")
        result = values[i] * values[i + 1]
        steps.append(f"{values[i]} * {values[i + 1]} = {result}")
        values[i : i + 2] = [result]
        del ops[i]
    value = values[0]
    for op, operand in zip(ops, values[1:]):
        result = value + operand if op == "+" else value - operand
        steps.append(f"{value} {op} {operand} = {result}")
        value = result
    return steps, value


def _expression_of(problem: Problem | str) -> str:
    prompt = problem.prompt if isinstance(problem, Problem) else problem
    match = _PROMPT_RE.match(prompt.strip())
    if match is None:
        raise ValueError(f"not a prompt of the arithmetic task: {prompt!r}")
    return match.group(1)


def worked_solution(problem: Problem | str) -> str:
    """The solution text of an arithmetic problem (or prompt): the steps, then ``\\boxed{answer}``."""
    steps, value = solution_steps(_expression_of(problem))
    return "\n".join(steps + [f"\\boxed{{{value}}}"])


CHECK_SCORES = (-2.0, 0.0, 2.0)
""":func:`check_prefix`'s scores: a wrong completed line, no completed line yet, every completed line right."""


def check_prefix(problem: Problem | str, text: str) -> float:
    """A process verifier for the ``checker`` scorer: whether the lines of a response prefix ``text`` that are
    complete (followed by a newline) are right, each compared with the worked solution's line at its place (the
    steps, then ``\\boxed{answer}``; spaces ignored). :data:`CHECK_SCORES`: -2 when one is wrong, 0 when no
    line is complete, 2 when every complete line is right."""
    gold = ["".join(line.split()) for line in worked_solution(problem).split("\n")]
    lines = ["".join(line.split()) for line in text.split("\n")[:-1]]
    lines = [line for line in lines if line]
    if not lines:
        return CHECK_SCORES[1]
    right = len(lines) <= len(gold) and all(line == g for line, g in zip(lines, gold))
    return CHECK_SCORES[2] if right else CHECK_SCORES[0]


def make_problem(expression: str, problem_id: str) -> Problem:
    _, value = solution_steps(expression)
    return Problem(id=problem_id, prompt=f"Compute {expression}.", answer=str(value))


def arithmetic_splits(config: ArithmeticConfig | None = None) -> tuple[list[Problem], list[Problem]]:
    """``(train, heldout)`` problems, deterministic in ``config`` and disjoint by construction."""
    c = config or ArithmeticConfig()
    rng = random.Random(c.seed)
    train: dict[str, Problem] = {}
    heldout: dict[str, Problem] = {}
    attempts = 0
    budget = 100 * (c.n_train + c.n_heldout) + 1000
    while len(train) < c.n_train or len(heldout) < c.n_heldout:
        attempts += 1
        if attempts > budget:
            raise ValueError(
                f"could only draw {len(train)} train / {len(heldout)} held-out distinct problems for "
                f"n_train={c.n_train}, n_heldout={c.n_heldout}: raise max_digits or max_operands"
            )
        expression = _draw_expression(rng, c)
        prompt = f"Compute {expression}."
        if is_heldout(prompt, c.heldout_fraction):
            if len(heldout) < c.n_heldout and prompt not in heldout:
                heldout[prompt] = make_problem(expression, f"arith-heldout-{len(heldout):05d}")
        elif len(train) < c.n_train and prompt not in train:
            train[prompt] = make_problem(expression, f"arith-train-{len(train):05d}")
    return list(train.values()), list(heldout.values())


def sft_examples(problems: Sequence[Problem]) -> list[tuple[str, str]]:
    """``(prompt, completion)`` pairs for the supervised warm-start; ``prompt + completion`` is the
    full text and the completion (``"\\n"`` + worked solution) is what the policy generates at RL time."""
    return [(p.prompt, "\n" + worked_solution(p)) for p in problems]


def sft_texts(problems: Sequence[Problem]) -> list[str]:
    """Prompt + worked solution, one string per problem."""
    return [prompt + completion for prompt, completion in sft_examples(problems)]


def tokenizer_corpus(config: ArithmeticConfig | None = None) -> list[str]:
    """Texts to train the tiny tokenizer on: the training split's SFT texts plus a line holding every
    character the task can produce (so held-out numbers never need an unknown token)."""
    train, _ = arithmetic_splits(config)
    return sft_texts(train) + ["Compute 0123456789 + - * = . \\boxed{}"]


GENERATED = True
SOLUTIONS = True
OPTIONS = ArithmeticConfig


def load(split: str | None = None, path: None = None, **config) -> ProblemSet:
    """The ``train`` or ``heldout`` (alias ``test``) split as a ProblemSet; ``config`` → ArithmeticConfig."""
    if path is not None:
        raise ValueError("the arithmetic task is generated from a seed; it takes no data.path")
    c = ArithmeticConfig(**config)
    train, heldout = arithmetic_splits(c)
    which = split or "train"
    if which not in ("train", "heldout", "test"):
        raise ValueError(f"arithmetic split must be 'train' or 'heldout', got {which!r}")
    problems = train if which == "train" else heldout
    return ProblemSet(name="arithmetic", source=f"generated(seed={c.seed}, split={which})", problems=problems)
