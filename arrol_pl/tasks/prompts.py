"""The paper's prompt template and how a problem's prompt becomes the text the policy is fed.

Decisions:
- A problem's ``prompt`` is the user message: the question followed by the instruction to reason step
  by step and put the final answer in ``\\boxed{}`` (the template used with the paper's Qwen3 and
  Llama-3.2 models). Chat templating is applied later, per model, by :func:`render_prompt`: only a
  tokenizer with a chat template changes the text.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from arrol_pl.tasks.problem import Problem

MATH_PROMPT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
"""The paper's instruction: reason step by step, final answer in ``\\boxed{}``."""


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

DATA_RECORD = "data_config.json"
"""Beside an exported policy: its run's ``data:`` section, what it trained on and held out (names, paths, fields,
options), which ``arrol evaluate`` scores when told no datasets (:mod:`arrol_pl.analysis.trained_data`)."""


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


def render_problems(
    problems: Sequence[Problem], tokenizer: Any = None, prompt_format: PromptFormat | None = None
) -> list[Problem]:
    """``problems`` with their prompts placed in ``prompt_format``'s template, then passed through
    :func:`render_prompt` when the format allows the chat template (unchanged without either)."""
    fmt = prompt_format or PromptFormat()
    chat = fmt.chat and tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
    if fmt.template is None and not chat:
        return list(problems)
    return [
        dataclasses.replace(p, prompt=render_prompt(fmt.text(p.prompt), tokenizer if chat else None)) for p in problems
    ]
