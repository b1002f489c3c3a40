"""A run's console reads cleanly: each message once (Lightning's own handler beside Hydra's printed every one twice;
the training file read as prompts, tokenizer corpus and held-out set reported its load three times), no tip,
accelerator line, NUMA notice or deprecation a user cannot act on, no progress bar for loading or saving local
weights, and a summary that says a two-step run never left its cold start. Its console goes to pipes, as to a file or
a CI log: a few plain lines, no bar redrawn, none written twice (Lightning's ``Training:`` and ``Epoch 0:`` none at
all). The same two-step run on a JSONL file, with two loggers, checks what a run leaves for the loggers and the hub:
the whole config in the CSV logger's hparams.yaml, the head on the hub's terms and the run's card in export/, and
integer steps in its history."""

import json
import re
import sys
from pathlib import Path

import pytest
import warm_python
import yaml

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow

UNWANTED = (
    "litlogger",
    "💡",
    "LeafSpec",
    "reduce_op",
    "Triton",
    "Loading safetensors checkpoint shards",
    "Loading weights",
    "Writing model shards",
    "GPU available",
    "TPU available",
    "`Trainer.fit` stopped",
    "NUMA binding",
    "Automatic Mixed Precision",
    "fontManager",
    "Tensor Cores",
    "LOCAL_RANK",
    "Restoring states",
    "Training:",
    "Epoch 0:",
)
BAR_LINE = re.compile(r"^(?P<desc>[^:\[]+): (?P<n>\d+)/(?P<total>\d+) \[")
"""A progress bar's plain line: ``steps: 2/2 [00:09<00:00, 4.59s/it, acc=0.219, keep=1.000]``."""
MAX_LINES = 20
HYDRA_PREFIX = re.compile(r"^\[[^]]+\]\[[^]]+\]\[[A-Z]+\] - ")
LEVEL_PREFIX = re.compile(r"^(INFO|WARNING|ERROR): ")


@pytest.fixture(scope="module")
def one_step(tmp_path_factory, policy_cache):
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "sums.jsonl").write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": f"Add {i} and {i + 3}.", "answer": str(2 * i + 3)}) + "\n"
            for i in range(20)
        )
    )
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "trainer.max_steps=2",
        "model.warm_start.steps=0",
        "data=jsonl",
        "data.path=sums.jsonl",
        "data.heldout_path=sums.jsonl",
        "algo.max_response_tokens=16",
        "engine.detect_length=4",
        f"model.cache_dir={policy_cache}",
        "data.num_heldout=4",
        "algo.prompts_per_step=4",
        "algo.group_size=4",
        "trainer.logger=[tensorboard,csv]",
        f"hydra.run.dir={tmp / 'run'}",
    ]
    out = warm_python.run(cmd, cwd=tmp, capture_output=True, timeout=600)
    # decoded here: text mode would turn the bars' carriage returns into line ends
    out.stdout, out.stderr = out.stdout.decode(), out.stderr.decode()
    assert out.returncode == 0, out.stderr[-4000:]
    return tmp / "run", out


def shown(text: str) -> list[str]:
    """The lines a terminal shows of ``text``: a carriage return (a progress bar's redraw) overwrites its line."""
    return [line.split("\r")[-1] for line in text.split("\n")]


def messages(text: str) -> list[str]:
    """Each shown line's message without Hydra's or Lightning's prefix."""
    return [LEVEL_PREFIX.sub("", HYDRA_PREFIX.sub("", line)).strip() for line in shown(text) if line.strip()]


def test_each_message_prints_once_and_no_notice_a_user_cannot_act_on(one_step):
    _, out = one_step
    console = out.stdout + "\n" + out.stderr
    for text in UNWANTED:
        assert text not in console, text
    logged = [m for m in messages(console) if not m.startswith(("arrol-grpo:", "outputs:")) and "  " not in m[:2]]
    repeated = sorted({m for m in logged if logged.count(m) > 1})
    assert not repeated, repeated
    assert messages(out.stdout).count("jsonl: 20 problems from sums.jsonl") == 1  # prompts, corpus, held-out set


def test_off_a_terminal_the_console_is_a_few_plain_lines_none_written_twice(one_step):
    _, out = one_step
    console = out.stdout + out.stderr
    assert "\r" not in console and "\x1b[" not in console, console  # no bar redrawn, no cursor moved
    lines = [line for line in console.split("\n") if line.strip()]
    assert len(lines) <= MAX_LINES, console
    assert len(set(lines)) == len(lines), console
    bars = [(m["desc"], m["n"]) for m in map(BAR_LINE.match, lines) if m]
    assert len(set(bars)) == len(bars), bars  # no bar's state written twice
    assert [n for desc, n in bars if desc == "steps"] == ["1", "2"], bars  # a line per step here, its last once


def test_a_run_that_never_left_its_cold_start_says_so(one_step):
    run, out = one_step
    assert "no steps after the cold start (2 of its 10 steps ran)" in out.stdout
    assert "after cold start" not in out.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["keep_ratio_mean"] is None and summary["seconds_per_step"] is None
    assert summary["train_accuracy_first"] is not None  # the figures over every step stay


def test_the_history_counts_steps_in_integers(one_step):
    run, _ = one_step
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1] and all(type(row["step"]) is int for row in rows)


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
    same = QualityHead.from_state_dict(
        {k[len("head.") :]: v for k, v in state.items() if k.startswith("head.")}, head.head.input_kind
    )
    features = torch.randn(3, head.head.input_dim)
    assert torch.equal(head(features), same(features))  # the head the run trained, as its last checkpoint holds it
    assert len(head.calibrator) > 0 and not list(export.glob("*.pt"))
    card = (export / "README.md").read_text()
    assert "(2 steps," in card
    assert "Held-out accuracy (avg@4" in card and "quality_head/" in card
