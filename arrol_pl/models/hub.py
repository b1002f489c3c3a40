"""A policy named by its Hugging Face hub id (``model.path=Qwen/Qwen3-1.7B-Base``, the model presets), resolved to a
local directory through the hub's own cache.

Decisions:
- **A local directory wins.** ``model.path`` is a hub id only when no such path exists and it reads
  ``<owner>/<name>``; the trainer, vLLM and the memory plan then all read the same cached snapshot.
- **Offline works from the cache.** With ``HF_HUB_OFFLINE=1`` a snapshot (or a ``config.json``) already in the
  cache is used; one that is not fails naming the id and both ways on (download it, or pass a local copy).
- **Only what a model directory needs** is downloaded: configs, tokenizer files and safetensors weights.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

MODEL_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken")


def is_hub_id(path: str) -> bool:
    """``path`` names a hub repository: no such local path, and of the form ``<owner>/<name>``."""
    return not Path(path).exists() and bool(HUB_ID.match(path))


def _unavailable(repo_id: str, what: str, exc: Exception) -> FileNotFoundError:
    return FileNotFoundError(
        f"model.path={repo_id!r}: {what} is not in the Hugging Face cache and could not be downloaded "
        f"({type(exc).__name__}); download it with "
        f"`hf download {repo_id} --local-dir /models/{repo_id.split('/')[-1]}` "
        "and pass model.path=<that directory>, or allow hub access (HF_HUB_OFFLINE=0)"
    )


def snapshot(repo_id: str) -> Path:
    """The local directory of ``repo_id``'s model files, downloaded into the hub cache on first use."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(MODEL_FILES)))
    except Exception as exc:  # noqa: BLE001 - offline misses, gated repos and network errors all end here
        raise _unavailable(repo_id, "the model", exc) from exc


def config_json(path: str) -> dict[str, Any]:
    """The ``config.json`` of a local model directory or of a hub id (that file alone is fetched)."""
    if is_hub_id(path):
        from huggingface_hub import hf_hub_download

        try:
            return json.loads(Path(hf_hub_download(path, "config.json")).read_text())
        except Exception as exc:  # noqa: BLE001 - as in snapshot
            raise _unavailable(path, "config.json", exc) from exc
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"model.path={path!r} is not a transformers model directory (no config.json)")
    return json.loads(file.read_text())
