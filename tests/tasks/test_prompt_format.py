"""PromptFormat: a few-shot template around the problem, the chat template on or off, stop strings."""

import pytest
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.prompts import PromptFormat, render_problems


def chat_tokenizer():
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    return tok


def test_template_then_chat_template_or_raw():
    problems = [Problem("a", "Compute 1 + 1.", "2")]
    few_shot = "Q: Compute 3 + 5.\nA: \\boxed{8}\nQ: {question}\nA:"
    raw = render_problems(problems, chat_tokenizer(), PromptFormat(few_shot, chat=False))
    assert raw[0].prompt == "Q: Compute 3 + 5.\nA: \\boxed{8}\nQ: Compute 1 + 1.\nA:"
    assert raw[0].answer == "2" and raw[0].id == "a"
    chat = render_problems(problems, chat_tokenizer(), PromptFormat(few_shot))
    assert chat[0].prompt == f"<|user|>{raw[0].prompt}<|assistant|>"
    # no template, no chat: unchanged
    assert render_problems(problems, chat_tokenizer(), PromptFormat(chat=False)) == problems


def test_stop_strings_go_to_sampling_and_bad_formats_fail():
    assert PromptFormat(stop=("\n",)).sampling() == {"stop": ["\n"]}
    assert PromptFormat().sampling() == {}
    with pytest.raises(ValueError, match="exactly one"):
        PromptFormat("{question} and {question}")
    with pytest.raises(ValueError, match="non-empty"):
        PromptFormat(stop=("",))


def test_format_saved_beside_an_export_loads_back(tmp_path):
    assert PromptFormat.load(tmp_path) is None  # exports of older runs have none
    fmt = PromptFormat("Q: {question}\nA:", chat=False, stop=("\n", "Q:"))
    fmt.save(tmp_path)
    assert PromptFormat.load(tmp_path) == fmt
