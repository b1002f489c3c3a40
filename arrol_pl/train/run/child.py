"""A child process in a session of its own, the launcher's signals forwarded to it once each time they arrive."""

from __future__ import annotations

import signal
import subprocess
from typing import Any, Mapping


def run_alone(command: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` in a session of its own, forwarding SIGINT and SIGTERM to it; its exit status (``128 +
    signal`` when a signal ended it). The terminal's Ctrl-C reaches this process alone, so the child receives it
    once, from here, and this process waits for the child to stop on it (torchrun: until its ranks saved and exited)
    instead of leaving it running."""
    child = subprocess.Popen(command, start_new_session=True, env=None if env is None else dict(env))

    def forward(signum: int, frame: Any) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
