"""Datasets by name: ``load_problems("math500", path=...)`` → :class:`ProblemSet`; a run's training and
held-out sets from its data config: :func:`load_data`.

The names are the config's ``data.name`` choices. Adapter modules are imported on first use, so asking
for one dataset never imports the others' dependencies. An adapter declares its own ``data.options``
as a dataclass ``OPTIONS`` (arithmetic: :class:`ArithmeticConfig`; jsonl: hub id and config); one
without ``OPTIONS`` takes none, so a preset's options never leak into another adapter.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

from arrol_pl.tasks.problem import DatasetUnavailableError, ProblemSet
from arrol_pl.tasks.rows import compile_answer_pattern, load_spec, report_overlap
from arrol_pl.tasks.rows import logger as row_logger

ADAPTERS: dict[str, str] = {
    "arithmetic": "arrol_pl.tasks.arithmetic",
    "dapo_math": "arrol_pl.tasks.dapo_math",
    "math500": "arrol_pl.tasks.math500",
    "minerva": "arrol_pl.tasks.minerva",
    "olympiadbench": "arrol_pl.tasks.olympiadbench",
    "amc23": "arrol_pl.tasks.amc23",
    "aime24": "arrol_pl.tasks.aime24",
    "aime25": "arrol_pl.tasks.aime25",
    "jsonl": "arrol_pl.tasks.jsonl",
    "gsm8k": "arrol_pl.tasks.gsm8k",
}
"""Dataset name → adapter module: it exposes ``load(path=None, split=None, ...)``, or a
:class:`DatasetSpec` ``SPEC`` (plus ``question_of`` / ``answer_of`` where a field needs unwrapping),
loaded by :func:`load_spec`; optionally ``OPTIONS`` (its ``data.options``), ``SOLUTIONS = True`` (its
problems carry worked solutions) and ``GENERATED = True`` (no rows: no path, no fields)."""

ROW_FIELDS = ("prompt_field", "answer_field", "id_field", "solution_field", "answer_pattern")
"""Data-config keys that pick fields of a dataset's rows (None: the adapter's own)."""

ALIASES = {
    "dapo": "dapo_math",
    "dapo-math-17k": "dapo_math",
    "math-500": "math500",
    "minervamath": "minerva",
    "minerva_math": "minerva",
    "olympiad": "olympiadbench",
    "amc": "amc23",
    "aime2024": "aime24",
    "aime2025": "aime25",
    "gsm": "gsm8k",
}

EVAL_SETS = ("math500", "minerva", "olympiadbench", "amc23", "aime24", "aime25")
"""The paper's evaluation sets (Tables 1–3), in its column order."""


def available() -> list[str]:
    return sorted(ADAPTERS)


def canonical_name(name: str) -> str:
    """The adapter key of ``name`` (aliases and case folded); ValueError naming the choices if unknown."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in ADAPTERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(available())}")
    return key


def adapter(name: str):
    """The adapter module of dataset ``name``."""
    return importlib.import_module(ADAPTERS[canonical_name(name)])


def adapter_options(name: str) -> type | None:
    """The dataclass of ``name``'s ``data.options`` (None: it takes no options)."""
    return getattr(adapter(name), "OPTIONS", None)


def is_generated(name: str) -> bool:
    """Whether ``name`` is generated from a seed (no rows, so no path and no fields)."""
    return getattr(adapter(name), "GENERATED", False)


def provides_solutions(name: str, solution_field: str | None = None, answer_pattern: str | None = None) -> bool:
    """Whether ``name``'s problems carry worked solutions: built in, or from ``solution_field``, or the
    text before ``answer_pattern``'s match."""
    return getattr(adapter(name), "SOLUTIONS", False) or bool(solution_field or answer_pattern)


def prefix_checker(name: str):
    """``check(problem, prefix text) -> float`` of dataset ``name``, the ``checker`` scorer's process verifier (its
    adapter's ``check_prefix``); None when the task cannot check a prefix."""
    return getattr(adapter(name), "check_prefix", None)


def check_data_config(data) -> None:
    """ValueError naming the ``data.*`` key when a run's data config cannot work; reads no rows.

    ``data.options`` must be options of the chosen adapter (its ``OPTIONS``), so a preset's options never
    reach another adapter; a generated task takes no path and no fields; patterns must compile.
    """
    for key in ("name", "heldout_name"):
        if getattr(data, key) is not None:
            try:
                canonical_name(getattr(data, key))
            except ValueError as e:
                raise ValueError(f"data.{key}: {e}") from None
    if data.num_heldout < 0:
        raise ValueError(f"data.num_heldout must be >= 0, got {data.num_heldout}")
    declared = adapter_options(data.name)
    known = [f.name for f in dataclasses.fields(declared)] if declared else []
    for key in data.options:
        if key not in known:
            takes = f"its options: {', '.join(known)}" if known else "it takes none"
            raise ValueError(
                f"data.options.{key} is not an option of data.name={data.name} ({takes}); choose a dataset with "
                f"its preset, data={data.name}, so no other preset's options carry over"
            )
    if declared is not None:
        try:
            declared(**data.options)
        except (TypeError, ValueError) as e:
            raise ValueError(f"data.options of data.name={data.name}: {e}") from None
    for key in data.heldout_fields:
        if key not in ROW_FIELDS:
            raise ValueError(f"data.heldout_fields.{key} is not a row field; choose among {', '.join(ROW_FIELDS)}")
    if is_generated(data.name):
        keys = {k: getattr(data, k) for k in ("path", "heldout_path", *ROW_FIELDS)}
        keys.update({f"heldout_fields.{k}": v for k, v in data.heldout_fields.items()})
        for key, value in keys.items():
            if value is not None:
                raise ValueError(
                    f"data.{key} does not apply to data.name={data.name}: it is generated, not read from rows"
                )
    elif data.path is None and canonical_name(data.name) == "jsonl" and not data.options.get("hub_id"):
        raise ValueError(
            "data.path must be set for data.name=jsonl (a json, jsonl or parquet file or a folder), "
            "or data.options.hub_id"
        )
    for key, pattern in (
        ("data", data.answer_pattern),
        ("data.heldout_fields", data.heldout_fields.get("answer_pattern")),
    ):
        if pattern is not None:
            try:
                compile_answer_pattern(pattern)
            except ValueError as e:
                raise ValueError(f"{key}.{e}") from None


def load_problems(
    name: str, path: str | os.PathLike | None = None, split: str | None = None, **kwargs: Any
) -> ProblemSet:
    """The problems of dataset ``name`` from ``path`` (local copy) or its hub id.

    ``kwargs`` go to the adapter: ``template``, ``limit``, ``key`` (the config key of ``path``, for
    errors) and the :data:`ROW_FIELDS` of row datasets; ``hub_id`` / ``hub_config`` of ``jsonl``; the
    difficulty of ``arithmetic`` (see :class:`ArithmeticConfig`).
    """
    module = adapter(name)
    if hasattr(module, "load"):
        return module.load(path=path, split=split, **kwargs)
    return load_spec(
        module.SPEC,
        path,
        split,
        question_of=getattr(module, "question_of", None),
        answer_of=getattr(module, "answer_of", None),
        **kwargs,
    )


PROBE_ROWS = 64
"""Rows :func:`check_sources` reads of each source: enough to find a wrong field name, few enough to take no time."""


def check_sources(data) -> None:
    """DatasetUnavailableError naming the key and the file when a run's training or held-out source cannot give a
    problem (a missing, empty or unreadable file, rows without the fields looked for, a hub dataset while offline);
    reads the first :data:`PROBE_ROWS` rows of each, quietly (the run's load reports them), and reads on only when
    none of those is usable."""
    loads = [] if is_generated(data.name) else [load_train]
    heldout = data.heldout_name or data.name
    if data.num_heldout and (data.heldout_name or data.heldout_path) and not is_generated(heldout):
        loads.append(load_heldout)
    was, row_logger.disabled = row_logger.disabled, True
    try:
        for load in loads:
            try:
                load(data, limit=PROBE_ROWS)
            except DatasetUnavailableError:
                load(data)  # the whole source: a usable row may come later
    finally:
        row_logger.disabled = was


def load_data(data) -> tuple[ProblemSet, ProblemSet]:
    """``(train, heldout)`` of a run's data config (:class:`arrol_pl.train.config.sections.DataConfig`); held-out
    prompts that are also training prompts are counted in a warning (:func:`~arrol_pl.tasks.rows.report_overlap`)."""
    train, heldout = load_train(data), load_heldout(data)
    report_overlap(train, heldout)
    return train, heldout


def load_train(data, limit: int | None = None) -> ProblemSet:
    """The training problems of a run's data config (``limit``: of its first rows only; not of a generated task)."""
    return load_problems(
        data.name,
        path=data.path,
        split=data.split,
        **_row_kwargs(data.name, "data.path", _fields(data), limit),
        **data.options,
    )


def load_heldout(data, limit: int | None = None) -> ProblemSet:
    """The held-out problems of a run's data config, at most ``num_heldout``; empty without a held-out source.

    The held-out set is ``data.heldout_name`` (default: ``data.name``) read from ``data.heldout_path``
    (or its hub id) with ``data.heldout_fields``; read by the training adapter it also takes the training
    fields and options and defaults to split ``test``. Arithmetic holds out its own hash bucket. ``limit``: of
    the first rows only (not of a generated task).
    """
    if data.num_heldout == 0 or (
        data.heldout_name is None and data.heldout_path is None and not is_generated(data.name)
    ):
        return ProblemSet(name=data.heldout_name or data.name, source="none", problems=[])
    if data.heldout_name is None and data.heldout_path is None:
        heldout = load_problems(data.name, split="heldout", **data.options)
    else:
        name = data.heldout_name or data.name
        same = canonical_name(name) == canonical_name(data.name)
        split = data.heldout_split or ("test" if same else None)
        own = {k: v for k, v in data.heldout_fields.items() if v is not None}
        heldout = load_problems(
            name,
            path=data.heldout_path,
            split=split,
            **_row_kwargs(name, "data.heldout_path", {**(_fields(data) if same else {}), **own}, limit),
            **(data.options if same else {}),
        )
    return dataclasses.replace(heldout, problems=heldout.problems[: data.num_heldout])


def _fields(data) -> dict[str, Any]:
    return {k: getattr(data, k) for k in ROW_FIELDS if getattr(data, k) is not None}


def _row_kwargs(name: str, key: str, fields: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    if is_generated(name):
        return {}
    return {"key": key, **fields, **({} if limit is None else {"limit": limit})}
