"""Golden answer-equivalence table for R = 1[answer ≡ gold], scored through the real worker pool and
real math-verify 0.9. Each case is its own batch so its status counters are checked exactly.

Where math-verify disagrees with intuition the real behaviour is asserted, with the reason noted.
"""

import pytest

from arrol_pl.tasks.verify import STATUSES

# (completion, gold, expected reward, expected status)
GOLDEN = [
    # integers
    ("so the answer is \\boxed{420}.", "420", 1, "ok"),
    ("\\boxed{421}", "420", 0, "ok"),
    ("\\boxed{-3}", "-3", 1, "ok"),
    ("\\boxed{007}", "7", 1, "ok"),  # AIME-style zero padding parses to the integer
    ("\\boxed{1,000}", "1000", 1, "ok"),  # thousands separator understood
    # math-verify alone reads "1 000" as something else than 1000; texts equal up to spaces (which LaTeX
    # ignores in math mode) are accepted before math-verify is asked.
    ("\\boxed{1000}", "1 000", 1, "ok"),
    ("\\boxed{2^{100}}", "1267650600228229401496703205376", 1, "ok"),
    ("\\boxed{1e3}", "1000", 0, "ok"),  # surprise: programming-style exponents are not LaTeX numbers
    ("\\boxed{1.5 \\times 10^{3}}", "1500", 1, "ok"),
    ("\\boxed{10.0}", "10", 1, "ok"),
    # fractions vs decimals, \dfrac, \tfrac
    ("\\boxed{0.5}", "\\frac{1}{2}", 1, "ok"),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1, "ok"),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1, "ok"),
    ("\\boxed{\\tfrac{3}{4}}", "0.75", 1, "ok"),
    ("\\boxed{\\frac{2}{4}}", "\\frac12", 1, "ok"),
    ("\\boxed{1/2}", "0.5", 1, "ok"),
    ("\\boxed{-\\frac{1}{2}}", "-0.5", 1, "ok"),
    ("\\boxed{0.333}", "\\frac13", 0, "ok"),  # surprise-ish: equality is at 6 significant decimals ...
    ("\\boxed{0.3333333}", "\\frac13", 1, "ok"),  # ... so a longer decimal expansion matches
    # roots, constants, expressions
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1, "ok"),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", 1, "ok"),  # only because the gold is wrapped in $…$ before parsing
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1, "ok"),  # nested braces in the box
    ("\\boxed{3.14159}", "\\pi", 0, "ok"),
    ("\\boxed{\\infty}", "\\infty", 1, "ok"),
    ("\\boxed{2x+1}", "1+2x", 1, "ok"),
    ("\\boxed{x^2}", "y^2", 0, "ok"),
    # sets, intervals, tuples
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", 1, "ok"),
    ("\\boxed{\\{1,2,3\\}}", "\\{1,2\\}", 0, "ok"),
    ("\\boxed{1, 2}", "\\{1,2\\}", 1, "ok"),
    ("\\boxed{2, 1}", "1, 2", 1, "ok"),  # surprise: a bare comma list compares as an unordered set ...
    ("\\boxed{(2,1)}", "(1,2)", 0, "ok"),  # ... while a parenthesised pair is ordered
    ("\\boxed{(1,2)}", "(1,2)", 1, "ok"),
    ("\\boxed{\\{1,2\\}}", "(1,2)", 1, "ok"),  # surprise: a set answer matches a pair/interval gold
    ("\\boxed{2, 1}", "(1,2)", 0, "ok"),  # surprise: verify is asymmetric — this pair fails one way ...
    ("\\boxed{(1,2)}", "2, 1", 1, "ok"),  # ... and passes the other (gold and answer swapped)
    ("\\boxed{[1,2)}", "[1,2)", 1, "ok"),
    ("\\boxed{(1,2)}", "[1,2)", 0, "ok"),  # open vs half-open interval
    ("\\boxed{(-\\infty, 3]}", "(-\\infty,3]", 1, "ok"),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1, "ok"),  # MATH-500 #1
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 1, "ok"),
    # degrees
    ("\\boxed{30^\\circ}", "30", 1, "ok"),
    ("\\boxed{45^{\\circ}}", "45", 1, "ok"),
    ("\\boxed{30}", "30^\\circ", 1, "ok"),
    ("\\boxed{\\frac{\\pi}{6}}", "30^\\circ", 0, "ok"),  # surprise: ^\circ is dropped, not converted to radians
    # units and currency
    ("\\boxed{5\\text{ cm}}", "5", 1, "ok"),
    ("\\boxed{5 \\text{ meters}}", "5", 1, "ok"),
    ("\\boxed{5}", "5\\text{ cm}", 1, "ok"),
    ("\\boxed{\\$5}", "5", 1, "ok"),
    ("\\boxed{\\$1,000}", "1000", 1, "ok"),
    ("\\boxed{\\$5.00}", "5", 1, "ok"),
    # equations
    ("\\boxed{x = 5}", "5", 1, "ok"),
    ("\\boxed{5}", "x=5", 1, "ok"),
    ("\\boxed{y = 2x + 1}", "2x+1", 1, "ok"),
    # percent
    ("\\boxed{50\\%}", "50", 1, "ok"),
    ("\\boxed{50}", "50\\%", 1, "ok"),
    ("\\boxed{50\\%}", "0.5", 0, "ok"),  # surprise: \% is dropped, so 50% means 50, not 0.5
    ("\\boxed{0.5}", "50\\%", 0, "ok"),
    # multiple choice / text
    ("\\boxed{\\text{(A)}}", "A", 1, "ok"),
    ("\\boxed{B}", "A", 0, "ok"),
    ("\\boxed{\\text{Yes}}", "yes", 1, "ok"),
    ("\\boxed{5}", "\\text{(C) } 5", 0, "ok"),  # a gold that mixes choice letter and value never matches
    # two boxes: the last closed box is the answer (math-verify alone would read them as a set)
    ("First \\boxed{3}, then on reflection \\boxed{5}", "5", 1, "ok"),
    ("First \\boxed{3}, then on reflection \\boxed{5}", "3", 0, "ok"),
    ("\\boxed{4} and then cut off \\boxed{5", "4", 1, "ok"),  # an unclosed final box is skipped
    ("\\boxed 5", "5", 1, "ok"),  # brace-less \boxed argument
    # malformed LaTeX
    ("\\boxed{\\frac{1}{}}", "1", 0, "parse_error"),
    ("\\boxed{\\frac{1}}", "1", 0, "parse_error"),
    ("\\boxed{\\sqrt}", "1", 0, "parse_error"),
    ("\\boxed{)(}", "1", 0, "parse_error"),
    ("\\boxed{3+}", "3", 1, "ok"),  # surprise: the parser tolerates a dangling operator and reads 3
    ("\\boxed{\\frac{1}{2}", "0.5", 0, "no_answer"),  # the only box never closes
    # empty output, no box, empty box
    ("", "1", 0, "no_answer"),
    ("The answer is 5.", "5", 0, "no_answer"),  # math-verify alone would pick up the bare 5
    ("\\boxed{}", "1", 0, "parse_error"),
    # bad gold: scoring failed, counted, not "wrong"
    ("\\boxed{4}", "", 0, "gold_error"),
    # pathological: a power tower sympy cannot compare within the 1 s verify timeout
    ("\\boxed{9^{9^{9^{9}}}}", "1", 0, "timeout"),
]


def test_golden_table_is_large_enough():
    assert len(GOLDEN) >= 40
    assert {status for *_, status in GOLDEN} >= {"ok", "no_answer", "parse_error", "timeout", "gold_error"}


@pytest.mark.parametrize("completion, gold, expected_reward, expected_status", GOLDEN)
def test_golden(reward, completion, gold, expected_reward, expected_status):
    result = reward.score([completion], [gold])
    assert result.status == [expected_status]
    assert result.rewards.tolist() == [float(expected_reward)]
    assert result.correct.tolist() == [bool(expected_reward)]
    expected_counts = {s: 0 for s in STATUSES}
    expected_counts[expected_status] = 1
    assert result.counts == expected_counts  # one timeout / parse failure / no-answer exactly where expected


def test_golden_table_as_one_batch(reward):
    """The same table in one batch (deduplicated, split over both workers) gives the same answers."""
    result = reward.score([c for c, *_ in GOLDEN], [g for _, g, *_ in GOLDEN])
    assert result.rewards.tolist() == [float(r) for *_, r, _ in GOLDEN]
    assert result.status == [s for *_, s in GOLDEN]
    assert result.counts["timeout"] == 1
    assert result.counts["parse_error"] == sum(s == "parse_error" for *_, s in GOLDEN)
    assert result.counts["no_answer"] == sum(s == "no_answer" for *_, s in GOLDEN)
    assert result.n_failed == 2  # the timeout and the bad gold
