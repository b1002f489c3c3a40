"""DAPO-Math-17k (Yu et al. 2025), the paper's training set: ``BytedTsinghua-SIA/DAPO-Math-17k``.

Rows (verl format): ``prompt`` is a chat message list whose user content wraps the problem in DAPO's
own instruction ("... of the form Answer: $Answer ..."), the gold is ``reward_model.ground_truth``
(an integer as a string), the id is ``extra_info.index``. DAPO's instruction is stripped and replaced
by the paper's ``\\boxed{}`` template — left in place it asks for an "Answer:" line the boxed reward
would score 0. The hub copy repeats its ~17k prompts ~100 times (BytedTsinghua-SIA/DAPO#36), so
repeated prompts are dropped. ``open-r1/DAPO-Math-17k-Processed`` rows (``prompt`` a plain string,
``solution`` the answer) load too.
"""

from __future__ import annotations

from typing import Any, Mapping

from arrol_pl.tasks.problem import BadRowError
from arrol_pl.tasks.rows import DatasetSpec, text_field

SPEC = DatasetSpec(
    name="dapo_math",
    hub_id="BytedTsinghua-SIA/DAPO-Math-17k",
    split="train",
    question_fields=("prompt", "problem", "question"),
    answer_fields=("reward_model.ground_truth", "answer", "solution"),
    id_fields=("extra_info.index", "id"),
    dedupe_prompts=True,
)

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def strip_dapo_instruction(content: str) -> str:
    """The bare problem statement inside DAPO's prompt (unchanged if it has no DAPO wrapper)."""
    return content.removeprefix(DAPO_PREFIX).removesuffix(DAPO_SUFFIX).strip()


def question_of(row: Mapping[str, Any], spec: DatasetSpec) -> str:
    question = strip_dapo_instruction(text_field(row, spec.question_fields, "prompt", chat=True))
    if not question:
        raise BadRowError("empty prompt once DAPO's instruction is removed", "empty_prompt")
    return question
