"""A run that learned nothing says so: a step whose every reward item failed is skipped, ``reward.max_failed_steps``
such steps in a row stop the run in one line naming the reward function and the failure kinds (exit 1, the
step's checkpoint written, no export), and ``summary.json`` counts the failed items per kind."""

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import warm_python
import torch

from arrol_pl.tasks.reward import counted
from arrol_pl.train.step.rank_sync import ONE_RANK
from arrol_pl.train.step.reward_failures import RewardFailures, reward_failures

ROOT = Path(__file__).resolve().parents[3]


def scored(*status: str) -> SimpleNamespace:
    return SimpleNamespace(status=list(status), counts=counted(status))


def test_a_streak_of_steps_whose_every_item_failed_stops_the_run_and_a_scored_item_ends_it(caplog):
    watch = RewardFailures("mymod:fn", max_failed_steps=2)
    with caplog.at_level(logging.WARNING):
        assert watch.observe(0, scored("error", "error", "timeout"), ONE_RANK)
    assert watch.metrics == {
        "reward/failed_gold_error": 0.0,
        "reward/failed_timeout": 1.0,
        "reward/failed_deadline": 0.0,
        "reward/failed_error": 2.0,
    }
    assert (
        "step 0 skipped (reward_failed): reward mymod:fn failed on all 3 items (timeout 1, error 2); 1 of "
        "reward.max_failed_steps=2 in a row"
        in caplog.text
        and watch.failure is None
    )
    assert not watch.observe(1, scored("error", "ok"), ONE_RANK)  # one item scored: the streak ends
    assert not watch.observe(2, None, ONE_RANK)  # no survivors: neither
    assert watch.metrics["reward/failed_error"] == 0.0
    assert watch.observe(3, scored("error", "error"), ONE_RANK) and watch.failure is None
    assert not watch.observe(4, None, ONE_RANK) and watch.failure is None  # a step without survivors keeps it
    assert watch.observe(5, scored("error", "deadline"), ONE_RANK)
    assert watch.failure == (
        "reward mymod:fn failed on every item of 2 steps in a row (steps 3-5: deadline 1, "
        "error 3), so the run learned nothing from them (reward.max_failed_steps=2)"
    )
    never = RewardFailures("math_verify", max_failed_steps=0)
    assert all(never.observe(step, scored("gold_error"), ONE_RANK) for step in range(10)) and never.failure is None


def test_the_summary_counts_failed_items_per_kind_over_the_history():
    history = [
        {"reward/failed_error": 2.0, "reward/failed_timeout": 0.0},
        {"reward/accuracy": 1.0},
        {"reward/failed_error": 3.0, "reward/failed_timeout": 1.0},
    ]
    assert reward_failures(history) == {"timeout": 1, "error": 5}
    assert reward_failures([]) == {}


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_max_failed_steps_takes_a_whole_number(value):
    from arrol_pl.train.config.loader import ConfigError
    from arrol_pl.train.config.reward import RunRewardConfig

    with pytest.raises(ConfigError, match=r"^reward.max_failed_steps must be a whole number >= 0"):
        RunRewardConfig(max_failed_steps=value)


NAN_REWARD = """
def nan(prompt, completion, answer):
    return float("nan")
"""


@pytest.mark.slow
def test_a_reward_that_is_nan_on_every_item_stops_the_run_in_one_line_with_a_checkpoint(tmp_path):
    (tmp_path / "nan_reward.py").write_text(NAN_REWARD)
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "run.py"),
            "reward.function=nan_reward:nan",
            "reward.workers=0",
            "reward.max_failed_steps=2",
            "model.warm_start.steps=0",
            f"model.cache_dir={tmp_path / 'cache'}",
            "data.num_heldout=0",
            "algo.prompts_per_step=2",
            "algo.group_size=2",
            "algo.max_response_tokens=8",
            "engine.detect_length=4",
            "trainer.max_steps=5",
            "trainer.checkpoint_every=10",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 1, out.stderr[-4000:]
    run = tmp_path / "run"
    stopped = [line for line in out.stderr.splitlines() if line.startswith("stopped: ")]
    assert stopped == [
        f"stopped: reward nan_reward:nan failed on every item of 2 steps in a row (steps 0-1: error 8), "
        f"so the run learned nothing from them (reward.max_failed_steps=2); resume with "
        f"trainer.resume={run}"
    ], out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("reward nan_reward:nan failed on every item")
    assert summary["steps"] == 2 and summary["skipped_steps"] == {"no_survivors": 0, "reward_failed": 2}
    assert summary["reward_failures"] == {"error": 8}  # 2 prompts × G = 2 per step, none pruned in the cold start
    assert summary["checkpoint"] == str(run / "checkpoints" / "last.ckpt") and summary["export_dir"] is None
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
    assert not (run / "export").exists()
