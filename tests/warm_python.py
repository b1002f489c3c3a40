"""Entry points started from a warm interpreter: :func:`run` and :func:`Popen`, called as :mod:`subprocess`'s.

A test that starts ``python experiments/run.py ...`` pays about 8 s of imports (torch, transformers, vLLM,
Lightning) before the script does anything of its own; the suite starts about sixty such scripts. Here one server
per pytest worker (this file, run as a script) imports them once and forks a child for each command. The child is
the command as a fresh interpreter would run it: its own argv, ``sys.path`` (the script's directory, then
``$PYTHONPATH``), working directory, environment, resource limits, standard streams, signals, exit code (negative
for a signal, as :class:`subprocess.Popen` reports it), non-daemon threads joined and ``atexit`` run at its end. It
is a child of the server, not of the test: :class:`Process` gives the test what :class:`subprocess.Popen` does.

A command goes through the server only where a fresh interpreter would do the same:

- ``[sys.executable, script.py, ...]`` or ``[sys.executable, "-m", module, ...]``, nothing else;
- an environment that differs from the server's only in :data:`RUNTIME_ENV` (variables read when used, never at
  import: a module the server imported may have read any other one already);
- only the keywords :data:`SUPPORTED` names (``rlimits`` stands in for a ``preexec_fn`` that sets limits).

Anything else starts a fresh interpreter through :mod:`subprocess`, as does every command when
``ARROL_TESTS_FRESH_PYTHON=1`` (the way to check that a test passes both ways). The tests that are about a fresh
interpreter (what an import pulls in, the installed wheel, the environment an entry point sets before it imports)
call :mod:`subprocess` themselves.

What a command starts as ``python`` comes here too: a child's ``sys.executable`` is the server's stand-in
(tests/warm_stand_in.py), so torchrun's wrapper and ranks, ``reproduce.py``'s parts and a sweep's jobs skip the
imports as well, under the same rules (their environment may differ in :data:`LAUNCHED_ENV` too). The stand-in is
the launcher's child in the command's place: it passes on signals and ends as the command ends.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

import warm_stand_in

PRELOAD = (
    "arrol_pl.cli.train",
    "arrol_pl.cli.evaluate",
    "arrol_pl.train.run.experiment",
    "arrol_pl.train.run.callbacks",
    "arrol_pl.train.run.heldout",
    "arrol_pl.train.step.module",
    "arrol_pl.train.records.loggers",
    "arrol_pl.engine.engine",
    "lightning",
    "transformers",
    "torch.utils.tensorboard",
    "hydra",
)
"""What the server imports once: the training and evaluation entry points with what they load for a run; and
:func:`engine_modules`."""

ENGINE_LOADS = ("vllm.model_executor.model_loader",)
"""What an engine's start imports beside the modules the adapter touches: the weight loader (and the quantization
library it pulls in)."""


def engine_modules() -> list[str]:
    """The vLLM modules an engine's start imports, which the engine itself imports only then: every module the
    adapter touches (:data:`~arrol_pl.engine.vllm_api.VLLM_API`) and :data:`ENGINE_LOADS`; about 5 s of CPU a run
    skips. The server imports each that this platform's vLLM can import."""
    from arrol_pl.engine.vllm_api import VLLM_API

    return sorted({touch.module for touch in VLLM_API}) + list(ENGINE_LOADS)


RUNTIME_ENV = frozenset({"ARROL_CACHE", "PYTHONPATH", "PYTEST_CURRENT_TEST", "PL_GLOBAL_SEED", "PL_SEED_WORKERS"})
"""Variables a command's environment may set apart from the server's: each read when used (pytest's name of the test
running; Lightning's seed, which an in-process test leaves in the worker's environment), or applied here
(``$PYTHONPATH``; and ``$PYTHONUNBUFFERED`` where the server's streams are buffered)."""

LAUNCHED_ENV = frozenset(
    {
        *("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT"),
        *("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        *("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"),
        *("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_ENABLE_FILE_TIMER"),
        *("TORCHELASTIC_TIMER_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "ARROL_RUN_OWNER", "ARROL_RANKS_CLOSING"),
    }
)
"""What a launched command's environment may set apart from the server's, beside :data:`RUNTIME_ENV`: torchrun's
variables for each rank (read when the process group starts, or when a rank records its error) and ``arrol train``'s
for its ranks (read when a rank claims the run directory or fails)."""

SUPPORTED = frozenset({"cwd", "env", "stdin", "stdout", "stderr", "text", "rlimits"})
"""The keywords of :func:`Popen` the server takes (:func:`run` takes its own as :func:`subprocess.run` does); any
other starts a fresh interpreter. Both also take ``runtime_env``: more variables that are read when used (a test's
own), beside :data:`RUNTIME_ENV`."""

FRESH = "ARROL_TESTS_FRESH_PYTHON"
"""Set to 1: every command starts a fresh interpreter."""


# ----------------------------------------------------------------------------------------------------- the server


def _exit_code(exc: SystemExit) -> int:
    """The status a fresh interpreter exits with on ``exc`` (printing a message that is not an int, as it does)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def differences(env: dict, server_env: dict, imported_env: dict, runtime: frozenset = frozenset()) -> list[str]:
    """The variables of ``env`` a command could not be given by a server started in ``server_env`` (whose imports set
    ``imported_env``) as a fresh interpreter would see them (``runtime``: more variables read when used)."""
    keys = (set(env) | set(server_env)) - RUNTIME_ENV - runtime
    if not server_env.get("PYTHONUNBUFFERED"):
        keys.discard("PYTHONUNBUFFERED")  # the child unbuffers its streams (a buffered one cannot be made again)
    return sorted(
        k
        for k in keys
        if env.get(k) != server_env.get(k)
        and not (k in imported_env and k not in server_env and env.get(k) in (None, imported_env[k]))
    )


def _child(request: dict, fds: list[int], imported_env: dict, base_path: list[str], stand_in: str) -> None:
    """In the forked child: become the command and end as its interpreter would; never returns. Its
    ``sys.executable`` is the stand-in (tests/warm_stand_in.py): what it starts as ``python`` comes here too."""
    code = 70
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for key, value in imported_env.items():  # what the imports set unless set (os.environ.setdefault)
            os.environ.setdefault(key, value)
        if request["unbuffered"]:  # as ``python -u``: every write reaches the stream at once
            for name, fd in (("stdout", 1), ("stderr", 2)):
                getattr(sys, name).flush()
                stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True)
                setattr(sys, name, stream)
                setattr(sys, f"__{name}__", stream)
        for name, limits in request["rlimits"].items():
            if resource.getrlimit(getattr(resource, name)) != tuple(limits):
                resource.setrlimit(getattr(resource, name), tuple(limits))
        sys.executable = stand_in
        if "ignored" in request:  # from the stand-in: the signals its parent left as a fresh interpreter gets them
            warm_stand_in.dispositions(request["ignored"])
        argv = request["argv"]
        pythonpath = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        import runpy

        if argv[0] == "-m":
            sys.path[:] = [os.getcwd(), *pythonpath, *base_path]
            sys.argv = ["-m", *argv[2:]]
            target = lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)  # noqa: E731
        else:
            script = os.path.abspath(argv[0])
            sys.path[:] = [os.path.dirname(os.path.realpath(script)), *pythonpath, *base_path]
            sys.argv = [argv[0], *argv[1:]]
            target = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
        interrupted = False
        try:
            target()
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            traceback.print_exc()
            interrupted = True
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own end: join non-daemon threads
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        if interrupted:  # a fresh interpreter ends an uncaught Ctrl-C by the signal itself
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        os._exit(code)


def serve(path: str) -> None:
    """Import :data:`PRELOAD`, report on stdout, then fork a child per request on the socket at ``path`` and send each
    requester the child's pid, then its wait status; end when stdin closes (the worker is gone). A request from the
    stand-in (tests/warm_stand_in.py) is refused when its environment differs from the server's beyond
    :data:`RUNTIME_ENV` and :data:`LAUNCHED_ENV`, and its child is killed if the stand-in goes first."""
    before = dict(os.environ)
    base_path = sys.path[1:]  # without this file's directory
    for name in PRELOAD:
        importlib.import_module(name)
    for name in engine_modules():
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # not in this platform's vLLM: an engine's start does not import it either
    imported_env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    threads = threading.active_count()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    stand_in = warm_stand_in.write(os.path.dirname(path), path, sys.executable)
    print(json.dumps({"env": before, "imported_env": imported_env, "threads": threads}), flush=True)
    if threads != 1:
        return  # a fork would copy another thread's locks: the client starts fresh interpreters instead
    import gc

    gc.collect()
    gc.freeze()  # the imports' objects stay where they are: a child's collections do not copy their pages
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select(timeout=0.02):
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 1024):
                    return
                continue
            if key.fileobj is not listener:  # a stand-in gone before its command: the command goes too
                if key.data in children and not key.fileobj.recv(16):
                    selector.unregister(key.fileobj)
                    os.kill(key.data, signal.SIGKILL)
                continue
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            request = json.loads(message)
            if request.get("stand_in"):
                refused = differences(request["env"], before, imported_env, LAUNCHED_ENV)
                if refused:
                    for fd in fds:
                        os.close(fd)
                    conn.send(json.dumps({"refused": ", ".join(refused)}).encode())
                    conn.close()
                    continue
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                for other in [conn, *children.values()]:
                    other.close()
                _child(request, fds, imported_env, base_path, stand_in)
            for fd in fds:
                os.close(fd)
            conn.send(json.dumps({"pid": pid}).encode())
            children[pid] = conn
            if request.get("stand_in"):
                selector.register(conn, selectors.EVENT_READ, pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                if conn.fileno() in selector.get_map():
                    selector.unregister(conn)
                try:
                    conn.send(json.dumps({"status": status}).encode())
                except OSError:
                    pass  # the test, or the stand-in, is gone
                conn.close()


# ----------------------------------------------------------------------------------------------------- the client


class _Server:
    """This worker's server: started on first use, ended with the worker."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=warm_stand_in.DIR_PREFIX)
        self.path = os.path.join(self.dir, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "serve", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ),  # what the tests' commands are given (a C library may have set more, readline does)
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the tests' warm interpreter did not start (exit {self.proc.wait()})")
        ready = json.loads(line)
        self.env, self.imported_env, self.usable = ready["env"], ready["imported_env"], ready["threads"] == 1
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.stdin.closed:
            return
        atexit.unregister(self.close)
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def refusals(self) -> list[dict]:
        """The commands the stand-in handed to a fresh interpreter because the server refused them, and why."""
        log = Path(self.dir) / warm_stand_in.REFUSALS
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def differs(self, env: dict, runtime: frozenset = frozenset()) -> list[str]:
        """The variables of ``env`` a command could not be given here as a fresh interpreter would see them
        (``runtime``: more variables read when used); none: the server takes the command."""
        return differences(env, self.env, self.imported_env, runtime)


_server: _Server | None = None

refused = ""
"""Why the server did not take the last command it was offered (the variables that differ), for a test's message."""


def _warm(args, kwargs: dict) -> dict | None:
    """The request for ``args`` if the server takes it, else None."""
    global _server, refused
    runtime = frozenset(kwargs.pop("runtime_env", ()))
    args = [str(a) for a in args] if not isinstance(args, (str, bytes)) else None
    if os.environ.get(FRESH) == "1" or not args or len(args) < 2 or set(kwargs) - SUPPORTED:
        return None
    if args[0] != sys.executable or not (args[1] == "-m" or args[1].endswith(".py")):
        return None
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    if _server is not None and _server.differs(dict(os.environ)):
        _server.close()  # the worker's own environment changed since the server started (a fixture set a variable)
        _server = None
    if _server is None:
        _server = _Server()
    refused = (
        "the server's imports started a thread" if not _server.usable else ", ".join(_server.differs(env, runtime))
    )
    if refused:
        return None
    rlimits = {resource_name(k): list(v) for k, v in (kwargs.get("rlimits") or {}).items()}
    unbuffered = bool(env.get("PYTHONUNBUFFERED")) and not _server.env.get("PYTHONUNBUFFERED")
    cwd = str(kwargs.get("cwd") or os.getcwd())
    return {"argv": args[1:], "cwd": cwd, "env": env, "rlimits": rlimits, "unbuffered": unbuffered}


def is_stand_in(pid: int) -> bool:
    """Whether process ``pid`` is a server's stand-in for ``python`` (tests/warm_stand_in.py), not the command."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(os.path.dirname(a)).startswith(warm_stand_in.DIR_PREFIX.encode()) for a in argv[1:3])


def resource_name(limit: int) -> str:
    """``resource.RLIMIT_FSIZE`` -> ``"RLIMIT_FSIZE"``."""
    return next(n for n in dir(resource) if n.startswith("RLIMIT_") and getattr(resource, n) == limit)


def _apply_rlimits(rlimits: dict):
    def apply():
        for limit, values in rlimits.items():
            resource.setrlimit(limit, values)

    return apply


class Process:
    """A command the server runs, with :class:`subprocess.Popen`'s ``pid``, ``args``, ``returncode``, streams,
    ``poll``, ``wait``, ``communicate``, ``send_signal``, ``terminate`` and ``kill``."""

    def __init__(self, args, request: dict, stdin=None, stdout=None, stderr=None, text=False) -> None:
        self.args, self.returncode = args, None
        ours, theirs = [], []  # the parent's ends of the pipes; the child's ends (sent, then closed here)
        self.stdin = self.stdout = self.stderr = None

        def end(spec, fd: int):
            if spec is None:
                return os.dup(fd)
            if spec == subprocess.DEVNULL:
                return os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if spec == subprocess.PIPE:
                r, w = os.pipe()
                mine, child = (w, r) if fd == 0 else (r, w)
                ours.append((fd, mine))
                return child
            return os.dup(spec if isinstance(spec, int) else spec.fileno())

        theirs.append(end(stdin, 0))
        theirs.append(end(stdout, 1))
        theirs.append(os.dup(theirs[1]) if stderr == subprocess.STDOUT else end(stderr, 2))
        for fd, mine in ours:
            mode = ("w" if fd == 0 else "r") + ("" if text else "b")
            stream = open(mine, mode, **({"encoding": "utf-8", "errors": "strict"} if text else {}))
            setattr(self, ("stdin", "stdout", "stderr")[fd], stream)
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(_server.path)
            socket.send_fds(self._conn, [json.dumps(request).encode()], theirs)
            self.pid = json.loads(self._conn.recv(1 << 16))["pid"]
        finally:
            for fd in theirs:
                os.close(fd)

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                message = self._conn.recv(1 << 16)
            except (TimeoutError, BlockingIOError):
                return None
            if not message:
                raise RuntimeError(f"the tests' warm interpreter ended before {self.args} did")
            self.returncode = os.waitstatus_to_exitcode(json.loads(message)["status"])
            self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout: float | None = None):
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        read: dict[str, object] = {}

        def drain(name: str) -> None:
            read[name] = getattr(self, name).read()

        readers = [
            threading.Thread(target=drain, args=(n,), daemon=True) for n in ("stdout", "stderr") if getattr(self, n)
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        for name in read:
            getattr(self, name).close()
        return read.get("stdout"), read.get("stderr")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def Popen(args, **kwargs):  # noqa: N802  (subprocess's name)
    """:class:`subprocess.Popen` for ``args``: a :class:`Process` of the server where it takes the command."""
    warm = _warm(args, kwargs)
    if warm is None:
        rlimits = kwargs.pop("rlimits", None)
        if rlimits:
            kwargs["preexec_fn"] = _apply_rlimits(rlimits)
        return subprocess.Popen(args, **kwargs)
    keys = {k: kwargs.get(k) for k in ("stdin", "stdout", "stderr")}
    return Process(args, warm, text=bool(kwargs.get("text")), **keys)


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` for ``args``, through the server where it takes the command."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    completed = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
    if check:
        completed.check_returncode()
    return completed


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2])
    sys.stdout.flush()
    os._exit(0)  # no finalisation: the imported extensions would report the objects the server kept as leaks
