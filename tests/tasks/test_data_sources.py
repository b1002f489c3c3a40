"""Reading rows robustly: broken lines cost their own line only, folders of files, GSM8K's ``#### N`` golds,
and one clear error (file, fields, counts per reason) when nothing usable is left."""

import json
from pathlib import Path

import pytest

from arrol_pl.tasks.problem import DatasetUnavailableError
from arrol_pl.tasks.registry import load_problems
from arrol_pl.tasks.rows import compile_answer_pattern, extract_answer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "datasets"


def test_every_kind_of_broken_line_is_skipped_and_reported_by_file_and_line(caplog):
    problems = load_problems("jsonl", path=FIXTURES / "broken_lines.jsonl")
    assert [(p.id, p.answer) for p in problems] == [("good-1", "5"), ("good-2", "3")]
    skipped = {s.id: (s.kind, s.reason) for s in problems.skipped}
    assert set(skipped) == {"broken_lines.jsonl:2", "broken_lines.jsonl:4", "broken_lines.jsonl:5", "no-answer"}
    assert skipped["broken_lines.jsonl:2"][0] == "invalid_json"
    assert skipped["broken_lines.jsonl:4"] == ("not_utf8", "line is not UTF-8 (byte 0xe9 at column 16)")
    assert skipped["broken_lines.jsonl:5"][0] == "not_an_object"
    assert skipped["no-answer"][0] == "missing_answer"
    assert problems.rows == 6  # the blank line 3 is no row
    assert problems.report() == {
        "source": str(FIXTURES / "broken_lines.jsonl"),
        "rows": 6,
        "problems": 2,
        "skipped": {"invalid_json": 1, "missing_answer": 1, "not_an_object": 1, "not_utf8": 1},
    }
    assert "skipped 4 bad rows of 6" in caplog.text and "broken_lines.jsonl:4" in caplog.text


def test_no_usable_row_is_one_error_naming_file_fields_and_counts():
    # GSM8K's test file read with the default prompt field skipped every row, then the run trained on nothing.
    with pytest.raises(DatasetUnavailableError) as info:
        load_problems("jsonl", path=FIXTURES / "gsm8k.jsonl")
    message = str(info.value)
    assert str(FIXTURES / "gsm8k.jsonl") in message and "data.path" in message
    assert "looked for prompt in prompt; answer in answer" in message
    assert "5 rows" in message and "skipped: missing_prompt 5" in message


def test_no_usable_row_counts_every_reason(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"question": "q"}\nnot json\n\xff\xfe\n{"prompt": "p"}\n')
    with pytest.raises(DatasetUnavailableError, match="bad.jsonl") as info:
        load_problems("jsonl", path=path, key="data.heldout_path")
    message = str(info.value)
    assert "data.heldout_path" in message
    assert "invalid_json 1, missing_answer 1, missing_prompt 1, not_utf8 1" in message
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetUnavailableError, match="0 rows.*the source is empty"):
        load_problems("jsonl", path=tmp_path / "empty.jsonl")


def test_a_broken_json_array_fails_naming_the_file(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[{"prompt": "p", "answer": "1"}, {"prompt": ')
    with pytest.raises(DatasetUnavailableError, match="rows.json: not a readable JSON array"):
        load_problems("jsonl", path=path)


def test_a_folder_of_files_is_read_whole():
    problems = load_problems("aime25", path=FIXTURES / "aime25_parts")
    assert [(p.id, p.answer) for p in problems] == [("I-1", "70"), ("II-1", "15")]


def test_a_hub_clone_picks_the_split_and_says_which_config_to_read():
    main = FIXTURES / "gsm8k_hub" / "main"
    assert [p.answer for p in load_problems("gsm8k", path=main)] == ["72", "10"]  # gsm8k's split: train
    assert [p.answer for p in load_problems("gsm8k", path=main, split="test")] == ["18", "3", "1250"]
    with pytest.raises(
        DatasetUnavailableError, match=r"splits \['test', 'train'\], none named 'validation'; set data.split="
    ):
        load_problems("gsm8k", path=main, split="validation")
    with pytest.raises(DatasetUnavailableError) as info:
        load_problems("gsm8k", path=FIXTURES / "gsm8k_hub", key="data.heldout_path", split="test")
    message = str(info.value)
    assert "2 folders (main, socratic)" in message and "set data.heldout_path" in message


def test_gsm8k_gold_is_the_final_number_and_the_solution_is_clean():
    problems = load_problems("gsm8k", path=FIXTURES / "gsm8k.jsonl")
    janet = problems[0]
    assert janet.answer == "18"
    assert janet.solution == (
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at the farmer\u2019s market."
        "\n\\boxed{18}"
    )
    assert {s.kind for s in problems.skipped} == {"no_pattern_match"}


def test_jsonl_with_an_answer_pattern_reads_gsm8k_like_the_adapter():
    generic = load_problems(
        "jsonl", path=FIXTURES / "gsm8k.jsonl", prompt_field="question", answer_pattern=r"#### (.+)$"
    )
    gsm8k = load_problems("gsm8k", path=FIXTURES / "gsm8k.jsonl")
    assert [(p.prompt, p.answer) for p in generic] == [(p.prompt, p.answer) for p in gsm8k]
    assert all(p.solution.endswith(f"\\boxed{{{p.answer}}}") for p in generic)


def test_a_solution_field_becomes_the_worked_solution(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"q": "1+1?", "a": "2", "work": "1 + 1 = 2"})
        + "\n"
        + json.dumps({"q": "2+2?", "a": "4", "work": "so \\boxed{4}"})
        + "\n"
    )
    problems = load_problems("jsonl", path=path, prompt_field="q", answer_field="a", solution_field="work")
    assert [p.solution for p in problems] == ["1 + 1 = 2\n\\boxed{2}", "so \\boxed{4}"]


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("####", "exactly one group"),
        ("(a)(b)", "exactly one group"),
        ("(", "not a regular expression"),
    ],
)
def test_answer_pattern_needs_one_group(pattern, message):
    with pytest.raises(ValueError, match=message):
        compile_answer_pattern(pattern)


def test_extract_answer_takes_the_last_match_and_drops_thousands_separators():
    pattern = compile_answer_pattern(r"#### (.+)$")
    assert extract_answer("a\n#### 3\nb\n#### -1,234,567.5", pattern) == ("-1234567.5", "a\n#### 3\nb")
    assert extract_answer("#### (1, 250)", pattern)[0] == "(1, 250)"  # not a number: kept as written


def test_gsm8k_golds_score_right_under_math_verify(reward):
    """The whole worked solution as gold lets math-verify pick another number ("the answer is 5 apples" before
    "#### 41"): 5 scored and 41 did not. The extracted gold scores 41 only."""
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k.jsonl").read_text().splitlines()]
    maria = load_problems("gsm8k", path=FIXTURES / "gsm8k.jsonl")[-1]
    assert maria.answer == "41"
    completions = ["... \\boxed{41}", "... \\boxed{5}"]
    whole = reward.score(completions, [rows[-1]["answer"]] * 2)
    extracted = reward.score(completions, [maria.answer] * 2)
    assert whole.correct.tolist() == [False, True]
    assert extracted.correct.tolist() == [True, False] and extracted.status == ["ok", "ok"]
    thousands = load_problems("gsm8k", path=FIXTURES / "gsm8k.jsonl")[2]
    assert reward.score(["\\boxed{1250}"], [thousands.answer]).correct.tolist() == [True]


def test_the_heldout_key_is_named_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        DatasetUnavailableError, match="no data.heldout_path is set.*set data.heldout_path=/data/math500"
    ):
        load_problems("math500", key="data.heldout_path")


def test_a_byte_order_mark_and_a_list_on_the_first_line_cost_nothing_more(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "p?", "answer": "1"}\n')
    assert [p.answer for p in load_problems("jsonl", path=path)] == ["1"]
    path.write_text('["a list"]\n{"prompt": "p?", "answer": "2"}\n')
    problems = load_problems("jsonl", path=path)
    assert [p.answer for p in problems] == ["2"] and problems.skip_counts() == {"not_an_object": 1}


def test_a_json_array_that_starts_with_a_byte_order_mark_is_read_as_an_array(tmp_path):
    path = tmp_path / "rows.json"
    rows = [{"prompt": f"p{i}?", "answer": str(i)} for i in range(3)]
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows, indent=1).encode())  # as Windows editors save it
    problems = load_problems("jsonl", path=path)
    assert [p.answer for p in problems] == ["0", "1", "2"] and problems.skipped == []
