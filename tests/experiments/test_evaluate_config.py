"""experiments/evaluate.py's configuration (arrol_pl.analysis.eval_config): typed defaults, one line naming the bad
key and exit 2 before any model loads, as experiments/run.py does."""

import sys
from pathlib import Path

import pytest
import warm_python
from hydra import compose, initialize_config_dir

from arrol_pl.analysis.eval_config import EvalConfig, load_eval_config
from arrol_pl.train.config.loader import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")


def compose_eval(*overrides: str) -> EvalConfig:
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_eval_config(compose("evaluate", overrides=list(overrides)))


def test_the_preset_is_the_typed_defaults_and_datasets_named_replace_the_runs(head_export: Path):
    cfg = compose_eval(f"checkpoint={head_export}")
    assert cfg == EvalConfig(checkpoint=str(head_export))
    assert cfg.engine.gpu_memory_utilization == 0.8 and cfg.datasets == {}  # none named: the run's own data
    cfg = compose_eval(
        f"checkpoint={head_export}",
        "+datasets.math500.path=/data/math500.jsonl",
        "+datasets.arithmetic.options.max_operands=2",
        "deepconf.mode=tail",
        "engine.dtype=bfloat16",
    )
    assert list(cfg.datasets) == ["math500", "arithmetic"] and cfg.datasets["math500"].path == "/data/math500.jsonl"
    assert cfg.datasets["math500"].split is None and cfg.datasets["arithmetic"].split == "heldout"  # never train
    assert cfg.deepconf.mode == "tail" and cfg.engine.dtype == "bfloat16"


@pytest.mark.parametrize(
    "overrides,message",
    [
        ([], "checkpoint must be set"),
        (["checkpoint=/no/such/dir"], "checkpoint='/no/such/dir' does not exist"),
        (["k=0"], "k must be >= 1"),
        (["temperature=0"], "temperature must be > 0"),
        (["deepconf.mode=median"], "deepconf.mode='median'"),
        (["+datasets.nope.path=x"], "datasets.nope: unknown dataset 'nope'"),
        (["+foo=1"], "foo: no such key"),
        (["engine.dtype=float8"], "engine."),
    ],
)
def test_bad_values_name_their_key(head_export: Path, overrides: list[str], message: str):
    checkpoint = (
        [] if any(o.startswith("checkpoint=") for o in overrides) or overrides == [] else [f"checkpoint={head_export}"]
    )
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        compose_eval(*checkpoint, *overrides)


@pytest.mark.subprocess
def test_an_export_without_its_head_exits_2_in_one_line_and_leaves_nothing(tmp_path: Path):
    (tmp_path / "export").mkdir()
    out = tmp_path / "eval"
    result = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={tmp_path / 'export'}",
            f"hydra.run.dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        result.stderr.strip().splitlines()[-1].startswith("config error: checkpoint=")
        and "quality_head/" in result.stderr
    )
    assert "Traceback" not in result.stderr and not out.exists()
