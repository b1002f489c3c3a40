"""The launcher's child in a session of its own (arrol_pl/train/run/child.py): a signal sent to the launcher reaches
the child once, even where the launcher was started with SIGINT ignored (a job a shell script started with ``&``)."""

import os
import signal
import sys
import threading
import time

import pytest

from arrol_pl.train.run.child import run_alone

CHILD = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).write_text('ready')\ntime.sleep(20)\n"
"""Says it is ready, then sleeps: only a signal ends it within 20 s."""


@pytest.mark.subprocess
@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_a_sigint_to_the_launcher_ends_the_child_whatever_the_launcher_inherited(tmp_path, inherited):
    ready = tmp_path / "ready"

    def interrupt_once_ready():
        deadline = time.monotonic() + 15
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    original = signal.signal(signal.SIGINT, inherited)
    try:
        sender = threading.Thread(target=interrupt_once_ready)
        sender.start()
        start = time.monotonic()
        code = run_alone([sys.executable, "-c", CHILD, str(ready)])
        sender.join()
        assert signal.getsignal(signal.SIGINT) == inherited  # put back as it was
    finally:
        signal.signal(signal.SIGINT, original)
    assert code == 128 + signal.SIGINT  # the child's KeyboardInterrupt ends it by the signal
    assert time.monotonic() - start < 15
