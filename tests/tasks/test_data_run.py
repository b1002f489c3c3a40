"""The tiny policy on a public dataset's own worked solutions, and a whole run on GSM8K-shaped files whose
held-out file has broken lines: the run goes on and ``summary.json`` counts what was skipped, per reason."""

import json
import sys
from pathlib import Path

import pytest
import warm_python

from arrol_pl.train.config.model import ModelConfig, TinyModelConfig, WarmStartConfig
from arrol_pl.train.config.sections import DataConfig

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "datasets"
MAIN = FIXTURES / "gsm8k_hub" / "main"


@pytest.mark.slow  # builds and saves a warm-started policy: outside the quick tier
def test_tiny_policy_warm_starts_on_the_datasets_solutions(tmp_path):
    from transformers import AutoTokenizer

    from arrol_pl.tasks.registry import load_problems
    from arrol_pl.train.run.warmstart import prepare_tiny_policy

    model = ModelConfig(cache_dir=str(tmp_path), warm_start=WarmStartConfig(steps=2, batch_size=2, check_every=2))
    policy = prepare_tiny_policy(model, DataConfig(name="gsm8k", path=str(MAIN)), max_new_tokens=8)
    report = json.loads((policy / "warm_start.json").read_text())
    assert report["steps"] == 2 and len(report["history"]) == 1
    tokenizer = AutoTokenizer.from_pretrained(policy)
    natalia = load_problems("gsm8k", path=MAIN)[0]
    text = natalia.prompt + "\n" + natalia.solution
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert prepare_tiny_policy(model, DataConfig(name="gsm8k", path=str(MAIN)), max_new_tokens=8) == policy  # cached

    short = ModelConfig(
        cache_dir=str(tmp_path),
        tiny=TinyModelConfig(max_position_embeddings=32),
        warm_start=WarmStartConfig(steps=2, batch_size=2, check_every=2),
    )
    with pytest.raises(ValueError, match="model.tiny.max_position_embeddings=32"):
        prepare_tiny_policy(short, DataConfig(name="gsm8k", path=str(MAIN)), max_new_tokens=8)


@pytest.mark.slow
def test_a_run_on_gsm8k_files_counts_skipped_rows_in_its_summary(tmp_path):
    """The only run on a dataset adapter's files (GSM8K-shaped, with broken rows) rather than the built-in task,
    warm-started on the dataset's own solutions."""
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "data=gsm8k",
        f"data.path={MAIN}",
        "data.heldout_name=jsonl",
        f"data.heldout_path={FIXTURES / 'broken_lines.jsonl'}",
        "data.num_heldout=2",
        "model.warm_start.steps=1",
        "model.warm_start.check_every=1",
        "model.warm_start.batch_size=2",
        f"model.cache_dir={tmp_path / 'cache'}",
        "algo.prompts_per_step=2",
        "algo.group_size=2",
        "algo.max_response_tokens=16",
        "engine.detect_length=4",
        "trainer.max_steps=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    out = warm_python.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["data_rows"]["train"] == {"source": str(MAIN), "rows": 2, "problems": 2, "skipped": {}}
    heldout = summary["data_rows"]["heldout"]
    assert heldout["rows"] == 6 and heldout["problems"] == 2
    assert heldout["skipped"] == {"invalid_json": 1, "missing_answer": 1, "not_an_object": 1, "not_utf8": 1}
    assert summary["heldout_problems"] == 2
    assert Path(summary["policy_dir"]).name.startswith("warm-")  # warm-started on GSM8K's own solutions
