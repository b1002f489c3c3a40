"""Rows the engine cannot take: a prompt whose tokens, in the model's prompt format, plus the response budget exceed
the context (``engine.max_model_len``, else the policy's positions) is skipped and counted as a bad row
(``too_long``) once the tokenizer exists, before the engine starts; a run never meets it."""

import json
import logging
import sys
from pathlib import Path

import pytest
import warm_python

from arrol_pl.tasks.problem import Problem, ProblemSet, SkippedRow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from arrol_pl.models import build_tokenizer

    return AutoTokenizer.from_pretrained(build_tokenizer(None, tmp_path_factory.mktemp("tokenizer")))


def test_prompt_tokens_counts_as_the_engine_encodes_and_judges_a_huge_prompt_by_a_prefix(tokenizer):
    from arrol_pl.tasks.rows import PREFIX_SLACK, prompt_tokens

    short = "What is 3 + 4?"
    assert prompt_tokens(tokenizer, short, 100) == len(tokenizer.encode(short, add_special_tokens=False))
    huge = "What is 3 + 4? " * 10_000  # 150 kB, 28 times the prefix that judges it at a room of 100
    exact = len(tokenizer.encode(huge, add_special_tokens=False))
    judged = prompt_tokens(tokenizer, huge, 100)
    assert 100 < judged < exact, "a lower bound past the room, read from a prefix"
    assert prompt_tokens(tokenizer, huge, 10 * exact) == exact  # within reach of the room: the whole text
    assert PREFIX_SLACK > 0


def test_skip_overlong_counts_the_long_row_with_the_bad_ones_and_keeps_the_order(tokenizer, caplog):
    from arrol_pl.tasks.rows import skip_overlong

    problems = [Problem(f"q{i}", f"What is {i} + 1?", str(i + 1)) for i in range(5)]
    problems[2] = Problem("long", "What is " + " + ".join("1" for _ in range(400)) + "?", "400")
    loaded = ProblemSet(
        "jsonl", "sums.jsonl", list(problems), [SkippedRow("sums.jsonl:9", "not JSON", "invalid_json")], rows=6
    )
    rendered = [Problem(p.id, f"<user>{p.prompt}</user>", p.answer) for p in problems]  # a prompt format
    with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
        kept = skip_overlong(loaded, rendered, tokenizer, 64, "prompt + algo.max_response_tokens=16 > 80")
    assert [p.id for p in kept] == ["q0", "q1", "q3", "q4"] and kept[0].prompt.startswith("<user>")
    assert [p.id for p in loaded.problems] == ["q0", "q1", "q3", "q4"]
    assert loaded.report() == {
        "source": "sums.jsonl",
        "rows": 6,
        "problems": 4,
        "skipped": {"invalid_json": 1, "too_long": 1},
    }
    assert (
        "jsonl: skipped 1 of 5 rows whose prompt the engine cannot take (too_long 1; prompt + "
        "algo.max_response_tokens=16 > 80): long: prompt of " in caplog.text
    )
    assert skip_overlong(loaded, kept, tokenizer, 64, "") == kept and len(loaded.skipped) == 2  # nothing more


def test_the_context_is_the_engines_when_set_else_the_policys_positions(tmp_path):
    from arrol_pl.train.config.loader import ConfigError
    from arrol_pl.train.run.build import context_limit, fitting_problems

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert context_limit(None, tmp_path) == (512, "the policy's max_position_embeddings=512")
    assert context_limit(256, tmp_path) == (256, "engine.max_model_len=256")
    (tmp_path / "config.json").write_text(json.dumps({"n_positions": 1024}))
    assert context_limit(None, tmp_path)[0] == 1024
    (tmp_path / "config.json").write_text("{}")
    assert context_limit(None, tmp_path)[0] is None
    with pytest.raises(
        ConfigError,
        match=r"^algo.max_response_tokens=16 leaves no room for a prompt in "
        r"engine.max_model_len=16$",
    ):
        fitting_problems(
            ProblemSet("x", "y", [Problem("a", "b", "c")]), None, None, tmp_path, 16, 16, "algo.max_response_tokens"
        )


def test_evaluation_skips_a_long_row_in_the_middle_of_a_file_as_training_does(tokenizer, tmp_path, caplog):
    """``arrol evaluate``'s problems: before, the engine was asked for a context of the longest prompt, beyond the
    policy's positions. (Through the command, on a trained export: test_run_smoke.py's evaluation.)"""
    from arrol_pl.analysis.eval_config import EvalConfig, EvalDatasetConfig
    from arrol_pl.cli.evaluate import check, evaluated_problems
    from arrol_pl.tasks.prompts import PromptFormat
    from arrol_pl.tasks.registry import load_problems
    from arrol_pl.train.config.loader import ConfigError

    rows = [{"id": f"q{i}", "prompt": f"What is {i} + 3?", "answer": str(i + 3)} for i in range(7)]
    rows[3] = {"id": "long", "prompt": "What is " + " + ".join(str(i % 10) for i in range(2000)) + "?", "answer": "0"}
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    cfg = EvalConfig(checkpoint=str(export), max_tokens=16, datasets={"jsonl": EvalDatasetConfig(path=str(data))})
    loaded = load_problems("jsonl", path=data)
    with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
        kept = evaluated_problems("jsonl", loaded, tokenizer, PromptFormat(), export, cfg)
    assert [p.id for p in kept] == ["q0", "q1", "q2", "q4", "q5", "q6"]
    assert loaded.report() == {"source": str(data), "rows": 7, "problems": 6, "skipped": {"too_long": 1}}
    assert (
        "jsonl: skipped 1 of 7 rows whose prompt the engine cannot take (too_long 1; prompt + max_tokens=16 > "
        "the policy's max_position_embeddings=512): long: prompt of "
    ) in caplog.text
    data.write_text(json.dumps(rows[3]) + "\n")
    with pytest.raises(
        ConfigError,
        match=r"^datasets.jsonl: no problem to evaluate in .*sums.jsonl \(skipped: "
        r"too_long 1\)$",
    ):
        evaluated_problems("jsonl", load_problems("jsonl", path=data), tokenizer, PromptFormat(), export, cfg)
    with pytest.raises(
        ConfigError,
        match=r"^max_tokens=512 leaves no room for a prompt in the policy's "
        r"max_position_embeddings=512$",
    ):  # before any model loads
        check(EvalConfig(checkpoint=str(export), max_tokens=512))


@pytest.mark.slow
@pytest.mark.parametrize(
    "context,named",
    [([], "the policy's max_position_embeddings=512"), (["engine.max_model_len=256"], "engine.max_model_len=256")],
)
def test_a_long_row_in_the_middle_of_a_file_is_skipped_and_counted_and_the_run_completes(tmp_path, context, named):
    """Before, the engine refused the context such a row asks for (a vLLM traceback before step 1), or, with
    ``engine.max_model_len`` set, the run crashed when it drew the row."""
    rows = [{"id": f"q{i}", "prompt": f"What is {i} + 3?", "answer": str(i + 3)} for i in range(9)]
    long_sum = " + ".join(str(i % 10) for i in range(2000))
    rows[4] = {"id": "long", "prompt": f"What is {long_sum}?", "answer": "9000"}
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "run.py"),
            "data=jsonl",
            f"data.path={data}",
            f"data.heldout_path={data}",
            "data.num_heldout=6",
            "trainer.eval_samples=1",
            "model.warm_start.steps=0",
            f"model.cache_dir={tmp_path / 'cache'}",
            "algo.prompts_per_step=4",
            "algo.group_size=2",
            "algo.max_response_tokens=16",
            "engine.detect_length=4",
            "pruning.cold_start_steps=1",
            "trainer.max_steps=3",
            *context,
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    for rows_read in (9, 6):  # the training set, then the held-out one
        assert (
            f"jsonl: skipped 1 of {rows_read} rows whose prompt the engine cannot take (too_long 1; prompt + "
            f"algo.max_response_tokens=16 > {named}): long: prompt of "
        ) in out.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert summary["data_rows"]["train"] == {"source": str(data), "rows": 9, "problems": 8, "skipped": {"too_long": 1}}
    assert summary["data_rows"]["heldout"]["problems"] == 5
    assert summary["data_rows"]["heldout"]["skipped"] == {"too_long": 1}
