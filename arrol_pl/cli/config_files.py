"""Which config file a refused key comes from, so a refusal of a preset's key names the file to fix.

Decisions:
- **The file is where Hydra found it.** A config path (``exp/sums``) is the first ``<dir>/exp/sums.yaml`` on the
  search path, in Hydra's order: the packaged presets, then ``--config-dir``'s (:func:`config_file`).
- **A key or type Hydra refuses while it merges a file names that file**, which Hydra's message gives as a config
  path (``In 'exp/sums': ...``; :func:`composing_file`), whichever directory it is in.
- **A bad value names the file only when it is the user's own.** The typed checks run on the composed config, so the
  file is the last one of the defaults list that sets the refused key (each message opens with its full key), and
  only when the command line does not set it (:func:`setting_file`). The packaged presets are composed and checked
  by the tests; a value of theirs that is refused is refused beside something else, which names no file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from arrol_pl.train.config.loader import ConfigError

COMPOSING = re.compile(r"In '([^']+)': \w+ raised while composing config")
"""How Hydra names the config it was merging when a key or value of it was refused."""
LEADING_KEY = re.compile(r"[A-Za-z_]\w*(?:\.\w+)*")
"""The full key a refusal opens with."""


def config_file(config_path: str, dirs: Sequence[Path]) -> Path | None:
    """The file of ``config_path`` (``exp/sums``) in the first of ``dirs`` that holds it; None: none does (a schema
    registered in code)."""
    return next((d / f"{config_path}.yaml" for d in dirs if (d / f"{config_path}.yaml").is_file()), None)


def composing_file(exc: BaseException, dirs: Sequence[Path]) -> Path | None:
    """The file Hydra was merging when it raised ``exc`` (a key or value of it refused); None: not such a refusal."""
    found = COMPOSING.match(str(exc))
    return config_file(found.group(1), dirs) if found else None


def sets(path: Path, package: str, key: str) -> bool:
    """Whether the config file ``path``, composed at ``package`` (``''``: the top level), sets ``key``."""
    if package:
        if not key.startswith(package + "."):
            return False
        key = key[len(package) + 1 :]
    node: Any = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def setting_file(
    exc: ConfigError, defaults: Sequence[Any], dirs: Sequence[Path], own: Path, overrides: Sequence[str]
) -> Path | None:
    """The file in ``own`` (the user's ``--config-dir``) that set the key ``exc`` refuses: the last of the defaults
    list (Hydra's ``ResultDefault`` entries, found in ``dirs``) that sets it. None when the command line sets it
    (``overrides``) or the last file that sets it is not the user's."""
    found = LEADING_KEY.match(str(exc))
    if found is None:
        return None
    key = found.group(0)
    if any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides):
        return None
    for default in reversed(defaults):
        path = config_file(default.config_path, dirs) if default.config_path else None
        if path is not None and sets(path, default.package or "", key):
            return path if path.is_relative_to(own) else None
    return None


def in_file(exc: ConfigError, path: Path | None) -> ConfigError:
    """``exc`` naming the file it refuses a value of (unchanged without one)."""
    return exc if path is None else ConfigError(f"{path}: {exc}")
