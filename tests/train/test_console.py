"""A default run's console reads cleanly: each message once (Lightning's own handler beside Hydra's printed every
one twice), no tip or deprecation a user cannot act on, no progress bar for loading or saving local weights. The
same one-step run, with two loggers, checks what a run leaves for the loggers and the hub: the whole config in the
CSV logger's hparams.yaml, the head on the hub's terms and the run's card in export/."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

UNWANTED = ("litlogger", "💡", "LeafSpec", "reduce_op", "Triton", "Loading safetensors checkpoint shards",
            "Loading weights", "Writing model shards")
HYDRA_PREFIX = re.compile(r"^\[[^]]+\]\[[^]]+\]\[[A-Z]+\] - ")
LEVEL_PREFIX = re.compile(r"^(INFO|WARNING|ERROR): ")


@pytest.fixture(scope="module")
def one_step(tmp_path_factory, policy_cache):
    tmp = tmp_path_factory.mktemp("console")
    cmd = [sys.executable, str(ROOT / "experiments" / "run.py"), "trainer.max_steps=1", "model.warm_start.steps=0",
           f"model.cache_dir={policy_cache}", "data.num_heldout=4", "algo.prompts_per_step=4", "algo.group_size=4",
           "trainer.logger=[tensorboard,csv]", f"hydra.run.dir={tmp / 'run'}"]
    out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return tmp / "run", out


def messages(text: str) -> list[str]:
    """Each line's message without Hydra's or Lightning's prefix; progress bars (carriage returns) left out."""
    return [LEVEL_PREFIX.sub("", HYDRA_PREFIX.sub("", line)).strip() for line in text.splitlines()
            if line.strip() and "\r" not in line and "it/s]" not in line]


def test_each_message_prints_once_and_no_notice_a_user_cannot_act_on(one_step):
    _, out = one_step
    console = out.stdout + "\n" + out.stderr
    for text in UNWANTED:
        assert text not in console, text
    logged = [m for m in messages(console) if not m.startswith(("arrol-grpo:", "outputs:")) and "  " not in m[:2]]
    repeated = sorted({m for m in logged if logged.count(m) > 1})
    assert not repeated, repeated
    assert out.stdout.count("`Trainer.fit` stopped: `max_steps=1` reached.") == 1  # (it ends the bar's line)
    assert messages(out.stdout).count("GPU available: False, used: False") == 1
    assert "GPU available" not in out.stderr  # Lightning's own stderr handler is gone


def test_every_logger_gets_the_whole_config(one_step):
    run, _ = one_step
    hparams = yaml.safe_load((run / "csv" / "hparams.yaml").read_text())
    assert hparams["algo"]["group_size"] == 4 and hparams["trainer"]["logger"] == ["tensorboard", "csv"]
    assert hparams["reward"]["function"] == "math_verify" and hparams["model"]["warm_start"]["steps"] == 0
    assert (run / "csv" / "metrics.csv").exists() and list((run / "tb").glob("events.out.tfevents.*"))
    assert yaml.safe_load((run / "tb" / "hparams.yaml").read_text()) == hparams


def test_the_export_holds_the_head_on_the_hubs_terms_and_a_card(one_step):
    import torch

    from arrol_pl.core.quality_head import QualityHead
    from arrol_pl.models.head import CalibratedHead

    export = one_step[0] / "export"
    head = CalibratedHead.from_pretrained(export / "quality_head")
    trained = one_step[0] / "checkpoints" / "last.ckpt"
    state = torch.load(trained, map_location="cpu", weights_only=True)["state_dict"]
    same = QualityHead.from_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")},
                                       head.head.input_kind)
    features = torch.randn(3, head.head.input_dim)
    assert torch.equal(head(features), same(features))  # the head the run trained, as its last checkpoint holds it
    assert len(head.calibrator) > 0 and not list(export.glob("*.pt"))
    card = (export / "README.md").read_text()
    assert "(1 steps," in card
    assert "Held-out accuracy (avg@4" in card and "quality_head/" in card
