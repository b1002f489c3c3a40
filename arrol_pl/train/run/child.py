"""A child process in a session of its own, the launcher's signals forwarded to it once each time they arrive."""

from __future__ import annotations

import signal
import subprocess
from typing import Any, Mapping


def run_alone(command: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` in a session of its own, forwarding SIGINT and SIGTERM to it; its exit status (``128 +
    signal`` when a signal ended it). The terminal's Ctrl-C reaches this process alone, so the child receives it
    once, from here, and this process waits for the child to stop on it (torchrun: until its ranks saved and exited)
    instead of leaving it running.

    The forwarding is in place before the child starts, so the child starts with both signals at their defaults even
    where this process inherited them ignored (a job a shell script started with ``&``): a signal forwarded to it is
    never dropped there, and one that arrives while it starts is forwarded once it has."""
    child: subprocess.Popen | None = None
    early: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        if child is None:
            early.append(signum)
        else:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(command, start_new_session=True, env=None if env is None else dict(env))
        for signum in early:
            child.send_signal(signum)
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
