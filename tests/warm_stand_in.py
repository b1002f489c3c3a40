"""The warm interpreter's stand-in for ``sys.executable`` (tests/warm_python.py): what a command the server runs
starts as ``python`` is handed to the same server, so torchrun's ranks, ``reproduce.py``'s parts and a sweep's jobs
skip the imports too.

The server writes an executable file (:func:`write`) and gives its path to each child as ``sys.executable``.
Started as ``python [-u] -m module ...`` or ``python [-u] script.py ...`` (a module of the package, or a script that
is not an installed one) with an environment the server takes, the stand-in (:func:`main`) asks the server for a
child with its own argv, working directory, environment, resource limits and standard streams, then stays its
parent's child in its place: it passes on every signal it can catch, ends as the command ends (the same exit
status, or killed by the same signal), and a kill of the stand-in itself (SIGKILL) makes the server kill the
command. Anything else (``-c``, other options, an installed script, an environment the server refuses) replaces the
stand-in with the real interpreter (``exec``), so the process is the fresh one it would have been.

The stand-in runs with ``python -S -E`` and imports nothing but the standard library: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
from pathlib import Path

PACKAGE = "arrol_pl"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""The signals the stand-in passes on to the command (SIGKILL and SIGSTOP cannot be caught: the server kills the
command when the stand-in is gone)."""
DIR_PREFIX = "warm-python-"
"""The name of a server's directory (its socket, the stand-in, :data:`REFUSALS`) begins with this."""
REFUSALS = "refused.log"
"""Beside the stand-in: one line per command it handed to a fresh interpreter, and why."""


def write(directory: str, socket_path: str, real: str) -> str:
    """The stand-in's executable in ``directory``, for the server at ``socket_path``; its path."""
    path = os.path.join(directory, "python")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(path, "w") as f:
        f.write(
            f"#!{real} -SE\nimport sys\nsys.path.insert(0, {here!r})\nimport warm_stand_in\n"
            f"warm_stand_in.main({socket_path!r}, {real!r})\n"
        )
    os.chmod(path, 0o755)
    return path


def command(args: list[str]) -> tuple[list[str], bool] | None:
    """``args`` (what follows ``python``) as the server's argv (``[script, ...]`` or ``["-m", module, ...]``) and
    whether ``-u`` was given; None: not a command the server runs (only the package's modules and scripts that are
    not installed ones: a library's worker script, as torch's compile workers, starts the real interpreter)."""
    unbuffered = args[:1] == ["-u"]
    rest = args[1:] if unbuffered else args
    if len(rest) >= 2 and rest[0] == "-m" and rest[1].split(".")[0] == PACKAGE:
        return rest, unbuffered
    if rest and rest[0].endswith(".py") and not rest[0].startswith("-"):
        script = Path(rest[0]).resolve()
        installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        if script.is_file() and not installed & set(script.parents):
            return rest, unbuffered
    return None


def limits() -> dict[str, list[int]]:
    """This process's resource limits, by name (the command inherits them, as from a fresh interpreter's parent)."""
    names = (n for n in dir(resource) if n.startswith("RLIMIT_"))
    return {n: list(resource.getrlimit(getattr(resource, n))) for n in names}


def dispositions(ignored: list[int]) -> None:
    """In the command: the dispositions of :data:`FORWARDED` a fresh interpreter starts with, when its parent (the
    stand-in's) left those of ``ignored`` ignored: ignored, or the default (Ctrl-C: ``KeyboardInterrupt``)."""
    for sig in FORWARDED:
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        signal.signal(sig, signal.SIG_IGN if int(sig) in ignored else default)


def _streams() -> list[int]:
    """Standard input, output and error as the command gets them (/dev/null for one that is closed here)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY))
    return fds


def _fresh(real: str, args: list[str], why: str, directory: str) -> None:
    """Become the real interpreter on ``args``; ``why`` (when the server refused) goes to :data:`REFUSALS`."""
    if why:
        with open(os.path.join(directory, REFUSALS), "a") as log:
            log.write(json.dumps({"argv": args[:4], "why": why}) + "\n")
    os.execv(real, [real, *args])


def main(socket_path: str, real: str) -> None:
    """The stand-in's process: run ``sys.argv[1:]`` in the server, or become ``real`` on it."""
    args = sys.argv[1:]
    directory = os.path.dirname(socket_path)
    found = command(args)
    if found is None:
        _fresh(real, args, "", directory)
    argv, unbuffered = found
    ignored = [int(sig) for sig in FORWARDED if signal.getsignal(sig) == signal.SIG_IGN]
    request = {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "rlimits": limits(),
        "unbuffered": unbuffered or bool(os.environ.get("PYTHONUNBUFFERED")),
        "stand_in": True,
        "ignored": ignored,
    }
    pending: list[int] = []  # signals that came before the command's pid: passed on once it is known
    command_pid: list[int] = []

    def forward(signum: int, frame) -> None:
        if not command_pid:
            pending.append(signum)
            return
        try:
            os.kill(command_pid[0], signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        if int(sig) not in ignored:  # an ignored one stays ignored, here and in the command
            signal.signal(sig, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(socket_path)
    socket.send_fds(conn, [json.dumps(request).encode()], _streams())
    reply = json.loads(conn.recv(1 << 16))
    if "refused" in reply:
        conn.close()
        for sig in pending[:1]:  # what a fresh interpreter would not have outlived
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        _fresh(real, args, reply["refused"], directory)
    command_pid.append(reply["pid"])
    for sig in pending:
        forward(sig, None)
    message = conn.recv(1 << 16)
    if not message:  # the server is gone (the test worker ended): so is the command
        os._exit(70)
    status = json.loads(message)["status"]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to end the process
    os._exit(os.waitstatus_to_exitcode(status))
