"""How long a rank waits for the others: ``trainer.rank_timeout_minutes`` is the process group's timeout.

Two real gloo processes start their world with :func:`init_launcher_world`, then rank 0 works alone (sleeps) inside
:func:`rank_zero_first` while rank 1 waits in its barrier, as the other ranks wait while rank 0 prepares the
policy. A wait beyond the timeout fails in one line naming the collective and the setting with its value; a
shorter one passes (what ``arrol train`` prints for it after torchrun: ``tests/train/run/test_rank_failures.py``). No
engine: the timeout is the group's, whatever waits in it.
"""

from __future__ import annotations

import datetime
import re

import pytest
from test_distributed import launch

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import TrainerConfig

TIMEOUT_MINUTES = 0.1
"""6 s: beyond the start-up skew of two processes on a loaded machine, short enough for a test."""

RANK = """
import sys
import time

from arrol_pl.train.config.sections import TrainerConfig
from arrol_pl.train.run.world import init_launcher_world, rank_zero_first

seconds, minutes = float(sys.argv[1]), float(sys.argv[2])
rank = init_launcher_world(TrainerConfig(devices=2, strategy="fsdp", accelerator="cpu", rank_timeout_minutes=minutes))
rank_zero_first(lambda: time.sleep(seconds))  # rank 0 alone, rank 1 waits
print(f"rank {rank} done", flush=True)
"""


def two_ranks(rank0_seconds: float) -> list[tuple[int, str]]:
    return launch(["-c", RANK, str(rank0_seconds), str(TIMEOUT_MINUTES)], 2, timeout=120, check=False)


@pytest.mark.subprocess
def test_a_wait_within_the_timeout_passes():
    for r, (code, out) in enumerate(two_ranks(1.0)):
        assert code == 0 and f"rank {r} done" in out, out[-3000:]


@pytest.mark.subprocess
def test_a_wait_beyond_the_timeout_fails_naming_the_setting():
    (_, rank0), (code, rank1) = two_ranks(2.5 * TIMEOUT_MINUTES * 60)
    assert code != 0 and "rank 1 done" not in rank1
    assert "RankTimeout" in rank1 and "trainer.rank_timeout_minutes" in rank1, rank1[-3000:]
    # one line: the collective that waited, for what, and the override with its value
    line = next(line for line in rank1.splitlines() if "RankTimeout: " in line).split("RankTimeout: ", 1)[1]
    assert line.startswith(
        "rank 1 waited longer than trainer.rank_timeout_minutes=0.1 for rank 0 to prepare the "
        "policy (in barrier at train/run/world.py:"
    ), line
    assert re.search(r"; raise it if that work takes longer \(Timed out waiting 6000ms [^()\[\]]*\)$", line), line
    assert "rank 1 done" not in rank0


def test_lightning_strategy_gets_the_timeout_too():
    from arrol_pl.train.run.build import lightning_strategy

    strategy = lightning_strategy(TrainerConfig(devices=2, strategy="fsdp", accelerator="cpu", rank_timeout_minutes=90))
    assert strategy._timeout == datetime.timedelta(minutes=90)


@pytest.mark.parametrize("key, value", [("rank_timeout_minutes", 0), ("rank_timeout_minutes", -1.0), ("eval_chunk", 0)])
def test_the_keys_are_validated_by_name(key, value):
    with pytest.raises(ConfigError, match=f"trainer.{key}"):
        TrainerConfig(**{key: value})
