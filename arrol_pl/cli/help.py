"""``--help`` of a Hydra command (``arrol train --help``, ``experiments/run.py --help``): the preset groups a user
picks, with each preset's meaning, then every key of the command's typed config with its type, default and meaning.

Decisions:
- **Generated from what the reference is generated from** (:mod:`arrol_pl.train.config.reference`): the presets'
  opening comments and the dataclass fields' docstrings, so the help cannot drift from ``docs/configuration.md``.
- **The groups a user picks**: those the command's config selects (``model=``, ``data=`` ...), and for training
  the ones added with ``+`` (``+exp=``, ``+arm=``); not the internal ``data_options`` group, which the data presets
  select themselves.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

from arrol_pl.train.config.reference import keys, preset_groups, value_text


ROLE = re.compile(r":\w+:`~?([^`]+)`")
"""A Sphinx cross-reference in a docstring (``:class:`SimulateConfig```): the help keeps its name."""


def plain(text: str) -> str:
    return ROLE.sub(r"\1", text).replace("``", "")


def wrapped(text: str, width: int, indent: int, hang: int) -> list[str]:
    """``text`` as plain text (:func:`plain`) wrapped to ``width``, indented, later lines by ``hang`` more; a word
    longer than a line (a path) kept whole."""
    return textwrap.wrap(
        plain(text),
        width,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + hang),
        break_on_hyphens=False,
        break_long_words=False,
    ) or [""]


def paragraphs(text: str, width: int) -> list[str]:
    """A docstring's paragraphs wrapped, each followed by an empty line; an indented one (a command) as it is."""
    out = []
    for paragraph in text.strip("\n").split("\n\n"):
        if paragraph.startswith("    "):
            out += [plain(line) for line in paragraph.splitlines()]
        else:
            out += wrapped(" ".join(paragraph.split()), width, 0, 0)
        out.append("")
    return out


def help_text(prog: str, conf: Path, config_name: str, schema: type, about: str, groups: tuple[str, ...] | None) -> str:
    """The help of the command ``prog`` that composes ``config_name`` onto ``schema``: ``about`` first, then the
    presets of ``groups`` (None: every group) read from ``conf``, the directory the help names (an installed
    package's own, so a user of the wheel finds them), then the keys of ``schema``."""
    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))
    out = [f"usage: {prog} [KEY=VALUE ...] [GROUP=PRESET ...] [--multirun] [--cfg job] [--hydra-help]", ""]
    out += paragraphs(about, width)
    listed = {
        group: presets
        for group, presets in preset_groups(conf, config_name).items()
        if groups is None or group in groups
    }
    if listed:
        out += wrapped(
            f"Presets (in {conf}, the defaults in {config_name}.yaml there): GROUP=PRESET picks one; "
            "+GROUP=PRESET adds one of a group the default picks none of.",
            width,
            0,
            0,
        )
        for group, presets in listed.items():
            out.append(f"  {group}:")
            for name, meaning in presets:
                out += wrapped(f"{name}: {meaning}", width, 4, 4)
        out.append("")
    out += wrapped(
        f"Keys (KEY=VALUE; the fields of {schema.__name__} and the dataclasses it holds): type, default, meaning.",
        width,
        0,
        0,
    )
    for key, kind, default, meaning in keys(schema):
        out += wrapped(f"{key} ({kind}, default {value_text(default)}): {meaning}", width, 2, 4)
    out += [
        "",
        *wrapped(
            "A sweep: --multirun (-m) with KEY=A,B. The composed configuration: --cfg job. Hydra's own "
            "flags: --hydra-help. A bad key or value is refused in one line, exit 2, before anything "
            "runs.",
            width,
            0,
            0,
        ),
    ]
    return "\n".join(out)
