"""``Problem(id, prompt, answer)``, the paper's prompt template, and the row → Problem machinery shared
by the dataset adapters.

Decisions:
- A problem's ``prompt`` is the user message: the question followed by the instruction to reason step
  by step and put the final answer in ``\\boxed{}`` (the template used with the paper's Qwen3 and
  Llama-3.2 models). Chat templating is applied later, per model, by :func:`render_prompt`: only a
  tokenizer with a chat template changes the text.
- Every adapter loads through ``datasets``: from ``path`` (a json/jsonl/parquet file or a
  ``save_to_disk`` directory) when given, else from its hub id. Offline without a path fails at once
  with :class:`DatasetUnavailableError` naming what to download and where ``data.path`` must point;
  the hub is never tried offline, where a name stalls ~23 s before failing.
- A bad row (missing or empty prompt/answer, a field of the wrong type) never stops a run: it is
  skipped, counted in :attr:`ProblemSet.skipped` with its id and reason, and logged once per load.
"""

from __future__ import annotations

import dataclasses

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

logger = logging.getLogger(__name__)

MATH_PROMPT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
"""The paper's instruction: reason step by step, final answer in ``\\boxed{}``."""


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: the prompt shown to the policy and the gold answer it is scored against."""

    id: str
    prompt: str
    answer: str


@dataclass(frozen=True)
class SkippedRow:
    id: str
    reason: str


@dataclass
class ProblemSet:
    """Problems loaded from one source, plus the rows that were skipped and why."""

    name: str
    source: str
    problems: list[Problem]
    skipped: list[SkippedRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self):
        return iter(self.problems)

    def __getitem__(self, i):
        return self.problems[i]


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded: offline without a local copy, a missing path, or a hub failure."""


class BadRowError(ValueError):
    """One row cannot become a Problem; the loader skips it and records the reason."""


def format_prompt(question: str, template: str = MATH_PROMPT_TEMPLATE) -> str:
    """The user message for ``question`` (``template`` holds one ``{question}`` field)."""
    return template.format(question=question.strip())


def render_prompt(prompt: str, tokenizer: Any = None, system_prompt: str | None = None) -> str:
    """The text the model is fed: ``prompt`` chat-templated if ``tokenizer`` has a chat template.

    Without a tokenizer, or with one that has no chat template (a base model, the tiny local
    policy), the prompt is returned unchanged.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return prompt
    messages = [{"role": "user", "content": prompt}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@dataclass(frozen=True)
class PromptFormat:
    """How a problem's prompt becomes the text the policy is fed, and where its generations stop.

    ``template`` holds one ``{question}`` where the prompt goes (a few-shot prefix around it: small
    pretrained models answer one-step arithmetic in a raw few-shot format and almost never inside their
    chat template); ``chat`` applies the tokenizer's chat template afterwards when it has one; ``stop``
    are the stop strings of every generation (``("\\n",)`` for one-line answers).
    """

    template: str | None = None
    chat: bool = True
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.template is not None and self.template.count("{question}") != 1:
            raise ValueError(f"prompt_template must hold exactly one {{question}}, got {self.template!r}")
        if any(not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty, got {list(self.stop)!r}")

    def text(self, prompt: str) -> str:
        """The model input for one problem prompt (``str.replace``, so braces in the template need no escaping)."""
        return prompt if self.template is None else self.template.replace("{question}", prompt)

    def sampling(self) -> dict[str, Any]:
        """Keyword arguments every generation's sampling params take from the format (``stop``)."""
        return {"stop": list(self.stop)} if self.stop else {}


def render_problems(problems: Sequence[Problem], tokenizer: Any = None,
                    prompt_format: PromptFormat | None = None) -> list[Problem]:
    """``problems`` with their prompts placed in ``prompt_format``'s template, then passed through
    :func:`render_prompt` when the format allows the chat template (unchanged without either)."""
    fmt = prompt_format or PromptFormat()
    chat = fmt.chat and tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
    if fmt.template is None and not chat:
        return list(problems)
    return [dataclasses.replace(p, prompt=render_prompt(fmt.text(p.prompt), tokenizer if chat else None))
            for p in problems]


# ---------------------------------------------------------------------------------------------
# Loading rows
# ---------------------------------------------------------------------------------------------


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set to a true value."""
    truthy = {"1", "true", "yes", "on"}
    return any(os.environ.get(v, "").strip().lower() in truthy for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _download_hint(name: str, hub_id: str | None, hub_config: str | None) -> str:
    if hub_id is None:
        return f"dataset {name!r} has no hub id: set data.path= to a json, jsonl or parquet file or a save_to_disk directory"
    config = f", {hub_config!r}" if hub_config else ""
    return (
        f"download it on a machine with network access, e.g. "
        f"`datasets.load_dataset({hub_id!r}{config}).save_to_disk('/data/{name}')` "
        f"(or `huggingface-cli download --repo-type dataset {hub_id}`), copy it here and set "
        f"data.path=/data/{name} (a json, jsonl or parquet file or a save_to_disk directory also works)"
    )


def load_rows(
    name: str,
    hub_id: str | None,
    split: str,
    path: str | os.PathLike | None = None,
    hub_config: str | None = None,
):
    """The raw rows of a dataset as a ``datasets.Dataset`` (local ``path`` first, else the hub)."""
    if path is None and (hub_id is None or hub_offline()):
        # Checked before importing datasets so the error comes at once.
        why = "the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if hub_id else "no local copy given"
        raise DatasetUnavailableError(f"{name}: {why} and no data.path is set; {_download_hint(name, hub_id, hub_config)}")
    import datasets

    if path is not None:
        p = Path(path).expanduser()
        if not p.exists():
            raise DatasetUnavailableError(f"{name}: data.path={str(p)!r} does not exist; {_download_hint(name, hub_id, hub_config)}")
        if p.is_dir():
            if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() or (p / "state.json").exists():
                loaded = datasets.load_from_disk(str(p))
            else:
                # A folder of data files, e.g. a clone of the hub repository.
                loaded = datasets.load_dataset(str(p))
            return _pick_split(name, loaded, split, str(p))
        builders = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
        builder = builders.get(p.suffix.lower())
        if builder is None:
            raise DatasetUnavailableError(f"{name}: data.path={str(p)!r} must be a .json, .jsonl or .parquet file or a directory")
        return datasets.load_dataset(builder, data_files=str(p), split="train")
    try:
        return datasets.load_dataset(hub_id, hub_config, split=split)
    except Exception as e:  # noqa: BLE001 — re-raised as the one error users see, with the cause chained
        raise DatasetUnavailableError(f"{name}: loading {hub_id!r} from the hub failed ({e}); {_download_hint(name, hub_id, hub_config)}") from e


def _pick_split(name: str, loaded, split: str, where: str):
    import datasets

    if isinstance(loaded, datasets.Dataset):
        return loaded
    splits = list(loaded.keys())
    if split in loaded:
        return loaded[split]
    if len(splits) == 1:
        return loaded[splits[0]]
    raise DatasetUnavailableError(f"{name}: {where} holds splits {splits}, none named {split!r}; pass split=")


# ---------------------------------------------------------------------------------------------
# Rows → Problems
# ---------------------------------------------------------------------------------------------


def get_field(row: Mapping[str, Any], dotted: str) -> Any:
    """``row["a"]["b"]`` for ``"a.b"``; None when any step is missing."""
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def first_field(row: Mapping[str, Any], names: Sequence[str]) -> tuple[str | None, Any]:
    """The first of ``names`` present (not None) in ``row``, as ``(name, value)``."""
    for name in names:
        value = get_field(row, name)
        if value is not None:
            return name, value
    return None, None


def text_field(row: Mapping[str, Any], names: Sequence[str], what: str, chat: bool = False) -> str:
    """A non-empty string from the first present field of ``names``; BadRowError otherwise.

    ``chat``: the field may also hold chat messages, whose last user content is the text."""
    name, value = first_field(row, names)
    if name is None:
        raise BadRowError(f"missing {what} (looked for {', '.join(names)})")
    if chat:
        value = chat_user_content(value)
    if not isinstance(value, str):
        kinds = "a string or chat messages" if chat else "a string"
        raise BadRowError(f"{what} field {name!r} is {type(value).__name__}, not {kinds}")
    if not value.strip():
        raise BadRowError(f"empty {what} in field {name!r}")
    return value


def answer_field(row: Mapping[str, Any], names: Sequence[str]) -> str:
    """The gold answer as a string; integral numbers (AMC's float answers) become integers."""
    name, value = first_field(row, names)
    if name is None:
        raise BadRowError(f"missing answer (looked for {', '.join(names)})")
    if isinstance(value, bool):
        raise BadRowError(f"answer field {name!r} is bool, not a string or number")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise BadRowError(f"answer field {name!r} is {value}")
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise BadRowError(f"answer field {name!r} is {type(value).__name__}, not a string or number")
    if not value.strip():
        raise BadRowError(f"empty answer in field {name!r}")
    return value.strip()


def row_id(row: Mapping[str, Any], names: Sequence[str], name: str, index: int) -> str:
    """The row's own id when it has a scalar one, else ``"{name}-{index}"``."""
    _, value = first_field(row, names)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
        return str(value)
    return f"{name}-{index}"


def chat_user_content(value: Any) -> Any:
    """The last user message's content if ``value`` is a chat message list, else ``value`` itself."""
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        users = [m for m in value if m.get("role") == "user"] or list(value)
        return users[-1].get("content")
    return value


def _iter_rows(rows: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """Rows as dicts; a ``datasets.Dataset`` is read in column batches (far faster than row access)."""
    if hasattr(rows, "iter") and hasattr(rows, "column_names"):
        for batch in rows.iter(batch_size=4096):
            keys = list(batch)
            for values in zip(*(batch[k] for k in keys)):
                yield dict(zip(keys, values))
    else:
        yield from rows


def to_problem_set(
    name: str,
    source: str,
    rows: Iterable[Mapping[str, Any]],
    convert: Callable[[Mapping[str, Any], int], Problem],
    id_fields: Sequence[str] = ("id",),
    dedupe_prompts: bool = False,
) -> ProblemSet:
    """Convert every row, skipping (and recording) the bad ones; optionally drop repeated prompts."""
    problems: list[Problem] = []
    skipped: list[SkippedRow] = []
    seen_prompts: set[str] = set()
    seen_ids: dict[str, int] = {}
    duplicates = 0
    n_rows = 0
    for index, row in enumerate(_iter_rows(rows)):
        n_rows += 1
        try:
            problem = convert(row, index)
        except BadRowError as e:
            skipped.append(SkippedRow(row_id(row, id_fields, name, index), str(e)))
            continue
        if dedupe_prompts:
            if problem.prompt in seen_prompts:
                duplicates += 1
                continue
            seen_prompts.add(problem.prompt)
        if problem.id in seen_ids:
            # Ids key per-problem records (evaluation JSONL): keep them unique.
            seen_ids[problem.id] += 1
            problem = Problem(f"{problem.id}#{seen_ids[problem.id]}", problem.prompt, problem.answer)
        seen_ids.setdefault(problem.id, 0)
        problems.append(problem)
    if skipped:
        shown = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:10])
        more = f" (and {len(skipped) - 10} more)" if len(skipped) > 10 else ""
        logger.warning("%s: skipped %d bad rows of %d: %s%s", name, len(skipped), n_rows, shown, more)
    if duplicates:
        logger.info("%s: dropped %d rows repeating an earlier prompt", name, duplicates)
    logger.info("%s: %d problems from %s", name, len(problems), source)
    return ProblemSet(name=name, source=source, problems=problems, skipped=skipped)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a public dataset lives and which of its fields hold the id, question and gold answer."""

    name: str
    hub_id: str | None
    split: str
    question_fields: tuple[str, ...]
    answer_fields: tuple[str, ...]
    id_fields: tuple[str, ...] = ("id",)
    hub_config: str | None = None
    dedupe_prompts: bool = False


def load_spec(
    spec: DatasetSpec,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    template: str = MATH_PROMPT_TEMPLATE,
    question_of: Callable[[Mapping[str, Any]], Any] | None = None,
    answer_of: Callable[[Mapping[str, Any]], str] | None = None,
    limit: int | None = None,
) -> ProblemSet:
    """Load ``spec``'s rows and map them to Problems.

    ``question_of`` / ``answer_of`` override the field lookup for datasets whose question or answer
    needs unwrapping (DAPO's chat prompt, OlympiadBench's answer list); they raise BadRowError.
    """
    rows = load_rows(spec.name, spec.hub_id, split or spec.split, path, spec.hub_config)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))

    def convert(row: Mapping[str, Any], index: int) -> Problem:
        if question_of is not None:
            question = question_of(row)
        else:
            question = text_field(row, spec.question_fields, "prompt")
        answer = answer_of(row) if answer_of is not None else answer_field(row, spec.answer_fields)
        return Problem(row_id(row, spec.id_fields, spec.name, index), format_prompt(question, template), answer)

    source = str(path) if path is not None else f"hub:{spec.hub_id}" + (f"/{spec.hub_config}" if spec.hub_config else "")
    return to_problem_set(spec.name, source, rows, convert, spec.id_fields, spec.dedupe_prompts)
