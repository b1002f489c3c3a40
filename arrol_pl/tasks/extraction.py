"""Answer extraction: the content of the last *closed* ``\\boxed{...}`` of a completion (paper §3).

Nested braces are matched and escaped ``\\{ \\}`` ignored. A completion without one has no answer.
Extracting it ourselves (rather than letting math-verify scan the whole text) keeps "no answer" distinct
from "wrong answer" and makes two boxes mean "the last one counts" (math-verify alone parses two boxes
as a set, which never equals a single gold). Pure string code: dataset adapters import it for golds.
"""

from __future__ import annotations


def _boxed_content_at(text: str, start: int) -> str | None:
    """Content of the ``\\boxed`` command starting at ``text[start]``; None if it never closes."""
    i = start + len("\\boxed")
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        # ``\boxed 5`` — the argument is the next token.
        j = i
        while j < n and not text[j].isspace() and text[j] not in "$":
            j += 1
        return text[i:j] if j > i else None
    depth = 0
    j = i
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2  # an escaped character (``\{``, ``\}``, ``\\``) never opens or closes the argument
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last closed ``\\boxed{...}`` in ``text`` (stripped), or None.

    A truncated final box (``... \\boxed{4`` cut by the length limit) is skipped in favour of the
    last box that closes.
    """
    pos = text.rfind("\\boxed")
    while pos != -1:
        content = _boxed_content_at(text, pos)
        if content is not None:
            return content.strip()
        pos = text.rfind("\\boxed", 0, pos)
    return None


def has_boxed_answer(text: str) -> bool:
    """The format reward's condition: a closed, non-empty ``\\boxed{}``."""
    content = extract_boxed(text)
    return bool(content)
