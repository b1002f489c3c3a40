"""``Problem(id, prompt, answer)``, the paper's prompt template, and the row → Problem machinery shared
by the dataset adapters.

Decisions:
- A problem's ``prompt`` is the user message: the question followed by the instruction to reason step
  by step and put the final answer in ``\\boxed{}`` (the template used with the paper's Qwen3 and
  Llama-3.2 models). Chat templating is applied later, per model, by :func:`render_prompt`: only a
  tokenizer with a chat template changes the text.
- Rows come from ``path`` (a json/jsonl/parquet file, a ``save_to_disk`` directory, or a folder of
  such files) when given, else from the adapter's hub id. json and jsonl files are read here, line by
  line, so one broken line (invalid JSON, bytes that are not UTF-8) costs that line only; parquet,
  saved datasets and the hub go through ``datasets``. Offline without a path fails at once with
  :class:`DatasetUnavailableError` naming what to download and the key (``data.path`` or
  ``data.heldout_path``) that must point at it; the hub is never tried offline, where a name stalls
  ~23 s before failing.
- A bad row (a broken line, a missing or empty prompt/answer, a field of the wrong type, a gold that
  does not match ``answer_pattern``) never stops a run: it is skipped, recorded in
  :attr:`ProblemSet.skipped` with its id (or file and line where it has none), its reason and a kind
  that is counted, and logged once per load. A source with no usable row at all is an error naming
  the file, the fields looked for and the count per reason.
- ``answer_pattern`` (a regex with one group, ``#### (.+)$`` for GSM8K) takes the gold out of a worked
  solution; thousands separators of the extracted number are dropped (``1,250`` → ``1250``). The text
  before the match, ending in ``\\boxed{gold}``, becomes the problem's worked ``solution``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

logger = logging.getLogger(__name__)

MATH_PROMPT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
"""The paper's instruction: reason step by step, final answer in ``\\boxed{}``."""


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: the prompt shown to the policy and the gold answer it is scored against."""

    id: str
    prompt: str
    answer: str
    solution: str | None = None
    """A worked solution ending in ``\\boxed{answer}``, when the dataset has one (the tiny policy's warm start)."""


@dataclass(frozen=True)
class SkippedRow:
    """A row that became no Problem: its id (or ``file:line`` without one), why, and the counted kind."""

    id: str
    reason: str
    kind: str = "bad_row"


@dataclass
class ProblemSet:
    """Problems loaded from one source, plus the rows that were skipped and why."""

    name: str
    source: str
    problems: list[Problem]
    skipped: list[SkippedRow] = field(default_factory=list)
    rows: int | None = None
    """Rows read from the source (None for generated tasks)."""

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self):
        return iter(self.problems)

    def __getitem__(self, i):
        return self.problems[i]

    def skip_counts(self) -> dict[str, int]:
        """Skipped rows per kind (``{"invalid_json": 1, "missing_answer": 3}``)."""
        return dict(sorted(Counter(s.kind for s in self.skipped).items()))

    def report(self) -> dict[str, Any]:
        """What ``summary.json`` records of this load: source, rows read, problems, skipped per kind."""
        return {"source": self.source, "rows": self.rows, "problems": len(self.problems), "skipped": self.skip_counts()}


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded: offline without a local copy, a missing path, a hub failure, or no usable row."""


class BadRowError(ValueError):
    """One row cannot become a Problem; the loader skips it and records the reason and its ``kind``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


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


PROMPT_FORMAT_FILE = "prompt_format.json"


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

    def save(self, directory: Path) -> None:
        """Write ``directory/prompt_format.json`` (beside an exported policy: the format it was trained in)."""
        record = {"template": self.template, "chat": self.chat, "stop": list(self.stop)}
        (Path(directory) / PROMPT_FORMAT_FILE).write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> "PromptFormat | None":
        """The format saved by :meth:`save` in ``directory``; None when it has none (exports of older runs)."""
        path = Path(directory) / PROMPT_FORMAT_FILE
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        return cls(record["template"], record["chat"], tuple(record["stop"]))


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

DATA_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
SPLIT_WORDS = ("train", "test", "validation", "valid", "dev")
"""Words that name a split in a data file's path (``test-00000-of-00001.parquet``, ``data/train.jsonl``)."""

Row = tuple[str, "Mapping[str, Any] | BadRowError"]
"""``(where, row)``: the row's place (``file:line`` of json lines, ``file row i`` of a table, counted from
0) and the record, or the error that made it unreadable."""


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set to a true value."""
    truthy = {"1", "true", "yes", "on"}
    return any(os.environ.get(v, "").strip().lower() in truthy for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _download_hint(name: str, hub_id: str | None, hub_config: str | None, key: str) -> str:
    if hub_id is None:
        return f"dataset {name!r} has no hub id: set {key}= to a json, jsonl or parquet file or a save_to_disk directory"
    config = f", {hub_config!r}" if hub_config else ""
    return (
        f"download it on a machine with network access, e.g. "
        f"`datasets.load_dataset({hub_id!r}{config}).save_to_disk('/data/{name}')` "
        f"(or `huggingface-cli download --repo-type dataset {hub_id}`), copy it here and set "
        f"{key}=/data/{name} (a json, jsonl or parquet file or a save_to_disk directory also works)"
    )


def load_rows(
    name: str,
    hub_id: str | None,
    split: str,
    path: str | os.PathLike | None = None,
    hub_config: str | None = None,
    key: str = "data.path",
) -> tuple[str, Iterator[Row]]:
    """``(source, rows)``: where the rows come from and the rows, from the local ``path`` first, else the hub.

    ``key`` is the config key of ``path``, named in every error.
    """
    if path is None and (hub_id is None or hub_offline()):
        # Checked before importing datasets so the error comes at once.
        why = "the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if hub_id else "no local copy given"
        raise DatasetUnavailableError(f"{name}: {why} and no {key} is set; {_download_hint(name, hub_id, hub_config, key)}")
    if path is None:
        import datasets

        try:
            loaded = datasets.load_dataset(hub_id, hub_config, split=split)
        except Exception as e:  # noqa: BLE001 — re-raised as the one error users see, with the cause chained
            raise DatasetUnavailableError(
                f"{name}: loading {hub_id!r} from the hub failed ({e}); {_download_hint(name, hub_id, hub_config, key)}"
            ) from e
        source = f"hub:{hub_id}" + (f"/{hub_config}" if hub_config else "")
        return source, _dataset_rows(loaded, source)
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetUnavailableError(f"{name}: {key}={str(p)!r} does not exist; {_download_hint(name, hub_id, hub_config, key)}")
    if p.is_dir():
        if any((p / marker).exists() for marker in ("dataset_info.json", "dataset_dict.json", "state.json")):
            import datasets

            return str(p), _dataset_rows(_pick_split(name, datasets.load_from_disk(str(p)), split, key), str(p))
        files = data_files(name, p, split, key)
        return str(p), itertools.chain.from_iterable(_file_rows(f, f.relative_to(p).as_posix()) for f in files)
    if p.suffix.lower() not in DATA_SUFFIXES:
        raise DatasetUnavailableError(f"{name}: {key}={str(p)!r} must be a .json, .jsonl or .parquet file or a directory")
    return str(p), _file_rows(p, p.name)


def data_files(name: str, folder: Path, split: str, key: str) -> list[Path]:
    """The data files of ``folder`` to read for ``split`` (a clone of a hub repository, or a few jsonl files).

    Files whose path names a split keep only ``split``'s; those must sit in one folder (GSM8K's
    ``main/`` and ``socratic/`` are two datasets). A folder whose files name no split is read whole
    (AIME'25 as ``aime2025-I.jsonl`` + ``aime2025-II.jsonl``).
    """
    files = sorted(
        f for f in folder.rglob("*")
        if f.is_file() and f.suffix.lower() in DATA_SUFFIXES
        and not any(part.startswith(".") for part in f.relative_to(folder).parts)
    )
    if not files:
        raise DatasetUnavailableError(f"{name}: {key}={str(folder)!r} holds no .json, .jsonl or .parquet file")
    words = {f: set(re.split(r"[/_.\-]", f.relative_to(folder).as_posix().lower())) & set(SPLIT_WORDS) for f in files}
    named = sorted(set().union(*words.values()))
    if named:
        files = [f for f in files if split in words[f]]
        if not files:
            split_key = "data.heldout_split" if "heldout" in key else "data.split"
            raise DatasetUnavailableError(
                f"{name}: {key}={str(folder)!r} holds files of splits {named}, none named {split!r}; set {split_key}="
            )
    folders = sorted({f.parent.relative_to(folder).as_posix() for f in files})
    if len(folders) > 1:
        raise DatasetUnavailableError(
            f"{name}: {key}={str(folder)!r} holds {split!r} files in {len(folders)} folders ({', '.join(folders)}); "
            f"set {key} to the one to read, e.g. {key}={str(folder / folders[0])!r}"
        )
    return files


def _file_rows(path: Path, label: str) -> Iterator[Row]:
    if DATA_SUFFIXES[path.suffix.lower()] == "parquet":
        import datasets

        yield from _dataset_rows(datasets.load_dataset("parquet", data_files=str(path), split="train"), label)
        return
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if path.suffix.lower() == ".json" and head.startswith(b"["):
        yield from _json_array_rows(path, label)
    else:
        yield from _json_lines(path, label)


def _json_lines(path: Path, label: str) -> Iterator[Row]:
    """One row per non-blank line; a line that is not UTF-8, not JSON or not an object is a bad row of its own."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{label}:{number}"
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                yield where, BadRowError(f"line is not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})", "not_utf8")
                continue
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                yield where, BadRowError(f"invalid JSON ({e.msg}, column {e.colno})", "invalid_json")
                continue
            yield where, row if isinstance(row, dict) else BadRowError(
                f"line holds a JSON {type(row).__name__}, not an object", "not_an_object"
            )


def _json_array_rows(path: Path, label: str) -> Iterator[Row]:
    """A file holding one JSON array: unlike JSON lines, one broken byte breaks the whole file."""
    try:
        rows = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetUnavailableError(
            f"{path}: not a readable JSON array ({e}); write the rows as JSON lines (.jsonl) so a broken row "
            f"costs that row only"
        ) from None
    for i, row in enumerate(rows):
        where = f"{label}[{i}]"
        yield where, row if isinstance(row, dict) else BadRowError(
            f"item holds a JSON {type(row).__name__}, not an object", "not_an_object"
        )


def _dataset_rows(rows, label: str) -> Iterator[Row]:
    """Rows of a ``datasets.Dataset`` as dicts, read in column batches (far faster than row access)."""
    index = 0
    for batch in rows.iter(batch_size=4096):
        keys = list(batch)
        for values in zip(*(batch[k] for k in keys)):
            yield f"{label} row {index}", dict(zip(keys, values))
            index += 1


def _pick_split(name: str, loaded, split: str, key: str):
    import datasets

    if isinstance(loaded, datasets.Dataset):
        return loaded
    splits = list(loaded.keys())
    if split in loaded:
        return loaded[split]
    if len(splits) == 1:
        return loaded[splits[0]]
    split_key = "data.heldout_split" if "heldout" in key else "data.split"
    raise DatasetUnavailableError(f"{name}: {key} holds splits {splits}, none named {split!r}; set {split_key}=")


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
        raise BadRowError(f"missing {what} (looked for {', '.join(names)})", f"missing_{what}")
    if chat:
        value = chat_user_content(value)
    if not isinstance(value, str):
        kinds = "a string or chat messages" if chat else "a string"
        raise BadRowError(f"{what} field {name!r} is {type(value).__name__}, not {kinds}", "wrong_type")
    if not value.strip():
        raise BadRowError(f"empty {what} in field {name!r}", f"empty_{what}")
    return value


def answer_value(row: Mapping[str, Any], names: Sequence[str]) -> str:
    """The gold answer as a string; integral numbers (AMC's float answers) become integers."""
    name, value = first_field(row, names)
    if name is None:
        raise BadRowError(f"missing answer (looked for {', '.join(names)})", "missing_answer")
    if isinstance(value, bool):
        raise BadRowError(f"answer field {name!r} is bool, not a string or number", "wrong_type")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise BadRowError(f"answer field {name!r} is {value}", "not_finite")
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise BadRowError(f"answer field {name!r} is {type(value).__name__}, not a string or number", "wrong_type")
    if not value.strip():
        raise BadRowError(f"empty answer in field {name!r}", "empty_answer")
    return value.strip()


_THOUSANDS = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?")


def compile_answer_pattern(pattern: str) -> re.Pattern:
    """``pattern`` compiled (``^``/``$`` match at line ends); ValueError unless it has exactly one group."""
    try:
        compiled = re.compile(pattern, re.MULTILINE)
    except re.error as e:
        raise ValueError(f"answer_pattern {pattern!r} is not a regular expression: {e}") from None
    if compiled.groups != 1:
        raise ValueError(f"answer_pattern {pattern!r} must have exactly one group (the answer), it has {compiled.groups}")
    return compiled


def extract_answer(text: str, pattern: re.Pattern) -> tuple[str, str]:
    """``(gold, text before the match)`` of a worked solution; BadRowError when ``pattern`` finds nothing.

    The last match counts (a solution may quote the pattern earlier); a number's thousands
    separators are dropped so math-verify compares ``1250`` with ``1250``.
    """
    matches = list(pattern.finditer(text))
    if not matches:
        raise BadRowError(f"answer does not match answer_pattern {pattern.pattern!r}", "no_pattern_match")
    match = matches[-1]
    gold = match.group(1).strip()
    if _THOUSANDS.fullmatch(gold):
        gold = gold.replace(",", "")
    if not gold:
        raise BadRowError(f"answer_pattern {pattern.pattern!r} matched an empty answer", "empty_answer")
    return gold, text[: match.start()].rstrip()


def boxed_solution(text: str, gold: str) -> str:
    """``text`` ending in ``\\boxed{gold}`` (appended unless the text already boxes an answer)."""
    from arrol_pl.tasks.extraction import extract_boxed

    return text if extract_boxed(text) is not None else f"{text}\n\\boxed{{{gold}}}".lstrip()


def row_id(row: Mapping[str, Any], names: Sequence[str]) -> str | None:
    """The row's own id when it has a scalar one."""
    _, value = first_field(row, names)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
        return str(value)
    return None


def chat_user_content(value: Any) -> Any:
    """The last user message's content if ``value`` is a chat message list, else ``value`` itself."""
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        users = [m for m in value if m.get("role") == "user"] or list(value)
        return users[-1].get("content")
    return value


def to_problem_set(
    name: str,
    source: str,
    rows: Iterable[Row],
    convert: Callable[[Mapping[str, Any], int], Problem],
    id_fields: Sequence[str] = ("id",),
    dedupe_prompts: bool = False,
) -> ProblemSet:
    """Convert every row, skipping (and recording) the bad ones; optionally drop repeated prompts.

    A row without an id of its own becomes ``"{name}-{index}"`` as a problem, and is reported by
    its place (``file:line``) when skipped."""
    problems: list[Problem] = []
    skipped: list[SkippedRow] = []
    seen_prompts: set[str] = set()
    seen_ids: dict[str, int] = {}
    duplicates = 0
    n_rows = 0
    for index, (where, row) in enumerate(rows):
        n_rows += 1
        if isinstance(row, BadRowError):
            skipped.append(SkippedRow(where, str(row), row.kind))
            continue
        try:
            problem = convert(row, index)
        except BadRowError as e:
            skipped.append(SkippedRow(row_id(row, id_fields) or where, str(e), e.kind))
            continue
        if dedupe_prompts:
            if problem.prompt in seen_prompts:
                duplicates += 1
                continue
            seen_prompts.add(problem.prompt)
        if problem.id in seen_ids:
            # Ids key per-problem records (evaluation JSONL): keep them unique.
            seen_ids[problem.id] += 1
            problem = dataclasses.replace(problem, id=f"{problem.id}#{seen_ids[problem.id]}")
        seen_ids.setdefault(problem.id, 0)
        problems.append(problem)
    result = ProblemSet(name=name, source=source, problems=problems, skipped=skipped, rows=n_rows)
    if skipped:
        shown = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:10])
        more = f" (and {len(skipped) - 10} more)" if len(skipped) > 10 else ""
        counts = ", ".join(f"{k} {v}" for k, v in result.skip_counts().items())
        logger.warning("%s: skipped %d bad rows of %d (%s): %s%s", name, len(skipped), n_rows, counts, shown, more)
    if duplicates:
        logger.info("%s: dropped %d rows repeating an earlier prompt", name, duplicates)
    logger.info("%s: %d problems from %s", name, len(problems), source)
    return result


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
    answer_pattern: str | None = None
    """Regex with one group that takes the gold out of the answer field (GSM8K: ``#### (.+)$``)."""
    solution_fields: tuple[str, ...] = ()
    """Fields holding a worked solution (ending in ``\\boxed{}`` or not: the gold is appended)."""


def load_spec(
    spec: DatasetSpec,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    template: str = MATH_PROMPT_TEMPLATE,
    question_of: Callable[[Mapping[str, Any], DatasetSpec], Any] | None = None,
    answer_of: Callable[[Mapping[str, Any], DatasetSpec], str] | None = None,
    limit: int | None = None,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    solution_field: str | None = None,
    answer_pattern: str | None = None,
    key: str = "data.path",
) -> ProblemSet:
    """Load ``spec``'s rows and map them to Problems; DatasetUnavailableError if none is usable.

    ``prompt_field`` / ``answer_field`` / ``id_field`` / ``solution_field`` / ``answer_pattern`` replace
    the spec's own (dotted paths reach into nested records; a prompt field may hold chat messages).
    ``question_of`` / ``answer_of`` override the field lookup for datasets whose question or answer
    needs unwrapping (DAPO's chat prompt, OlympiadBench's answer list); they raise BadRowError.
    ``key`` is the config key of ``path``, named in errors.
    """
    spec = dataclasses.replace(
        spec,
        question_fields=(prompt_field,) if prompt_field else spec.question_fields,
        answer_fields=(answer_field,) if answer_field else spec.answer_fields,
        id_fields=(id_field,) if id_field else spec.id_fields,
        solution_fields=(solution_field,) if solution_field else spec.solution_fields,
        answer_pattern=answer_pattern or spec.answer_pattern,
    )
    pattern = compile_answer_pattern(spec.answer_pattern) if spec.answer_pattern else None
    source, rows = load_rows(spec.name, spec.hub_id, split or spec.split, path, spec.hub_config, key)
    if limit is not None:
        rows = itertools.islice(rows, limit)

    def convert(row: Mapping[str, Any], index: int) -> Problem:
        if question_of is not None:
            question = question_of(row, spec)
        else:
            question = text_field(row, spec.question_fields, "prompt", chat=True)
        answer = answer_of(row, spec) if answer_of is not None else answer_value(row, spec.answer_fields)
        solution = None
        if pattern is not None:
            answer, before = extract_answer(answer, pattern)
            solution = before or None
        _, worked = first_field(row, spec.solution_fields)
        if isinstance(worked, str) and worked.strip():
            solution = worked.strip()
        return Problem(
            row_id(row, spec.id_fields) or f"{spec.name}-{index}",
            format_prompt(question, template),
            answer,
            boxed_solution(solution, answer) if solution else None,
        )

    problems = to_problem_set(spec.name, source, rows, convert, spec.id_fields, spec.dedupe_prompts)
    if not problems.problems:
        looked = f"prompt in {', '.join(spec.question_fields)}; answer in {', '.join(spec.answer_fields)}"
        if pattern is not None:
            looked += f" matching {pattern.pattern!r}"
        counts = ", ".join(f"{k} {v}" for k, v in problems.skip_counts().items()) or "the source is empty"
        raise DatasetUnavailableError(
            f"{spec.name}: no usable problem in {source} ({key}): {problems.rows} rows, looked for {looked}; "
            f"skipped: {counts}"
        )
    return problems
