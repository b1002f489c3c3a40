"""experiments/head_quality.py's configuration (arrol_pl.analysis.head_probe.config): typed defaults, the trainer's
data presets, one line naming the bad key and exit 2 before any model loads, as experiments/run.py does."""

import dataclasses
import sys
from pathlib import Path

import pytest
import warm_python
from hydra import compose, initialize_config_dir

from arrol_pl.analysis.head_probe.config import ProbeConfig, load_probe_config
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import DataConfig

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    """A directory that passes for a model directory (the config checks only its config.json)."""
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text("{}")
    return tmp_path / "policy"


def compose_probe(*overrides: str) -> ProbeConfig:
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_probe_config(compose("probe", overrides=list(overrides)))


def test_the_preset_is_the_typed_defaults_and_takes_the_trainers_data_presets(policy: Path):
    cfg = compose_probe(f"policy={policy}")
    # the preset holds no values; data.options come filled from the task's own typed options (data_options)
    # the reward is filled in from what trained the policy (a bare model directory: math-verify)
    from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig

    expected = ProbeConfig(policy=str(policy), reward=AsTrainedRewardConfig(function="math_verify"))
    assert dataclasses.replace(cfg, data=DataConfig(num_heldout=256)) == expected
    assert cfg.lengths == [3, 6, 12, 24] and cfg.data.num_heldout == 256 and cfg.head.steps == 300
    cfg = compose_probe(
        f"policy={policy}",
        "data=arithmetic_fewshot",
        "max_tokens=32",
        "fractions=[1/8,1/4,3/8,1/2]",
        "head.hidden_dim=64",
        "seed=2",
    )
    assert cfg.lengths == [4, 8, 12, 16] and cfg.fraction_values == [0.125, 0.25, 0.375, 0.5]
    assert cfg.data.options["operators"] == "+-*" and cfg.data.prompt_format().stop == ("\n",)
    assert (cfg.settings.hidden_dim, cfg.settings.seed, cfg.settings.training.steps) == (64, 2, 300)


@pytest.mark.parametrize(
    "override,message",
    [
        ("policy=/nonexistent", "policy='/nonexistent': not a transformers model directory"),
        ("fractions=[1/100]", "fractions: fraction 0.01 of max_tokens=48 gives L=0"),
        ("fractions=[half]", "fractions: 'half' is not a fraction"),
        ("features=[last,hidden]", "features=['last', 'hidden']: choose one or more of"),
        ("head.steps=0", "head.steps must be >= 1"),
        ("test_fraction=1.5", "test_fraction must be in (0, 1)"),
        ("data.num_heldout=1", "data.num_heldout=1: the probe splits by problem"),
    ],
)
def test_a_bad_value_is_named(policy: Path, override: str, message: str):
    args = [f"policy={policy}", override] if not override.startswith("policy=") else [override]
    with pytest.raises(ConfigError) as err:
        compose_probe(*args)
    assert message in str(err.value)


@pytest.mark.subprocess
def test_the_script_fails_in_one_line_and_leaves_no_directory(tmp_path: Path):
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "head_quality.py"),
            "policy=/nonexistent",
            f"hydra.run.dir={tmp_path / 'probe'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config error: policy='/nonexistent': not a transformers model directory" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "probe").exists()
