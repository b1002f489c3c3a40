"""tests/warm_python.py runs a command as a fresh interpreter would: the same probe script, started both ways, reports
the same argv, ``sys.path`` head, working directory, environment, ``__name__``, signal dispositions and resource
limits, and ends the same ways (exit codes, an exception, an uncaught Ctrl-C, a kill, threads and ``atexit``)."""

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest
import warm_python

pytestmark = pytest.mark.subprocess

PROBE = """
import atexit, json, os, resource, signal, sys, threading, time

mode = sys.argv[1]
print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "pythonpath": [p for p in sys.path if p.endswith("extra-path")],
    "cwd": os.getcwd(),
    "env": {k: os.environ.get(k) for k in ("PROBE_VALUE", "ARROL_CACHE")},
    "name": __name__,
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ)],
    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE),
}), flush=True)
atexit.register(lambda: print("atexit ran", flush=True))
if mode == "exit":
    sys.exit(3)
if mode == "raise":
    raise ValueError("the probe failed")
if mode == "message":
    sys.exit("a message")
if mode == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread ended", flush=True))).start()
if mode == "wait":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker's children ignore it
    time.sleep(60)
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The probe script's command line and the options it runs with; the server takes commands (whatever
    ``ARROL_TESTS_FRESH_PYTHON`` the suite runs with)."""
    monkeypatch.delenv(warm_python.FRESH, raising=False)
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PROBE_VALUE": "seen", "ARROL_CACHE": str(tmp_path / "cache")}
    env["PYTHONPATH"] = str(tmp_path / "extra-path")
    return [sys.executable, str(script)], dict(cwd=work, env=env, runtime_env=["PROBE_VALUE"])


def both(command, options, **kw):
    """The command run fresh (subprocess) and warm (the server), with the same options."""
    options = {**options, **kw}
    runtime, rlimits = options.pop("runtime_env"), options.pop("rlimits", {})
    limits = {"preexec_fn": warm_python._apply_rlimits(rlimits)} if rlimits else {}
    fresh = subprocess.run(command, capture_output=True, text=True, timeout=120, **options, **limits)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    with warm_python.Popen(command, **options, **quiet, runtime_env=runtime, rlimits=rlimits) as warm:
        assert isinstance(warm, warm_python.Process), f"the server did not take the command: {warm_python.refused}"
    warm = warm_python.run(
        command, capture_output=True, text=True, timeout=120, runtime_env=runtime, **options, rlimits=rlimits
    )
    return fresh, warm


@pytest.mark.parametrize(
    "mode,code,ending",
    [("ok", 0, "atexit ran"), ("exit", 3, "atexit ran"), ("thread", 0, "thread ended\natexit ran")],
)
def test_a_command_sees_and_ends_as_in_a_fresh_interpreter(probe, mode, code, ending):
    command, options = probe
    fresh, warm = both([*command, mode], options)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == code and fresh.stdout.rstrip().endswith(ending)
    seen = json.loads(fresh.stdout.splitlines()[0])
    assert seen["argv"] == [command[1], mode] and seen["name"] == "__main__"
    assert seen["path0"] == os.path.dirname(command[1]) and seen["pythonpath"]
    assert seen["cwd"] == str(options["cwd"]) and seen["env"]["PROBE_VALUE"] == "seen"


def test_failures_read_as_a_fresh_interpreters(probe):
    """An exception: its traceback and exit 1; ``sys.exit`` with a message: the message and exit 1."""
    command, options = probe
    for mode, last in (("raise", "ValueError: the probe failed"), ("message", "a message")):
        fresh, warm = both([*command, mode], options)
        assert fresh.returncode == warm.returncode == 1
        assert fresh.stderr.rstrip().splitlines()[-1] == warm.stderr.rstrip().splitlines()[-1] == last
        assert fresh.stdout == warm.stdout


def test_limits_and_signals_reach_the_command(probe):
    """``rlimits`` (a fresh interpreter's ``preexec_fn``), a Ctrl-C it does not catch (-SIGINT, after its
    traceback) and a kill (-SIGKILL), with the pid the test signals being the command's."""
    command, options = probe
    limit = {resource.RLIMIT_FSIZE: (1 << 20, 1 << 20)}
    fresh, warm = both([*command, "ok"], options, rlimits=limit)
    fsize = [json.loads(out.stdout.splitlines()[0])["fsize"] for out in (fresh, warm)]
    assert fsize == [[1 << 20, 1 << 20]] * 2
    for sig, code in ((signal.SIGINT, -signal.SIGINT), (signal.SIGKILL, -signal.SIGKILL)):
        runtime = options["runtime_env"]
        keys = {k: v for k, v in options.items() if k != "runtime_env"}
        proc = warm_python.Popen([*command, "wait"], **keys, runtime_env=runtime, stdout=subprocess.PIPE, text=True)
        assert isinstance(proc, warm_python.Process)
        assert json.loads(proc.stdout.readline())["argv"][1] == "wait"
        assert proc.poll() is None
        time.sleep(0.1)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        assert proc.returncode == code


def test_an_environment_read_at_import_starts_a_fresh_interpreter(probe, monkeypatch):
    """A variable the server's imports may have read already (not one the test says is read when used) sends the
    command to a fresh interpreter, as does ``ARROL_TESTS_FRESH_PYTHON=1``."""
    command, options = probe
    keys = {k: v for k, v in options.items() if k != "runtime_env"}
    with warm_python.Popen([*command, "ok"], **keys, stdout=subprocess.DEVNULL) as proc:
        assert isinstance(proc, subprocess.Popen) and warm_python.refused == "PROBE_VALUE"
    monkeypatch.setenv(warm_python.FRESH, "1")
    env = {k: v for k, v in keys["env"].items() if k != "PROBE_VALUE"}
    with warm_python.Popen([*command, "ok"], **{**keys, "env": env}, stdout=subprocess.DEVNULL) as proc:
        assert isinstance(proc, subprocess.Popen)


NESTED = """
import json, os, signal, subprocess, sys, time

mode = sys.argv[1]
if mode == "inner":
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    signals = [getattr(h, "name", None) or getattr(h, "__name__", str(h)) for h in handlers]
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "cwd": os.getcwd(),
                      "signals": signals}), flush=True)
    if sys.argv[2] == "wait":
        signal.signal(signal.SIGINT, signal.default_int_handler)
        time.sleep(60)
    sys.exit(int(sys.argv[2]))
report = {"outer": os.getpid(), "executable": sys.executable}
done = subprocess.run([sys.executable, "-u", __file__, "inner", "5"], capture_output=True, text=True)
report["inner"], report["inner_code"] = json.loads(done.stdout), done.returncode
dash_c = "import os, sys; print(os.getppid(), sys.executable)"
report["dash_c"] = subprocess.run([sys.executable, "-c", dash_c], capture_output=True, text=True).stdout.split()
for ignored in (False, True):  # what the launcher leaves ignored stays ignored, as in a fresh interpreter
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
    seen = [subprocess.run([python, __file__, "inner", "0"], capture_output=True, text=True).stdout
            for python in (sys.executable, sys.argv[2])]
    report[f"signals_{ignored}"] = [json.loads(out)["signals"] for out in seen]
signal.signal(signal.SIGINT, signal.default_int_handler)
env = {**os.environ, "NESTED_AT_IMPORT": "1"}
refused = subprocess.run([sys.executable, __file__, "inner", "0"], env=env, capture_output=True, text=True)
report["refused"] = json.loads(refused.stdout)["ppid"]
for sig in (signal.SIGINT, signal.SIGKILL):
    stand_in = subprocess.Popen([sys.executable, __file__, "inner", "wait"], stdout=subprocess.PIPE, text=True)
    inner = json.loads(stand_in.stdout.readline())["pid"]
    time.sleep(0.1)
    stand_in.send_signal(sig)
    code = stand_in.wait(timeout=60)
    for _ in range(500):  # the server reaps the command it killed
        if not os.path.exists(f"/proc/{inner}"):
            break
        time.sleep(0.01)
    report[signal.Signals(sig).name] = [code, os.path.exists(f"/proc/{inner}")]
print(json.dumps(report))
"""


def test_what_a_command_starts_as_python_runs_in_the_server_and_ends_as_a_fresh_one_would(tmp_path, monkeypatch):
    """Its ``sys.executable`` is the stand-in: a script started through it runs in the server (a child of the server,
    not of the command), with its argv and working directory and its exit code back; ``-c``, or a variable the
    server cannot give, starts the real interpreter; the command starts with the signal dispositions a fresh
    interpreter would; a Ctrl-C sent to the stand-in reaches the command, which ends by it, and a kill of the
    stand-in kills the command."""
    monkeypatch.delenv(warm_python.FRESH, raising=False)
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    outer = [sys.executable, str(script), "outer", sys.executable]
    with warm_python.Popen(outer, cwd=tmp_path, stdout=subprocess.PIPE) as outer:
        assert isinstance(outer, warm_python.Process), warm_python.refused
        report = json.loads(outer.stdout.read())
    server = warm_python._server.proc.pid
    assert report["executable"] != sys.executable and os.access(report["executable"], os.X_OK)
    assert report["inner"]["ppid"] == server != report["outer"]
    assert report["inner"]["argv"] == [str(script), "inner", "5"] and report["inner"]["cwd"] == str(tmp_path)
    assert report["inner_code"] == 5
    assert report["dash_c"] == [str(report["outer"]), sys.executable]
    assert report["refused"] == report["outer"], "an environment the server refuses: a fresh interpreter"
    assert {"argv": [str(script), "inner", "0"], "why": "NESTED_AT_IMPORT"} in warm_python._server.refusals()
    for ignored in (False, True):
        through_stand_in, fresh = report[f"signals_{ignored}"]
        assert through_stand_in == fresh, (through_stand_in, fresh)
        assert fresh == ["SIG_IGN" if ignored else "default_int_handler", "SIG_DFL", "SIG_DFL"]
    assert report["SIGINT"] == [-signal.SIGINT, False]
    assert report["SIGKILL"] == [-signal.SIGKILL, False]
