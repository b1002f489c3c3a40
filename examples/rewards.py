"""A reward function of your own, for ``reward.function=examples.rewards:json_answer_match`` (docs/data.md).

The task asks for the answer as a JSON object, ``{"answer": ...}``; the reward is 1.0 when the last such object in
the completion has an ``answer`` field equal to the gold (as text, spaces around it ignored), else 0.0. Anything
that is not such an object scores 0.0: a malformed answer is a wrong answer here, not an error.
"""

from __future__ import annotations

import json

FIELD = "answer"
"""The completion's JSON field that holds its answer."""


def last_json_object(text: str) -> dict | None:
    """The last ``{...}`` in ``text`` that parses as a JSON object (None without one)."""
    decoder = json.JSONDecoder()
    found = None
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found = value
        start = text.find("{", end)
    return found


def json_answer_match(prompt: str, completion: str, answer: str) -> float:
    """1.0 when the completion's last JSON object has ``answer`` equal to the gold, else 0.0."""
    obj = last_json_object(completion)
    if obj is None or FIELD not in obj:
        return 0.0
    return float(str(obj[FIELD]).strip() == str(answer).strip())
