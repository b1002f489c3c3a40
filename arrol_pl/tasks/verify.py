"""One answer against one gold with math-verify, in this process: ``(correct, status)``.

Decisions:
- Gold and answer are wrapped in ``$…$`` before ``math_verify.parse`` (a raw ``\\sqrt{2}`` parses to
  nothing) and compared with ``verify(gold, answer)``; the order matters to math-verify.
- Cheap first: texts equal up to spaces (which LaTeX ignores in math mode) match without sympy, and a
  process parses a gold once (LRU).
- Every outcome has a status; math-verify's own timeouts (SIGALRM: main thread only, which is why
  :mod:`.pool` runs this in worker processes) are ``timeout``, not a silent ``False``.

Statuses: ``ok`` (scored; reward may be 0 or 1), ``no_answer``, ``parse_error`` (the boxed answer
parsed to no expression), ``gold_error`` (the gold did not parse), ``timeout`` (math-verify's own
timeout, or the pool's per-item hard limit), ``deadline`` (the batch deadline passed before the item was
scored), ``error`` (a worker crashed twice on the item, or math-verify raised instead of comparing).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from itertools import product

logger = logging.getLogger(__name__)

STATUSES = ("ok", "no_answer", "parse_error", "gold_error", "timeout", "deadline", "error")
# Statuses that mean "the reward is 0 because scoring failed", not because the answer was wrong.
FAILURE_STATUSES = ("gold_error", "timeout", "deadline", "error")


def as_latex_math(s: str) -> str:
    """Wrap a raw answer in ``$…$`` so math-verify's LaTeX extractor sees it (no-op if already math)."""
    s = s.strip()
    if s.startswith("$") or "\\boxed" in s or s.startswith("\\(") or s.startswith("\\["):
        return s
    return f"${s}$"


def _parse(latex: str, parse_timeout_s: int) -> tuple[list, str]:
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        return parse(as_latex_math(latex), parsing_timeout=parse_timeout_s, raise_on_error=True), "ok"
    except TimeoutException:
        return [], "timeout"
    except Exception:  # noqa: BLE001 — an unparseable string is a counted outcome, not a crash
        logger.debug("math-verify parse raised on %.200r", latex, exc_info=True)
        return [], "parse_error"


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, parse_timeout_s: int) -> tuple[list, str]:
    # A group's G rollouts share one gold, and parsing (ANTLR) costs 1-50 ms: parse each gold once.
    return _parse(gold, parse_timeout_s)


def _same_text(answer: str, gold: str) -> bool:
    def norm(s: str) -> str:
        return "".join(s.split()).strip("$")

    return norm(answer) == norm(gold)


def _is_expression(x) -> bool:
    # math-verify returns sympy objects for parsed math and the raw string as a fallback.
    return not isinstance(x, str)


def score_answer(answer: str, gold: str, parse_timeout_s: int = 3, verify_timeout_s: int = 3) -> tuple[bool, str]:
    """``(correct, status)`` for one extracted answer against one gold, in this process.

    Must run in a main thread (SIGALRM); the pool calls it inside its workers. Each (gold, answer)
    extraction pair is verified separately so a timeout on one pair is seen, not folded into False.
    """
    from math_verify import verify
    from math_verify.errors import TimeoutException

    if answer.strip() and _same_text(answer, gold):
        return True, "ok"  # the same text is the same answer; skip sympy
    gold_parsed, gold_status = _parse_gold(gold, parse_timeout_s)
    if gold_status == "timeout":
        return False, "timeout"
    if not any(_is_expression(g) for g in gold_parsed):
        return False, "gold_error"
    if not answer.strip():
        return False, "parse_error"
    pred_parsed, pred_status = _parse(answer, parse_timeout_s)
    if pred_status == "timeout":
        return False, "timeout"
    if not pred_parsed:
        return False, "parse_error"
    timed_out = False
    raised = 0
    for g, p in product(gold_parsed, pred_parsed):
        try:
            if verify(g, p, timeout_seconds=verify_timeout_s, raise_on_error=True):
                return True, "ok"
        except TimeoutException:
            timed_out = True
        except Exception:  # noqa: BLE001 — counted below; math-verify itself would return False here
            logger.debug("math-verify verify raised", exc_info=True)
            raised += 1
    if timed_out:
        return False, "timeout"
    if not any(_is_expression(p) for p in pred_parsed):
        # Only the raw-string fallback survived: the boxed answer is not parseable math.
        return False, "parse_error"
    if raised:
        return False, "error"  # math-verify could not compare (it never raised on the golden table)
    return False, "ok"
