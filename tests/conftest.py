"""Test-session settings: never reach a model or dataset hub (a hub name would stall ~23 s first); the session's
tiny Qwen3 policies, built once for the model and engine tests; one model cache for every test that runs the
default policy through a script, so its warm start (about a minute) is built once a session (also the default
cache, ``$ARROL_CACHE``: no test writes to the user's); how the tests are shared among pytest-xdist workers."""

import atexit
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DONT_WRITE_BYTECODE = sys.dont_write_bytecode
"""The environment's setting (``PYTHONDONTWRITEBYTECODE``), which the tests run with. Collection writes bytecode
whatever it says (:func:`pytest_collection_finish` puts it back): pytest keeps each test module with its asserts
rewritten, about 4 s of every later collection on every worker, and the package modules the tests import are
compiled once for the scripts the tests start (a hundred of them, each compiling them again otherwise). The caches
are ``__pycache__`` directories, which git ignores."""
sys.dont_write_bytecode = False

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per worker (and per process it starts): two workers on two cores, none oversubscribed
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Tokenizer and two tiny Qwen3 policies (seeds 0 and 1: the second is the 'updated policy'), and the context
    length they are built for."""
    from arrol_pl.models import build_tiny_model, build_tokenizer

    root = tmp_path_factory.mktemp("tiny-models")
    tok = build_tokenizer(None, root)
    max_model_len = 512
    return {
        "tokenizer": tok,
        "policy": build_tiny_model(tok, root, max_position_embeddings=max_model_len, seed=0),
        "updated": build_tiny_model(tok, root, max_position_embeddings=max_model_len, seed=1),
        "max_model_len": max_model_len,
    }


@pytest.fixture(scope="session")
def _model_cache(tmp_path_factory):
    """The session's model cache directory, one for every worker."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("policy-cache")
    shared = tmp_path_factory.getbasetemp().parent / "policy-cache"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def policy_cache(_model_cache):
    """``model.cache_dir`` of the tests that run ``experiments/run.py`` (or scripts that train) with the default tiny
    policy: its warm-started build is made by the first of them and found by the others, on every worker (one that
    needs it while another builds it waits for that build). A test that asks for it is one that may
    build the warm start (:data:`WARM_START_SECONDS`); the session's model cache is the same directory."""
    return _model_cache


@pytest.fixture(scope="session", autouse=True)
def _session_model_cache(_model_cache):
    """The tests' model cache (``$ARROL_CACHE``, inherited by the scripts they start): a run given no
    ``model.cache_dir`` builds into the session's policy cache, never into the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARROL_CACHE", str(_model_cache))
        yield _model_cache


@pytest.fixture
def command_main(capfd, monkeypatch):
    """``call(cwd, command, *args)``: the ``arrol`` command's ``main`` (``python -m arrol_pl``) on a user's arguments,
    in this process and from ``cwd``, as a ``CompletedProcess``: for the refusals found before Hydra starts a job
    (one found inside a job would leave Hydra's logging set up in the test process; those go through a script)."""
    from arrol_pl.cli.main import main

    def call(cwd: Path, *args: str) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        code = main(list(args), prog="python -m arrol_pl")
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call


QUICK_EXCLUDES = ("slow", "engine", "subprocess")
"""Markers the quick tier (``--quick``, ``make test-quick``) leaves out; a test that uses the session engine is
``engine`` whether or not it says so."""

DURATIONS = Path(__file__).with_name("durations.json")
"""Each xdist group's measured seconds (``make test-durations`` rewrites it), in the whole suite (``suite``) and in the
quick tier (``quick``: its tests alone, which is not the group's share of the suite): the longest groups are handed
out first."""

WARM_START_SECONDS = 90.0
"""About how long the first run that needs the warm-started tiny policy takes to build it (the warm start, once a
session, with a worker busy beside it): groups that ask for ``policy_cache`` start one at a time until then, the
others' workers running groups that need no warm start, so that no worker sits waiting for it (one that needs it
while it is built waits for that build: the cache's lock, arrol_pl.models.cache.build_lock)."""


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="the unit tier: no engine, no subprocess, nothing marked slow (under a minute on 2 cores)",
    )
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each group's seconds to {DURATIONS.name} (the order the groups are handed out in)",
    )


def uses_engine(item) -> bool:
    return "engine" in getattr(item, "fixturenames", ())


def uses_warm_start(item) -> bool:
    return "policy_cache" in getattr(item, "fixturenames", ())


def warm_start_once(order: list[str], seconds: dict[str, float], warm: set[str], workers: int) -> list[str]:
    """``order`` (the groups, longest first) with the first group that needs the warm start followed by the
    longest groups that do not, :data:`WARM_START_SECONDS` of them for each other worker, before any other group
    that needs it: the workers that take those build nothing while the first group builds the warm start."""
    first = next((i for i, group in enumerate(order) if group in warm), None)
    if first is None or workers < 2:
        return order
    lead, total = [], 0.0
    for group in order[first + 1 :]:
        if total >= WARM_START_SECONDS * (workers - 1):
            break
        if group not in warm:
            lead.append(group)
            total += seconds[group]
    return order[: first + 1] + lead + [group for group in order[first + 1 :] if group not in lead]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``--quick``: only the unit tier (:data:`QUICK_EXCLUDES`). With several workers (``pytest -n 2 --dist
    loadgroup``, as ``make test`` runs): every test of the session's in-process engine (the ``engine`` fixture of
    tests/engine/conftest.py) goes to one worker, so one engine starts per run, and the other tests go with their
    file, so a file's module-scoped runs are made once.

    The groups are handed out in the order of the items (``make test`` passes ``--no-loadscope-reorder``; xdist
    would otherwise put the groups with the most tests first, which leaves a file holding one long end-to-end test
    for last, on one worker while the other idles). So the groups are sorted longest first, by their seconds in
    tests/durations.json (the quick tier by its own tests' seconds); a group it does not know yet goes by its
    markers, as long as the longest group if it uses the engine or has a test marked slow, else as the quickest.
    Within a group, collection order stays. The groups that ask for ``policy_cache`` start one at a time
    (:func:`warm_start_once`): the warm start is built once, not on every worker at the session's start.

    First of the hooks: pytest-xdist's worker reads the ``xdist_group`` markers in its own hook and, without them,
    hands out every test alone (a file's module fixtures then run again on the other worker)."""
    quick = [not uses_engine(item) and not any(item.get_closest_marker(m) for m in QUICK_EXCLUDES) for item in items]
    for item, q in zip(items, quick):
        item.user_properties.append(("quick", q))
    tier = "quick" if config.getoption("--quick") else "suite"
    if tier == "quick":
        config.hook.pytest_deselected(items=[item for item, q in zip(items, quick) if not q])
        items[:] = [item for item, q in zip(items, quick) if q]
    known = json.loads(DURATIONS.read_text()).get(tier, {}) if DURATIONS.is_file() else {}
    longest = max(known.values(), default=1.0)
    group_of, seconds, warm = {}, {}, set()
    for item in items:
        group = group_of[item.nodeid] = "engine" if uses_engine(item) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        item.user_properties.append(("xdist_group", group))
        guess = longest if group == "engine" or item.get_closest_marker("slow") else 0.0
        seconds[group] = known.get(group, max(seconds.get(group, 0.0), guess))
        if uses_warm_start(item):
            warm.add(group)
    order = sorted(seconds, key=lambda group: -seconds[group])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))  # set on each worker; none without xdist
    rank = {group: i for i, group in enumerate(warm_start_once(order, seconds, warm, workers))}
    items.sort(key=lambda item: rank[group_of[item.nodeid]])  # a stable sort: within a group, collection order


def pytest_collection_finish(session):
    """The tests run with the environment's bytecode setting (:data:`DONT_WRITE_BYTECODE`: a module a test imports
    from its own directory leaves no ``__pycache__`` there when the environment says so).

    What collection left alive (torch, transformers, Hydra, the collected tests: half a million objects that live as
    long as the session) is frozen out of the garbage collector's reach (:func:`gc.freeze`): a full collection walks
    only what the tests made since, the interpreter's own as the heap grows and the five pytest makes as a worker
    ends (about 1.5 s of each worker's end before). They are unfrozen as the interpreter exits, for its last
    collection (a library that counts its objects at exit would otherwise report them leaked).

    On an xdist worker with ``--dist loadgroup``, refuse to run when the groups did not reach the test ids: xdist
    3.8 writes them where pytest 8 keeps a test's id and pytest 9 does not look (requirements pin pytest 8), and
    without them every test is handed out alone, so the engine starts on both workers and module-scoped runs twice."""
    sys.dont_write_bytecode = DONT_WRITE_BYTECODE
    gc.freeze()
    atexit.register(gc.unfreeze)
    config = session.config
    if getattr(config.option, "loadgroup", False) and session.items and "@" not in session.items[0].nodeid:
        raise pytest.UsageError(
            f"--dist loadgroup: the xdist groups are not in the test ids (pytest "
            f"{pytest.__version__}); pin pytest 8 as requirements/cpu.txt does"
        )


@pytest.fixture(autouse=True)
def _no_process_in_the_quick_tier(request, monkeypatch):
    """In the quick tier a test that starts a process fails, naming the marker it needs: the tier stays one that
    answers within an edit. The lint (``@pytest.mark.lint``) runs ruff, a native binary that answers in under a
    second, and stays in the tier."""
    if request.config.getoption("--quick") and request.node.get_closest_marker("lint") is None:

        def refuse(*args, **kwargs):
            command = args[1] if len(args) > 1 else kwargs.get("args")
            raise RuntimeError(
                f"{request.node.nodeid} starts a process ({command}): mark it @pytest.mark.subprocess "
                "(or slow), which the quick tier leaves out"
            )

        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


_group_seconds: dict[str, dict[str, float]] = {"suite": {}, "quick": {}}


def pytest_runtest_logreport(report):
    """Add up each group's seconds (its tests' setup, call and teardown) for ``--store-durations``: in the suite, and
    of its tests the quick tier runs."""
    properties = dict(report.user_properties)
    group = properties.get("xdist_group")
    if group is None:
        return
    for tier in ("suite", "quick") if properties.get("quick") else ("suite",):
        _group_seconds[tier][group] = _group_seconds[tier].get(group, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """``--store-durations``, in the process that saw every report (the controller with xdist): write
    tests/durations.json, longest group first, after a run of the whole suite that passed."""
    config = session.config
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):
        whole = (
            config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not config.option.keyword
            and not config.option.markexpr
            and not config.getoption("--quick")
        )
        if exitstatus != 0 or not whole:
            print(f"\n{DURATIONS.name} not written: --store-durations needs a whole suite that passed")
            return
        ordered = {
            tier: dict(sorted(((g, round(t, 1)) for g, t in groups.items()), key=lambda kv: -kv[1]))
            for tier, groups in _group_seconds.items()
        }
        DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")
        suite, quick = ordered["suite"], ordered["quick"]
        print(
            f"\n{DURATIONS.name}: {len(suite)} groups, {sum(suite.values()):.0f} s; "
            f"the quick tier's {sum(quick.values()):.0f} s"
        )


@pytest.fixture
def head_export(tmp_path: Path) -> Path:
    """A directory that passes for a run's export/ to the evaluation's config (which checks only that its head folder
    exists)."""
    (tmp_path / "export" / "quality_head").mkdir(parents=True)
    (tmp_path / "export" / "quality_head" / "config.json").write_text("{}")
    return tmp_path / "export"
