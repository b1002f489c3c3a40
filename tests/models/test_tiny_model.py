"""The locally built tiny Qwen3 policy: tokenizer round-trips, config matches, builds are cached."""

from __future__ import annotations

import json

from arrol_pl.models import EOS_TOKEN, PAD_TOKEN, build_tiny_model, build_tokenizer


def test_tokenizer_round_trips_math_and_english(tiny_model_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dirs["tokenizer"])
    text = "Question: (12 + 345) * 6 - 7 = ?\nLet us think.\n\\boxed{2064} Done, the answer is 2064."
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert tok.eos_token == EOS_TOKEN and tok.pad_token == PAD_TOKEN
    assert tok.eos_token_id != tok.pad_token_id
    assert [tok.decode([i]) for i in tok.encode("2064", add_special_tokens=False)] == ["2", "0", "6", "4"]


def test_model_config_and_cache(tiny_model_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dirs["tokenizer"])
    config = json.loads((tiny_model_dirs["policy"] / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["vocab_size"] == len(tok)
    assert config["head_dim"] >= 32 and config["max_position_embeddings"] == 512
    root = tiny_model_dirs["policy"].parent
    assert build_tokenizer(None, root) == tiny_model_dirs["tokenizer"]
    again = build_tiny_model(
        tiny_model_dirs["tokenizer"], root, max_position_embeddings=tiny_model_dirs["max_model_len"], seed=0
    )
    assert again == tiny_model_dirs["policy"]
    assert tiny_model_dirs["updated"] != tiny_model_dirs["policy"]
