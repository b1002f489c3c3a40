"""The loader every script's typed configuration goes through (``experiments/run.py``, ``evaluate.py``,
``head_quality.py``, ``simulate_pruning.py``): a composed Hydra config merged onto the script's dataclass schema
and validated before any model loads, every refusal a :class:`ConfigError` whose message names the key.

Decisions:
- **The dataclasses hold the defaults.** A schema is registered with Hydra (:func:`register_schema`) and the
  script's YAML composes onto it, stating only what it changes; every key overrides without a ``+``, and a value of
  the wrong type is refused by Hydra while it composes, naming the override and the key.
- **A key no dataclass has is refused**, even one added with ``+``: the typed object would drop it without a word.
- **Messages name the full key.** A section whose dataclass lives below the script (a core or engine config)
  names only its bare field; the loader puts the section in front.
- **One line for Hydra's refusals too.** What Hydra refuses while it composes (a key no dataclass has, a value of
  the wrong type, a preset that does not exist) becomes a :class:`ConfigError` of one line (:func:`from_hydra`)
  naming the key or preset and what is allowed there, as the dataclasses' own checks do.
- **No torch**: omegaconf, Hydra's config store and the standard library only.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
import typing
from pathlib import Path
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.errors import MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


def type_name(hint: Any) -> str:
    """A field's type as a user reads it (``int | None``, ``list[str]``): in refusals and in the reference."""
    text = getattr(hint, "__name__", None) if not typing.get_args(hint) else None
    text = text or str(hint).replace("typing.", "")
    return text.replace("NoneType", "None")


def unknown_keys(node: Any, cls: type, prefix: str = "") -> list[tuple[str, type]]:
    """Keys of ``node`` (a plain nested dict) that the dataclass ``cls`` has no field for, with their full paths,
    each with the dataclass it is not a field of. Hydra's ``+key=value`` adds a key even to a typed node, and the
    typed object would drop it without a word."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    out = []
    for key, value in node.items():
        if key not in names:
            out.append((f"{prefix}{key}", cls))
        elif isinstance(value, dict) and dataclasses.is_dataclass(hints[key]):
            out += unknown_keys(value, hints[key], f"{prefix}{key}.")
    return out


def no_such_key(key: str, owner: type) -> str:
    """The refusal of ``key``, which the dataclass ``owner`` (its section's) has no field for: the key, the closest
    field when one is close, the fields the section takes, and where they are defined."""
    section, _, name = key.rpartition(".")
    fields = [f.name for f in dataclasses.fields(owner)]
    close = difflib.get_close_matches(name, fields, n=1)
    guess = f" (did you mean {section + '.' if section else ''}{close[0]}?)" if close else ""
    source = schema_file(owner)
    where = f"{owner.__name__} in {source}" if source.endswith(".py") and "/" in source else owner.__name__
    return f"{key}: no such key{guess}; {section or 'the top level'} takes {', '.join(fields)} ({where})"


def wrong_type(override: str, key: str, owner: type | None, problem: str) -> str:
    """The refusal of ``override``, whose value ``key`` cannot hold: what is wrong, and the type the key takes."""
    hints = typing.get_type_hints(owner) if owner is not None and dataclasses.is_dataclass(owner) else {}
    name = key.rpartition(".")[2]
    takes = f"; {key} takes {type_name(hints[name])}" if name in hints else ""
    return f"{override}: {problem}{takes}"


def dotted_key(key: str, written: str, owner: type) -> str:
    """The refusal of ``written``, a key a config file wrote dotted (``algo.lr: 1e-5``), which YAML reads as one key
    of that name in the section of the dataclass ``owner`` (``key``: its full name): the first part no dataclass
    has, as :func:`no_such_key` words it; or, every part a field, how to write it nested."""
    prefix, parts = key[: len(key) - len(written)], written.split(".")
    for i, part in enumerate(parts):
        hints = typing.get_type_hints(owner) if dataclasses.is_dataclass(owner) else {}
        if part not in hints:
            return no_such_key(prefix + ".".join(parts[: i + 1]), owner)
        owner = hints[part]
    below = "".join(f", then {part}: indented below it" for part in parts[1:])
    return f"{key}: a dotted key in a file is one key of that name, which no section has; nest it: {parts[0]}:{below}"


def from_hydra(exc: Exception) -> ConfigError:
    """One line for what Hydra refuses while it composes (it would print several and exit 1), naming the key or
    preset and what is allowed there: a key no dataclass has, a value of the wrong type, a preset that does not
    exist, on the command line or in a config file (whose refusal Hydra raises from the merge's, its context);
    anything else as Hydra words it, its lines joined (its config search path left out)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options is not None:
        group, _, name = exc.missing_cfg_file.rpartition("/")
        return ConfigError(f"{group}={name}: no such preset; {group} has {', '.join(exc.options)}")
    key = getattr(cause, "full_key", None)
    if isinstance(cause, OmegaConfBaseException) and key:
        owner = getattr(cause, "object_type", None)
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and dataclasses.is_dataclass(owner):
            written = str(getattr(cause, "key", ""))
            return ConfigError(dotted_key(key, written, owner) if "." in written else no_such_key(key, owner))
        if isinstance(cause, ValidationError):
            override = str(exc).partition("Error merging override ")[2].strip() or key
            return ConfigError(wrong_type(override, key, owner, str(cause).splitlines()[0]))
    lines = str(exc).split("Config search path:")[0].splitlines()
    if isinstance(cause, OmegaConfBaseException):
        lines.append(str(cause).splitlines()[0])
    return ConfigError("; ".join(line.strip() for line in lines if line.strip()))


def writable(node: Any) -> Any:
    """``node`` with no read-only flag left anywhere in it: a frozen dataclass (ArithmeticConfig, DeepConfSettings)
    still takes a preset's or an override's values, and is frozen again as the object :func:`load_typed` returns."""
    OmegaConf.set_readonly(node, False)
    if isinstance(node, DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, DictConfig):
                OmegaConf.set_readonly(child, None)
                writable(child)
    return node


@functools.cache
def schema_node(schema: type) -> DictConfig:
    """The dataclass ``schema`` as a writable structured config, built once per schema (about 35 ms for the run's):
    the node :func:`register_schema` gives Hydra and the template :func:`load_typed` merges a config onto (both
    copy it; nothing changes it)."""
    return writable(OmegaConf.structured(schema))


def register_schema(name: str, schema: type, group: str | None = None) -> None:
    """Register the dataclass ``schema`` with Hydra as ``name`` (in ``group``), for a YAML's defaults list to
    select: its fields are the defaults, and Hydra checks each override's type against them while it composes."""
    ConfigStore.instance().store(group=group, name=name, node=schema_node(schema))  # the store copies it


def replace_dicts(merged: DictConfig, node: DictConfig, schema: type) -> None:
    """A dict-typed field (``datasets``, ``data.options``) takes the config's value whole: a merge onto the schema
    would add back the default's entries that the config dropped (``~datasets.arithmetic``)."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name not in node or node[f.name] is None:
            continue
        kind = typing.get_origin(hints[f.name]) or hints[f.name]
        if kind is dict:
            merged[f.name] = node[f.name]
        elif dataclasses.is_dataclass(hints[f.name]) and isinstance(node[f.name], DictConfig):
            replace_dicts(merged[f.name], node[f.name], hints[f.name])


def schema_file(schema: type) -> str:
    """The file that defines ``schema``, from the directory that holds the package (``arrol_pl/train/config/run.py``);
    a file elsewhere by its name alone."""
    file = getattr(sys.modules.get(schema.__module__), "__file__", None)
    if file is None:
        return schema.__module__.replace(".", "/") + ".py"
    path, root = Path(file).resolve(), Path(__file__).resolve().parents[3]
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name


def load_typed(cfg: DictConfig | dict, schema: type, sections_from_below: Sequence[str] = ()) -> Any:
    """Merge a composed Hydra config onto the dataclass ``schema`` and validate it; raises :class:`ConfigError`
    naming the key. ``sections_from_below``: sections whose dataclass names only the bare field in its messages
    (a core or engine config), which get the section in front. Every script's config goes through here."""
    node = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    if not OmegaConf.missing_keys(node):
        # plain containers: an adapter's typed data.options (data_options/<adapter>) stays the dict DataConfig holds
        node = OmegaConf.create(OmegaConf.to_container(node, resolve=True))
    unknown = unknown_keys(OmegaConf.to_container(node, resolve=False), schema)
    if unknown:
        raise ConfigError("; ".join(no_such_key(key, owner) for key, owner in unknown))
    try:
        # A missing value (``path: ???``) merged onto a dataclass default keeps the default: refuse it first.
        missing = sorted(OmegaConf.missing_keys(node))
        if missing:
            raise ConfigError(
                f"{', '.join(missing)} must be set (e.g. {missing[0]}=...): the chosen preset has no default"
            )
        merged = OmegaConf.merge(schema_node(schema), node)  # merges onto a copy
        replace_dicts(merged, node, schema)
        for section in sections_from_below:
            try:
                OmegaConf.to_object(merged[section])
            except ValueError as exc:
                raise ConfigError(f"{section}.{exc}") from None
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).splitlines()[0] + f" (key: {getattr(exc, 'full_key', '?')})") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
