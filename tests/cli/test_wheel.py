"""The wheel, installed: built from a copy of the checkout, installed with ``pip --no-deps`` into a fresh virtual
environment that reuses this environment's packages (a ``.pth`` file, nothing downloaded), then run from a directory
outside the checkout: ``arrol train`` for one step of the default experiment (the unwarmed tiny policy) and
``python -m arrol_pl train --help``, each reading the presets the wheel ships (``pkg://arrol_pl.conf``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "arrol_pl", "conf")
"""What the build reads: a copy of these keeps the build's files (build/, *.egg-info) out of the checkout."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The ``bin/`` of a fresh virtual environment holding the wheel and, through a .pth file, this environment's
    packages (with ``--ignore-installed``, pip leaves the checkout's own install there as it is)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    wheel, = (tmp / "dist").glob("arrol_pl-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "reuse_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=300, env=outside_env())
    return env / "bin"


def outside_env() -> dict[str, str]:
    """This environment without a PYTHONPATH that would find the checkout's package."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_installed_command_trains_from_anywhere_on_the_packaged_presets(installed, tmp_path, policy_cache):
    where = subprocess.run([str(installed / "python"), "-c", "import arrol_pl; print(arrol_pl.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, env=outside_env(), check=True)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [str(installed / "arrol"), "train", "trainer.max_steps=1", "model.warm_start.steps=0",
         f"model.cache_dir={policy_cache}", "data.num_heldout=0", "algo.prompts_per_step=4", "algo.group_size=4",
         "pruning.cold_start_steps=1", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=outside_env())
    assert out.returncode == 0, out.stderr[-4000:]
    assert (run_dir / "summary.json").is_file() and len((run_dir / "history.jsonl").read_text().splitlines()) == 1
    sources = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["runtime"]["config_sources"]
    main = next(s for s in sources if s["provider"] == "main")
    assert (main["schema"], main["path"]) == ("pkg", "arrol_pl.conf"), sources

    help_out = subprocess.run([str(installed / "python"), "-m", "arrol_pl", "train", "--help"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env=outside_env())
    assert help_out.returncode == 0, help_out.stderr[-3000:]
    assert help_out.stdout.startswith("usage: python -m arrol_pl train ")
    presets = Path(where.stdout.strip()).parent / "conf"  # the installed package's, a path the user can open
    assert f"Presets (in {presets}, the defaults in config.yaml there)" in " ".join(help_out.stdout.split())
    assert (presets / "config.yaml").is_file() and "model=tiny (default)" in help_out.stdout
    assert "experiments/" not in help_out.stdout.split("Presets (")[0]  # the opening names no checkout script
    commands = subprocess.run([str(installed / "python"), "-m", "arrol_pl", "--help"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=outside_env())
    assert commands.returncode == 0 and "\n  train " in commands.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
