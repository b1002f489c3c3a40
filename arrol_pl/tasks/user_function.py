"""A reward function of the user's own as one worker runs it: :func:`resolve_reward_function` finds the callable at
an import path (``reward.function=module:function``), :func:`call_reward` calls it on one item. Below the pool
(:mod:`.pool` imports this in every worker) and the rewards (:mod:`.reward_function`), and imports neither.

Decisions:
- **Found the way Python finds it, and from the working directory.** A script's own directory is on
  ``sys.path``, the directory it was started from is not: :func:`resolve_reward_function` looks there too, and so
  does every worker, which imports the function itself when it starts (a module that imports in the trainer
  but not in a worker fails the pool's start with the worker's message).
- **A failure is an outcome, not a crash.** A function that raises, or returns something that is not a finite
  number, scores 0 with status ``error`` and the reason; the reward counts and reports them.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from typing import Callable

MATH_VERIFY = "math_verify"
"""``reward.function``'s built-in value: the last ``\\boxed{}`` checked against the gold with math-verify."""

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")

RewardFunction = Callable[[str, str, str], float]


def resolve_reward_function(path: str, search_dir: str | None = None) -> RewardFunction:
    """The callable at ``module:function`` (the function may be an attribute path, ``module:Class.method``),
    importing ``module`` from ``sys.path`` and then from ``search_dir`` (the working directory when None).
    A ValueError says what is wrong in one line."""
    if not IMPORT_PATH.match(path):
        raise ValueError(
            f"{path!r} is not an import path: write module:function (e.g. my_rewards:exact_match), or {MATH_VERIFY}"
        )
    module_name, attribute = path.split(":")
    search_dir = os.getcwd() if search_dir is None else search_dir
    if search_dir not in sys.path:
        sys.path.append(search_dir)  # after everything else: a module of the working directory never shadows one
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 — the module's own error, named in the one-line message
        raise ValueError(f"cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    for name in attribute.split("."):
        if not hasattr(obj, name):
            raise ValueError(f"{module_name} has no {attribute}")
        obj = getattr(obj, name)
    if not callable(obj):
        raise ValueError(f"{path} is a {type(obj).__name__}, not a function")
    return obj


def call_reward(fn: RewardFunction, prompt: str, completion: str, answer: str) -> tuple[float, str, str]:
    """One item's ``(reward, status, note)``: ``status`` ``ok``, or ``error`` (reward 0) with the reason in ``note``
    when ``fn`` raised or returned no finite number."""
    try:
        value = fn(prompt, completion, answer)
    except Exception as exc:  # noqa: BLE001 — counted and reported by the batch (status error), never silent
        return 0.0, "error", f"{type(exc).__name__}: {exc}"
    try:
        reward = float(value)
    except (TypeError, ValueError):
        return 0.0, "error", f"returned {type(value).__name__} {value!r:.80}, not a number"
    if not math.isfinite(reward):
        return 0.0, "error", f"returned {reward}"
    return reward, "ok", ""
