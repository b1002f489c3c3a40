"""Prompts for training: a seeded shuffle of the training problems, B per step (lists of Problems)."""

from __future__ import annotations

from typing import Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader


class PromptDataModule(L.LightningDataModule):
    def __init__(self, problems: Sequence, prompts_per_step: int, seed: int = 0) -> None:
        super().__init__()
        if len(problems) < prompts_per_step:
            raise ValueError(
                f"the training set has {len(problems)} problems, fewer than algo.prompts_per_step={prompts_per_step}"
            )
        self.problems = list(problems)
        self.prompts_per_step = prompts_per_step
        self.seed = seed

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.problems,
            batch_size=self.prompts_per_step,
            shuffle=True,
            drop_last=True,
            collate_fn=list,
            generator=torch.Generator().manual_seed(self.seed),
        )
