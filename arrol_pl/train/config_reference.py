"""The configuration reference (``docs/configuration.md`` below its marker), generated from the typed configs.

Every key of :class:`~arrol_pl.train.config.RunConfig`, with its type, its default, its one-line meaning (the
field's docstring, its first sentence) and the presets in ``conf/`` that change it; the built-in task's options
(``data.options.*``) come from its adapter's dataclass.

Decisions:
- **The docstring is the meaning.** A field's docstring (the string right below it) is read from the source with
  :mod:`ast`; a field without one is an error, so the reference cannot go without a line.
- **Presets found by reading them.** Each YAML file under ``conf/`` is read as Hydra places it: a file in group
  ``G`` fills section ``G`` unless it says ``# @package _global_``; what its ``defaults`` list pulls in is not
  followed (that preset is listed under its own keys).
- **Generated, then checked.** ``experiments/write_config_reference.py`` writes the page; a test fails when the
  page is stale or a key has no description.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
import typing
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

MARKER = "<!-- Generated below by experiments/write_config_reference.py from the typed configs; do not edit. -->"
"""The line of ``docs/configuration.md`` after which the page is generated."""

SKIP_GROUPS = ("hydra", "data_options")


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass and the dataclasses it inherits from, from the string statements right
    after each field in their source (a subclass's docstring wins)."""
    docs: dict[str, str] = {}
    for base in reversed([c for c in cls.__mro__ if dataclasses.is_dataclass(c)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(base))).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)\.\s+(?=[A-Z`(])")


def first_sentence(text: str) -> str:
    """The docstring up to its first sentence's full stop (not the one of "e.g." or "i.e."; the whole text when
    it has one sentence)."""
    match = SENTENCE_END.search(text)
    return text[: match.start() + 1] if match else text


def type_name(hint: Any) -> str:
    text = getattr(hint, "__name__", None) if not typing.get_args(hint) else None
    text = text or str(hint).replace("typing.", "")
    return text.replace("NoneType", "None")


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return "(required)"


def keys(cls: type, prefix: str = "") -> Iterator[tuple[str, str, Any, str]]:
    """``(key, type, default, meaning)`` of every leaf field of ``cls``, depth first; a field without a docstring
    raises ValueError naming it."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            yield from keys(hints[f.name], key + ".")
            continue
        if f.name not in docs:
            raise ValueError(f"{key} ({cls.__name__}.{f.name}) has no docstring: the reference needs its meaning")
        yield key, type_name(hints[f.name]), default_of(f), first_sentence(docs[f.name])


def leaves(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1]


def preset_changes(conf: Path) -> dict[str, list[str]]:
    """``{key: [preset, ...]}``: the presets under ``conf`` (``algo=dapo``, ``+exp=seeds``) that set each key, those
    the default experiment selects (``conf/config.yaml``) marked ``(default)``."""
    defaults = yaml.safe_load((conf / "config.yaml").read_text())["defaults"]
    selected = {d if isinstance(d, str) else next(iter(d)) for d in defaults}
    chosen = {f"{group}={name}" for d in defaults if isinstance(d, dict) for group, name in d.items()}
    found: dict[str, list[str]] = {}
    for path in sorted(conf.rglob("*.yaml")):
        group = path.parent.relative_to(conf).as_posix()
        if group == "." or group.split("/")[0] in SKIP_GROUPS:
            continue
        text = path.read_text()
        body = yaml.safe_load(text) or {}
        body.pop("defaults", None)
        body.pop("hydra", None)
        name = f"{group}={path.stem}" if group in selected else f"+{group}={path.stem}"
        name += " (default)" if name in chosen else ""
        root = "" if "@package _global_" in text else f"{group}."
        for key in leaves(body, root):
            found.setdefault(key, []).append(name)
    return found


def cell(value: Any) -> str:
    value = to_plain(value)
    text = "null" if value is None else yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return "`" + text.replace("|", "\\|") + "`"


def to_plain(value: Any) -> Any:
    """A default as YAML can write it: dataclasses (a dict entry's default) as dicts of their non-null fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: to_plain(v) for k, v in dataclasses.asdict(value).items() if v not in (None, {}, [])}
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def reference(conf: Path) -> str:
    """The generated part of ``docs/configuration.md``: one table per section of RunConfig."""
    from arrol_pl.tasks import registry
    from arrol_pl.train.config import RunConfig

    changes = preset_changes(conf)
    rows = list(keys(RunConfig))
    for adapter in ("arithmetic", "jsonl"):
        options = registry.adapter_options(adapter)
        rows += [(f"data.options.{k[len('x.'):]}", t, d, f"({adapter}) {m}")
                 for k, t, d, m in keys(options, "x.")]
    sections: dict[str, list[tuple[str, str, Any, str]]] = {}
    for row in rows:
        sections.setdefault(row[0].split(".")[0] if "." in row[0] else "(top level)", []).append(row)
    out = ["## Reference", "",
           "Every key of `RunConfig`, its type and default, what it means (the first sentence of its docstring; the "
           "dataclass says more) and the presets that set it; a preset marked (default) is one `conf/config.yaml` selects, so "
           "`make run` runs its value. `data.options.*` depends on the dataset adapter (`data.name`): the built-in "
           "task's and `jsonl`'s are listed.", ""]
    for section, items in sections.items():
        out += [f"### `{section}`" if section != "(top level)" else "### top level", "",
                "| key | type | default | meaning | set by |", "|---|---|---|---|---|"]
        for key, kind, default, meaning in items:
            presets = ", ".join(f"`{p}`" for p in changes.get(key, []))
            meaning, kind = meaning.replace("|", "\\|"), kind.replace("|", "\\|")
            out.append(f"| `{key}` | `{kind}` | {cell(default)} | {meaning} | {presets} |")
        out.append("")
    return "\n".join(out)


def script_reference(title: str, schema: type, reused: dict[str, str]) -> str:
    """One script's own keys (``schema``'s fields) as a table; a section it shares with the run (``reused``: its
    key → what it is) is one row, not its keys again."""
    rows = [(f"`{prefix}.*`", "", "", text) for prefix, text in reused.items()]
    rows += [(f"`{key}`", f"`{kind}`", cell(default), meaning) for key, kind, default, meaning in keys(schema)
             if key.split(".")[0] not in reused]
    out = [f"### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    out += [f"| {key} | {kind.replace('|', chr(92) + '|')} | {default} | {meaning.replace('|', chr(92) + '|')} |"
            for key, kind, default, meaning in rows]
    return "\n".join(out) + "\n"


def page(existing: str, conf: Path, scripts: Sequence[tuple[str, type, dict[str, str]]] = ()) -> str:
    """``existing`` (the page) with everything after :data:`MARKER` generated anew: the run's reference, then each
    of ``scripts`` (``(title, schema, reused sections)``, :func:`script_reference`)."""
    head = existing.split(MARKER, 1)[0].rstrip("\n")
    text = f"{head}\n\n{MARKER}\n\n{reference(conf)}"
    if scripts:
        text += "\n## The other scripts\n\n" + "\n".join(script_reference(*script) for script in scripts)
    return text
