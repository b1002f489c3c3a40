"""Rows → Problems: field lookup, the gold answer (and a worked solution) out of a row, and the loop that converts a
source's rows, skipping the bad ones; :func:`load_spec`, what every dataset adapter calls.

Decisions:
- A bad row (a broken line, a missing or empty prompt/answer, a field of the wrong type, a gold that
  does not match ``answer_pattern``) never stops a run: it is skipped, recorded in
  :attr:`~arrol_pl.tasks.problem.ProblemSet.skipped` with its id (or file and line where it has none), its reason
  and a kind that is counted, and logged once per load. A source with no usable row at all is an error naming
  the file, the fields looked for and the count per reason.
- Repeated prompts are kept (a dataset may weight a problem by repeating it) and counted in one warning per load;
  an adapter whose hub copy repeats its rows by accident drops them (``dedupe_prompts``: DAPO-Math-17k). Held-out
  prompts that are also training prompts are counted in one warning too (:func:`report_overlap`).
- A prompt the engine cannot take (its tokens in the model's prompt format plus the response budget exceed the
  context) is a bad row too, found once the tokenizer exists (:func:`skip_overlong`): counted as ``too_long`` in
  the same record, so no drawn row can stop a run. A prompt far beyond the room is judged by a prefix of it, so a
  megabyte-long row costs the tokenization of a few kilobytes.
- ``answer_pattern`` (a regex with one group, ``#### (.+)$`` for GSM8K) takes the gold out of a worked
  solution; thousands separators of the extracted number are dropped (``1,250`` → ``1250``). The text
  before the match, ending in ``\\boxed{gold}``, becomes the problem's worked ``solution``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from arrol_pl.tasks.problem import BadRowError, DatasetUnavailableError, Problem, ProblemSet, SkippedRow
from arrol_pl.tasks.prompts import MATH_PROMPT_TEMPLATE, format_prompt
from arrol_pl.tasks.sources import Row, load_rows

logger = logging.getLogger(__name__)


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
        raise ValueError(
            f"answer_pattern {pattern!r} must have exactly one group (the answer), it has {compiled.groups}"
        )
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
    """Convert every row, skipping (and recording) the bad ones; repeated prompts are dropped with
    ``dedupe_prompts``, else kept with a warning that counts them.

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
        if problem.prompt in seen_prompts:
            duplicates += 1
            if dedupe_prompts:
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
        logger.warning(
            "%s: skipped %d bad row%s of %d (%s): %s%s",
            name,
            len(skipped),
            "" if len(skipped) == 1 else "s",
            n_rows,
            counts,
            shown,
            more,
        )
    if duplicates and dedupe_prompts:
        logger.info("%s: dropped %d rows repeating an earlier prompt", name, duplicates)
    elif duplicates:
        logger.warning(
            "%s: %d duplicate prompts in %s (kept: a repeated prompt is drawn and evaluated as often as it appears)",
            name,
            duplicates,
            source,
        )
    logger.info("%s: %d problems from %s", name, len(problems), source)
    return result


def report_overlap(train: ProblemSet, heldout: ProblemSet) -> int:
    """The held-out problems whose prompt is also a training prompt, counted and logged in one line (their accuracy
    measures recall of training prompts, not what the policy learned); the run goes on. Returns the count."""
    prompts = {p.prompt for p in train.problems}
    shared = sum(p.prompt in prompts for p in heldout.problems)
    if shared and shared == len(heldout.problems) and heldout.source == train.source:
        logger.warning("%s: held-out data is the training data (%s)", heldout.name, heldout.source)
    elif shared:
        logger.warning(
            "%s: %d of the %d held-out prompts (%s) are also training prompts (%s)",
            heldout.name,
            shared,
            len(heldout.problems),
            heldout.source,
            train.source,
        )
    return shared


PREFIX_CHARS_PER_TOKEN = 32
"""Characters of a long prompt tokenized per token of room to judge it by that prefix: a prefix that alone takes
more than the room settles it; one that does not (tokens longer than this on average) sends the whole text."""
PREFIX_SLACK = 64
"""Tokens a prefix may count beyond the whole text's (its cut word tokenized differently): a prompt is judged
too long by its prefix only past the room by more than this."""


def prompt_tokens(tokenizer: Any, text: str, room: int) -> int:
    """Tokens of ``text`` as the engine encodes a prompt (no special tokens added); past ``room`` it may be a lower
    bound read from a prefix (module docstring)."""
    cut = PREFIX_CHARS_PER_TOKEN * (room + PREFIX_SLACK)
    if len(text) > cut:
        head = len(tokenizer.encode(text[:cut], add_special_tokens=False)) - PREFIX_SLACK
        if head > room:
            return head
    return len(tokenizer.encode(text, add_special_tokens=False))


def skip_overlong(
    loaded: ProblemSet, rendered: Sequence[Problem], tokenizer: Any, room: int, why: str
) -> list[Problem]:
    """The ``rendered`` problems (``loaded``'s, in order, in the model's prompt format) whose prompt takes at most
    ``room`` tokens; the others leave ``loaded.problems`` and join its skipped rows (kind ``too_long``), logged as
    every bad row is. ``why`` names the context and the response budget the room is left by."""
    if len(rendered) != len(loaded.problems):
        raise ValueError(f"{len(rendered)} rendered problems for the {len(loaded.problems)} of {loaded.name}")
    kept, dropped, skipped = [], set(), []
    for i, problem in enumerate(rendered):
        n = prompt_tokens(tokenizer, problem.prompt, room)
        if n > room:
            dropped.add(i)
            skipped.append(SkippedRow(problem.id, f"prompt of {n} tokens > {room}", "too_long"))
        else:
            kept.append(problem)
    if skipped:
        loaded.problems = [p for i, p in enumerate(loaded.problems) if i not in dropped]
        loaded.skipped = [*loaded.skipped, *skipped]
        shown = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:10])
        more = f" (and {len(skipped) - 10} more)" if len(skipped) > 10 else ""
        logger.warning(
            "%s: skipped %d of %d rows whose prompt the engine cannot take (too_long %d; %s): %s%s",
            loaded.name,
            len(skipped),
            len(rendered),
            len(skipped),
            why,
            shown,
            more,
        )
    return kept


def first_record(rows: Iterable[Row], seen: list) -> Iterable[Row]:
    """``rows`` as they are, the first that is a record appended to ``seen``: the fields a source with no usable
    row does have, for its error."""
    for where, row in rows:
        if not seen and isinstance(row, Mapping):
            seen.append(row)
        yield where, row


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
    seen: list[Mapping[str, Any]] = []
    rows = first_record(rows, seen)

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
        fields = (
            "data.heldout_fields.prompt_field / answer_field"
            if "heldout" in key
            else "data.prompt_field / data.answer_field"
        )
        has = f"; its rows have the fields {', '.join(map(str, seen[0]))}: set {fields}" if seen else ""
        raise DatasetUnavailableError(
            f"{spec.name}: no usable problem in {source} ({key}): {problems.rows} rows, looked for {looked}; "
            f"skipped: {counts}{has}"
        )
    return problems
