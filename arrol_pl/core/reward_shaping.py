"""Reward shaping beyond correctness: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def overlong_penalty(lengths: Sequence[int] | np.ndarray, max_length: int, cache_length: int) -> np.ndarray:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), ``(N,)`` lengths → ``(N,)`` penalties.

    0 up to ``max_length - cache_length`` tokens, then linear down to -1 at ``max_length``, and -1
    beyond it.
    """
    if cache_length < 0 or cache_length > max_length:
        raise ValueError(f"cache_length must be in [0, max_length={max_length}], got {cache_length}")
    n = np.asarray(lengths, dtype=np.float64)
    free = max_length - cache_length
    if cache_length == 0:
        return np.where(n > max_length, -1.0, 0.0)
    return np.clip((free - n) / cache_length, -1.0, 0.0)
