"""Float32 islands inside a mixed-precision step.

Lightning's ``bf16-mixed`` / ``16-mixed`` precision runs the whole ``training_step`` under ``torch.autocast``. The
policy's update should compute in 16 bits there; the rollout engine (vLLM's own layers), the quality head's scoring
and its training should not: vLLM picks its dtype itself, and the head is a small float32 MLP whose scores the
calibrator bins and whose updates must not depend on the trainer's precision. :func:`no_autocast` turns autocast off
for the devices where it is on, and is a no-op elsewhere.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator, TypeVar

import torch

F = TypeVar("F", bound=Callable)

DEVICE_TYPES = ("cpu", "cuda")


@contextlib.contextmanager
def no_autocast() -> Iterator[None]:
    """Autocast off on every device type where the caller turned it on (CPU and CUDA)."""
    with contextlib.ExitStack() as stack:
        for device in DEVICE_TYPES:
            if torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        yield


def outside_autocast(fn: F) -> F:
    """``fn`` run under :func:`no_autocast`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with no_autocast():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
