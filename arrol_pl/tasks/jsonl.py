"""Any other verifiable dataset (``data=jsonl``): a local json/jsonl/parquet file, a ``save_to_disk``
directory, or a hub id, with configurable field names.

Field names may be dotted paths into nested records (``reward_model.ground_truth``); a prompt field
holding a chat message list contributes its last user message. Without an id field, ids are
``"{name}-{row index}"``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from arrol_pl.tasks.problem import (
    MATH_PROMPT_TEMPLATE,
    DatasetSpec,
    ProblemSet,
    load_spec,
    text_field,
)


def load(
    path: str | os.PathLike | None = None,
    split: str | None = None,
    template: str = MATH_PROMPT_TEMPLATE,
    limit: int | None = None,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    id_field: str | None = "id",
    hub_id: str | None = None,
    hub_config: str | None = None,
    name: str = "jsonl",
) -> ProblemSet:
    """Problems from ``path`` (or ``hub_id``) whose question is ``prompt_field`` and gold ``answer_field``."""
    spec = DatasetSpec(
        name=name,
        hub_id=hub_id,
        split=split or "train",
        question_fields=(prompt_field,),
        answer_fields=(answer_field,),
        id_fields=(id_field,) if id_field else (),
        hub_config=hub_config,
    )

    def question_of(row: Mapping[str, Any]) -> str:
        return text_field(row, spec.question_fields, "prompt", chat=True)

    return load_spec(spec, path, split, template, question_of=question_of, limit=limit)
