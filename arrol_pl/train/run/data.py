"""Prompts for training: a resumable stream of B problems per step (lists of Problems).

Decisions:
- The stream is a pure function of ``(seed, step)``: pass ``e`` over the training set is the
  permutation ``randperm(N)`` drawn from a generator seeded by ``(seed, e)``, cut into ``N // B``
  batches (the remainder of a pass is dropped, as ``drop_last``). Step ``k`` trains on batch
  ``k mod (N // B)`` of pass ``k // (N // B)``, so a run resumed at step ``k`` sees exactly the prompts
  the uninterrupted run saw, whatever happened before (Lightning restarts a plain ``DataLoader`` at
  the beginning of its epoch).
- One Lightning epoch covers the whole run (``max_steps`` batches); passes over the data are the
  stream's business. The progress bar therefore counts steps of ``trainer.max_steps``.
- The position saved in a checkpoint is the number of steps done (``trainer.global_step``: every step,
  skipped ones included, steps the optimizer once), with what the stream depends on; resuming with a
  different training set, seed or B fails naming what changed.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterator, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, Sampler

from arrol_pl.train.config.loader import ConfigError


def stream_identity(problems: Sequence, prompts_per_step: int, seed: int) -> dict[str, Any]:
    """What the stream depends on; the fingerprint hashes the problems' ids and answers in order (not the
    prompts, which a chat template may rewrite)."""
    h = hashlib.sha256()
    for p in problems:
        h.update(f"{p.id}\x00{p.answer}\x00".encode())
    return {
        "seed": seed,
        "prompts_per_step": prompts_per_step,
        "num_problems": len(problems),
        "fingerprint": h.hexdigest()[:16],
    }


class PromptStream(Sampler[list[int]]):
    """Batches of indices into ``num_problems`` for steps ``start .. total - 1`` (see the module docstring)."""

    def __init__(self, num_problems: int, prompts_per_step: int, total: int, seed: int, start: int = 0) -> None:
        self.num_problems = num_problems
        self.prompts_per_step = prompts_per_step
        self.per_pass = num_problems // prompts_per_step
        self.total = total
        self.seed = seed
        self.start = start

    def __len__(self) -> int:
        # Lightning counts batches of the epoch from 0 and restores how many were done: the full length.
        return self.total

    def batch(self, step: int) -> list[int]:
        passes, k = divmod(step, self.per_pass)
        order = torch.randperm(
            self.num_problems, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + passes)
        )
        return order[k * self.prompts_per_step : (k + 1) * self.prompts_per_step].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start, self.total):
            yield self.batch(step)


class PromptBatch:
    """One step's problems, in stream order (iterable, indexable, sized).

    Deliberately not a list or a ``Sequence``: Lightning's precision plugins walk a batch's sequences and
    dataclasses to cast its floating tensors, and refuse frozen dataclasses such as ``Problem``
    (``trainer.precision=bf16-true`` failed on a list of them). The prompts are text for the engine; nothing
    in a batch is a tensor to cast.
    """

    __slots__ = ("problems",)

    def __init__(self, problems: Sequence) -> None:
        self.problems = tuple(problems)

    def __iter__(self) -> Iterator:
        return iter(self.problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index: int):
        return self.problems[index]


class PromptDataModule(L.LightningDataModule):
    """The training stream; its ``state_dict`` (saved by Lightning in every checkpoint) is the position."""

    def __init__(self, problems: Sequence, prompts_per_step: int, seed: int = 0, max_steps: int = 1) -> None:
        super().__init__()
        check_fits(len(problems), prompts_per_step)
        self.problems = list(problems)
        self.prompts_per_step = prompts_per_step
        self.seed = seed
        self.max_steps = max_steps
        self.start = 0
        self.identity = stream_identity(self.problems, prompts_per_step, seed)

    def state_dict(self) -> dict[str, Any]:
        return {"position": int(self.trainer.global_step) if self.trainer is not None else self.start, **self.identity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_stream(state, self.identity)
        self.start = int(state["position"])

    def train_dataloader(self) -> DataLoader:
        stream = PromptStream(len(self.problems), self.prompts_per_step, self.max_steps, self.seed, self.start)
        return DataLoader(self.problems, batch_sampler=stream, collate_fn=PromptBatch)


def check_fits(num_problems: int, prompts_per_step: int) -> None:
    """The prompts drawn per step (B, or more with the group screen) need a training set at least that large."""
    if num_problems < prompts_per_step:
        raise ConfigError(
            f"algo.prompts_per_step={prompts_per_step} is larger than the training set ({num_problems} problems); "
            "with pruning.screen the figure is the prompts drawn per step, oversampling included"
        )


def check_stream(saved: dict[str, Any], current: dict[str, Any], rows_to_skip: bool = False) -> None:
    """Refuse to resume a stream on other data: the prompts after the resume point would differ. ``rows_to_skip``:
    ``current`` is of the problems as loaded, before the prompts the engine cannot take are skipped, so a stream
    saved with fewer problems is checked on its data once they are (when the stream loads its state)."""
    what = {
        "seed": "trainer.seed",
        "prompts_per_step": "algo.prompts_per_step",
        "num_problems": "the training set size",
        "fingerprint": "the training problems",
    }
    if rows_to_skip and saved.get("num_problems", 0) < current["num_problems"]:
        what = {key: name for key, name in what.items() if key in ("seed", "prompts_per_step")}
    for key, name in what.items():
        if saved.get(key) != current[key]:
            raise ConfigError(
                f"trainer.resume: the checkpoint's prompt stream was made with {name} = {saved.get(key)!r}, "
                f"this run has {current[key]!r}; resuming would train on other prompts"
            )
