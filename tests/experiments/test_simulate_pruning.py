"""experiments/simulate_pruning.py (arrol simulate, arrol_pl/cli/simulate.py): the pruning loop on simulated rollouts,
its configuration typed as every script's (SimulateConfig through the loader): a bad key, type or value is one line
naming it, exit 2, before anything runs."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from hydra import compose, initialize_config_dir

from arrol_pl.cli import simulate as script
from arrol_pl.train.config.loader import ConfigError, load_typed
from arrol_pl.train.config.sections import AlgoConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "simulate_pruning.py"


def run(*overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    return warm_python.run(
        [sys.executable, str(SCRIPT), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def compose_simulate(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return load_typed(compose("simulate", overrides=list(overrides)), script.SimulateConfig, ("pruning",))


@pytest.mark.subprocess
def test_selfcheck_writes_summary(tmp_path):
    out = run(
        "selfcheck.steps=6",
        "selfcheck.num_groups=8",
        "pruning.cold_start_steps=2",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["policies"]) == {
        "arrol/anchored",
        "arrol/global",
        "arrol/group",
        "arrol/spread",
        "random",
        "none",
    }
    for row in summary["policies"].values():
        assert all(math.isfinite(v) for v in row.values())
        assert 0 < row["keep_ratio"] <= 1
    assert summary["policies"]["none"]["keep_ratio"] == 1.0
    assert "arrol/group" in out.stdout
    assert summary["config"]["selfcheck"]["steps"] == 6 and summary["config"]["pruning"]["cold_start_steps"] == 2


@pytest.mark.subprocess
def test_the_oracle_task_takes_pass_rate_and_auc(tmp_path):
    """``selfcheck.pass_rate`` and ``selfcheck.auc`` simulate a task of that pass rate scored by an oracle of that AUC:
    with a good scorer on a hard task the default rule keeps more balanced groups than random pruning and Eq. 2."""
    out = run(
        "selfcheck.pass_rate=0.2",
        "selfcheck.auc=0.95",
        "selfcheck.steps=20",
        "selfcheck.num_groups=64",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "pass rate 0.2, scorer AUC 0.95" in out.stdout
    policies = json.loads((tmp_path / "run" / "summary.json").read_text())["policies"]
    assert policies["arrol/anchored"]["kept_balance"] > policies["random"]["kept_balance"]
    assert policies["arrol/anchored"]["kept_balance"] > policies["arrol/global"]["kept_balance"]
    assert policies["random"]["kept_positive_ratio"] > policies["arrol/global"]["kept_positive_ratio"]


def test_the_preset_is_the_typed_defaults():
    cfg = compose_simulate()
    assert cfg == script.SimulateConfig(pruning=dataclasses.replace(cfg.pruning))
    assert cfg.selfcheck == script.SelfCheck() and cfg.selfcheck.group_size == AlgoConfig.group_size
    assert compose_simulate("pruning=random", "selfcheck.seed=3").pruning.policy == "random"


@pytest.mark.parametrize(
    "override,message",
    [
        ("selfcheck.steps=0", "selfcheck.steps must be >= 1, got 0"),
        ("selfcheck.num_groups=0", "selfcheck.num_groups must be >= 1"),
        ("selfcheck.group_size=1", "selfcheck.group_size must be >= 2"),
        ("selfcheck.seed=-1", "selfcheck.seed must be in [0, 2**32)"),
        ("selfcheck.auc=0.9", "selfcheck.auc needs selfcheck.pass_rate too"),
        ("selfcheck.pass_rate=0.2", "selfcheck.pass_rate needs selfcheck.auc too"),
        ("selfcheck.pass_rate=1.5 selfcheck.auc=0.9", "selfcheck.pass_rate must be in (0, 1), got 1.5"),
        ("selfcheck.pass_rate=0.5 selfcheck.auc=0.4", "selfcheck.auc must be in [0.5, 1], got 0.4"),
        ("pruning.keep_ratio=0", "pruning.keep_ratio (κ) must be in (0, 1]"),
        ("pruning.screen.stages=both", "pruning.screen.stages='both'"),
        ("+selfcheck.foo=1", "selfcheck.foo: no such key"),
    ],
)
def test_a_bad_value_is_named(override, message):
    with pytest.raises(ConfigError) as err:
        compose_simulate(*override.split())
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    "override,message",
    [
        ("pruning.keep_ratio=1.5", "config error: pruning.keep_ratio (κ) must be in (0, 1], got 1.5"),
        ("+pruning.kappa=0.5", "config error: pruning.kappa: no such key; pruning takes policy, keep_ratio, "),
        (
            "+selfcheck.step=1",
            "config error: selfcheck.step: no such key (did you mean selfcheck.steps?); selfcheck takes "
            "steps, num_groups, group_size, seed, pass_rate, auc, concentration (SelfCheck in "
            "arrol_pl/cli/simulate.py)",
        ),
        (
            "selfcheck.steps=many",
            "config error: selfcheck.steps=many: Value 'many' of type 'str' could not be converted to "
            "Integer; selfcheck.steps takes int",
        ),
    ],
)
def test_a_bad_key_or_value_exits_2_in_one_line_and_leaves_nothing(tmp_path, command_main, override, message):
    """Refused before Hydra starts the job: the script's ``main`` (``arrol simulate``) in this process, on the
    arguments a user types (``command_main`` in tests/conftest.py)."""
    out = command_main(tmp_path, "simulate", override, f"hydra.run.dir={tmp_path}/bad")
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith(message)
    assert not (tmp_path / "bad").exists()
