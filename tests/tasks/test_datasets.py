"""Each adapter loads its fixture (the public dataset's field shapes) offline, skips and reports bad
rows by id, and fails at once with one clear error when offline without a local copy."""

import logging
import time
from pathlib import Path

import pytest

from arrol_pl.tasks.problem import DatasetUnavailableError, Problem
from arrol_pl.tasks.prompts import MATH_PROMPT_TEMPLATE, format_prompt, render_prompt
from arrol_pl.tasks.registry import ADAPTERS, EVAL_SETS, available, load_problems

FIXTURES = Path(__file__).parents[1] / "fixtures" / "datasets"
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

# name → (fixture, kwargs, expected (id, answer) pairs, expected skipped ids)
CASES = {
    "dapo_math": (
        "dapo_math.parquet",
        {},
        [("a1f0c2e4-0001", "28"), ("a1f0c2e4-0002", "9"), ("a1f0c2e4-0006", "56")],
        ["a1f0c2e4-0004", "a1f0c2e4-0005"],
    ),
    "math500": (
        "math500.jsonl",
        {},
        [
            ("test/precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)"),
            ("test/prealgebra/1.json", "12"),
            ("test/prealgebra/2.json", "\\frac{8}{21}"),
        ],
        ["test/algebra/3.json", "test/algebra/4.json", "test/algebra/5.json"],
    ),
    "minerva": ("minerva.jsonl", {}, [("minerva-0", "10"), ("minerva-1", "500")], ["minerva.jsonl:3"]),
    "olympiadbench": ("olympiadbench.json", {}, [("1606", "8"), ("1607", "-2, 2")], ["1608"]),
    "amc23": ("amc23.parquet", {}, [("0", "24"), ("1", "8")], ["2"]),
    "aime24": ("aime24", {}, [("60", "024"), ("61", "10")], []),
    "aime25": ("aime25.jsonl", {}, [("0", "70"), ("1", "15")], ["2"]),
    "jsonl": (
        "generic.jsonl",
        {"prompt_field": "q", "answer_field": "meta.gold"},
        [("jsonl-0", "27"), ("jsonl-1", "\\frac{3}{4}")],
        ["generic.jsonl:3"],  # no id field: reported by file and line
    ),
    "gsm8k": (
        "gsm8k.jsonl",
        {},
        [("gsm8k-0", "18"), ("gsm8k-1", "3"), ("gsm8k-2", "1250"), ("gsm8k-4", "41")],  # "#### 1,250" → 1250
        ["gsm8k.jsonl:4"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_adapter_loads_its_fixture_offline(name, caplog, monkeypatch):
    # a run earlier in this process may have left its once-per-run filter on the loads' logger (quiet_console)
    monkeypatch.setattr(logging.getLogger("arrol_pl.tasks.rows"), "filters", [])
    fixture, kwargs, expected, skipped = CASES[name]
    problems = load_problems(name, path=FIXTURES / fixture, **kwargs)
    assert [(p.id, p.answer) for p in problems] == expected
    assert [s.id for s in problems.skipped] == skipped
    for p in problems:
        assert isinstance(p, Problem)
        assert p.prompt.endswith(INSTRUCTION)
        assert p.prompt[: -len(INSTRUCTION)].strip()
    if skipped:
        assert f"skipped {len(skipped)} bad row{'' if len(skipped) == 1 else 's'} of" in caplog.text
        assert all(s in caplog.text for s in skipped)


def test_every_dataset_has_a_fixture():
    assert set(CASES) | {"arithmetic"} == set(ADAPTERS)
    assert set(EVAL_SETS) <= set(available())


def test_dapo_instruction_is_replaced_and_repeats_dropped():
    problems = load_problems("dapo_math", path=FIXTURES / "dapo_math.parquet")
    first = problems[0].prompt
    assert first == format_prompt("Find the sum of all positive divisors of $12$.")
    assert "Answer:" not in first
    assert len({p.prompt for p in problems}) == len(problems)


def test_skip_reasons_name_the_problem():
    reasons = {s.id: s.reason for s in load_problems("math500", path=FIXTURES / "math500.jsonl").skipped}
    assert "missing answer" in reasons["test/algebra/3.json"]
    assert "empty prompt" in reasons["test/algebra/4.json"]
    reasons = {s.id: s.reason for s in load_problems("aime25", path=FIXTURES / "aime25.jsonl").skipped}
    assert "list" in reasons["2"]
    reasons = {s.id: s.reason for s in load_problems("amc23", path=FIXTURES / "amc23.parquet").skipped}
    assert "nan" in reasons["2"]


def test_minerva_gold_from_a_boxed_solution():
    problems = load_problems("minerva", path=FIXTURES / "minerva_solutions.jsonl")
    assert [(p.id, p.answer) for p in problems] == [("0", "1024")]
    assert [s.id for s in problems.skipped] == ["1"]


@pytest.mark.parametrize("name", sorted(set(ADAPTERS) - {"arithmetic", "jsonl"}))
def test_offline_without_a_path_fails_fast_with_one_clear_error(name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as info:
        load_problems(name)
    assert time.monotonic() - t0 < 1.0
    message = str(info.value)
    assert "offline" in message and "data.path=" in message
    module = __import__(ADAPTERS[name], fromlist=["SPEC"])
    assert module.SPEC.hub_id in message  # says what to download


def test_jsonl_without_path_or_hub_id_says_so():
    with pytest.raises(DatasetUnavailableError, match="data.path="):
        load_problems("jsonl")


def test_bad_paths_fail_clearly(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_problems("math500", path=tmp_path / "missing.jsonl")
    (tmp_path / "data.csv").write_text("problem,answer\n1+1,2\n")
    with pytest.raises(DatasetUnavailableError, match="json, .jsonl or .parquet"):
        load_problems("math500", path=tmp_path / "data.csv")


def test_saved_dataset_dict_picks_the_split(tmp_path):
    import datasets

    rows = [{"problem": "What is $1+1$?", "answer": "2", "unique_id": "a"}]
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows * 2)}
    ).save_to_disk(tmp_path / "saved")
    assert len(load_problems("math500", path=tmp_path / "saved")) == 2  # math500's split is "test"
    assert len(load_problems("math500", path=tmp_path / "saved", split="train")) == 1
    with pytest.raises(DatasetUnavailableError, match="splits"):
        load_problems("math500", path=tmp_path / "saved", split="validation")


def test_duplicate_ids_are_made_unique(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(
        '{"problem": "a?", "answer": "1", "unique_id": "x"}\n{"problem": "b?", "answer": "2", "unique_id": "x"}\n'
    )
    assert [p.id for p in load_problems("math500", path=path)] == ["x", "x#1"]


def test_duplicate_prompts_are_kept_and_counted_in_one_warning(tmp_path, caplog):
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(f'{{"prompt": "{q}", "answer": "1"}}\n' for q in ("a?", "b?", "a?", "c?", "a?", "b?")))
    with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
        problems = load_problems("jsonl", path=path)
    assert len(problems) == 6 and problems.skipped == []  # a dataset may weight a problem by repeating it
    kept = "kept: a repeated prompt is drawn and evaluated as often as it appears"
    assert [r.getMessage() for r in caplog.records] == [f"jsonl: 3 duplicate prompts in {path} ({kept})"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.rows"):
        load_problems("jsonl", path=FIXTURES / "generic.jsonl", prompt_field="q", answer_field="meta.gold")
    assert "duplicate" not in caplog.text


def test_limit_and_template():
    problems = load_problems("math500", path=FIXTURES / "math500.jsonl", limit=2, template="Q: {question}")
    assert len(problems) == 2
    assert problems[1].prompt == "Q: What is the value of $\\sqrt{36 \\times \\sqrt{16}}$?"


def test_unknown_dataset_lists_the_choices():
    with pytest.raises(ValueError, match="math500"):
        load_problems("gsm9k")
    assert load_problems("AIME2025", path=FIXTURES / "aime25.jsonl").name == "aime25"  # aliases, any case


def test_fixture_golds_score_through_the_real_reward(reward):
    """The golds the adapters produce parse and verify: a boxed restatement scores 1."""
    problems = [
        p for name, (fixture, kw, *_) in CASES.items() for p in load_problems(name, path=FIXTURES / fixture, **kw)
    ]
    restated = {"-2, 2": "2, -2"}  # OlympiadBench's multiple answers are an unordered list
    completions = [f"... \\boxed{{{restated.get(p.answer, p.answer)}}}" for p in problems]
    result = reward.score(completions, [p.answer for p in problems])
    assert result.status == ["ok"] * len(problems)
    assert result.correct.all()


def test_render_prompt_uses_the_chat_template_only_when_there_is_one():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    prompt = format_prompt("What is $2+2$?")
    assert render_prompt(prompt) == prompt
    assert render_prompt(prompt, tokenizer) == prompt  # a base model's tokenizer: no template
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    assert render_prompt(prompt, tokenizer) == f"<|user|>{prompt}\n<|assistant|>"
    assert (
        render_prompt(prompt, tokenizer, system_prompt="Be brief.")
        == f"<|system|>Be brief.\n<|user|>{prompt}\n<|assistant|>"
    )


def test_template_constant_is_the_papers_instruction():
    assert format_prompt("  1+1?  ") == "1+1?\n" + INSTRUCTION
    assert "{question}" in MATH_PROMPT_TEMPLATE


def test_render_problems_applies_a_chat_template_only_when_there_is_one():
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    from arrol_pl.tasks.prompts import render_problems

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    problems = [Problem("a", "Compute 1 + 1.", "2")]
    assert render_problems(problems, tok) == problems
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    rendered = render_problems(problems, tok)
    assert rendered[0].prompt == "<|user|>Compute 1 + 1.<|assistant|>"
    assert rendered[0].answer == "2" and rendered[0].id == "a"
