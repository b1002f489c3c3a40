"""Any other verifiable dataset (``data=jsonl``): a local json/jsonl/parquet file, a ``save_to_disk``
directory or a folder of data files, or a hub id (``data.options.hub_id``), with configurable fields.

Fields (``data.prompt_field``, ``data.answer_field``, ``data.id_field``, ``data.solution_field``) may be
dotted paths into nested records (``reward_model.ground_truth``); a prompt field holding a chat message
list contributes its last user message. ``data.answer_pattern`` takes the gold out of a worked solution.
Without an id field, ids are ``"{name}-{row index}"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from arrol_pl.tasks.problem import ProblemSet
from arrol_pl.tasks.rows import DatasetSpec, load_spec


@dataclass(frozen=True)
class JsonlOptions:
    """``data.options`` of the jsonl adapter."""

    hub_id: str | None = None
    """Hub dataset to load when ``data.path`` is unset (online only)."""
    hub_config: str | None = None
    """Its configuration name, if it has several."""


OPTIONS = JsonlOptions


def load(
    path: str | os.PathLike | None = None,
    split: str | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    name: str = "jsonl",
    **kwargs: Any,
) -> ProblemSet:
    """Problems from ``path`` (or ``hub_id``); ``kwargs`` go to :func:`load_spec` (fields, pattern, template, limit)."""
    spec = DatasetSpec(
        name=name,
        hub_id=hub_id,
        split=split or "train",
        question_fields=("prompt",),
        answer_fields=("answer",),
        id_fields=("id",),
        hub_config=hub_config,
    )
    return load_spec(spec, path, split, **kwargs)
