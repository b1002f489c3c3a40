"""A reward function of the user's own (``reward.function=module:function``): found by import path, from the
working directory too; scored in the real worker processes, which import it themselves; correct above 0.5; a
function that raises, returns no number or hangs scores 0 with its status, counted and reported; the shipped
example (``examples/rewards.py``) on the completions it is written for."""

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from arrol_pl.tasks.reward import MathReward, RewardConfig
from arrol_pl.tasks.reward_function import CORRECT_ABOVE, FunctionReward, make_reward
from arrol_pl.tasks.user_function import call_reward, resolve_reward_function

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples.rewards:json_answer_match"

GRADED = '''
import time


def graded(prompt, completion, answer):
    """0.25 per character of the gold the completion contains, the prompt's length modulo 2 on top."""
    return 0.25 * sum(ch in completion for ch in answer) + len(prompt) % 2


def raises(prompt, completion, answer):
    if completion == "bad":
        raise KeyError("no field")
    return 1.0


def not_a_number(prompt, completion, answer):
    return "yes" if completion else float("nan")


def sleeps(prompt, completion, answer):
    time.sleep(float(completion))
    return 1.0
'''

TRAINER_ONLY = """
import multiprocessing

if multiprocessing.parent_process() is not None:
    raise ImportError("this module imports in the trainer only")


def score(prompt, completion, answer):
    return 1.0
"""


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    """``examples/`` is importable whatever directory pytest runs from."""
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture
def functions_dir(tmp_path, monkeypatch):
    """A working directory holding reward modules that are nowhere on ``sys.path``."""
    (tmp_path / "graded_rewards.py").write_text(GRADED)
    (tmp_path / "trainer_only_rewards.py").write_text(TRAINER_ONLY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("graded_rewards", "trainer_only_rewards"):
        sys.modules.pop(name, None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(
    "path, message",
    [
        ("graded_rewards.graded", "not an import path: write module:function"),
        ("no_such_module_here:score", "cannot import no_such_module_here (ModuleNotFoundError"),
        ("graded_rewards:missing", "graded_rewards has no missing"),
        ("graded_rewards:time", "graded_rewards:time is a module, not a function"),
    ],
)
def test_a_bad_import_path_is_named_in_one_line(functions_dir, path, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        resolve_reward_function(path)


def test_the_function_is_found_in_the_working_directory(functions_dir):
    fn = resolve_reward_function("graded_rewards:graded")
    assert fn("ab", "12", "123") == 0.5
    assert resolve_reward_function("examples.rewards:json_answer_match").__name__ == "json_answer_match"


def test_call_reward_counts_what_goes_wrong(functions_dir):
    raises, not_a_number = (resolve_reward_function(f"graded_rewards:{name}") for name in ("raises", "not_a_number"))
    assert call_reward(raises, "", "bad", "1") == (0.0, "error", "KeyError: 'no field'")
    assert call_reward(not_a_number, "", "x", "1") == (0.0, "error", "returned str 'yes', not a number")
    assert call_reward(not_a_number, "", "", "1") == (0.0, "error", "returned nan")
    assert call_reward(raises, "", "good", "1") == (1.0, "ok", "")


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "workers"])
def test_rewards_come_from_the_function_and_correct_is_above_one_half(functions_dir, workers):
    prompts = ["odd", "even", "odd", "even"]
    completions = ["", "1", "12", "123"]
    with FunctionReward("graded_rewards:graded", RewardConfig(num_workers=workers)) as reward:
        result = reward.score(completions, ["123"] * 4, prompts=prompts)
        if workers:
            assert len(reward.worker_pids) == 2
    assert result.rewards.tolist() == [1.0, 0.25, 1.5, 0.75]
    assert result.correct.tolist() == [True, False, True, True] and CORRECT_ABOVE == 0.5
    assert result.status == ["ok"] * 4 and result.n_failed == 0 and result.answers == [None] * 4
    assert result.metrics()["reward/accuracy"] == 0.75


def test_a_function_that_raises_scores_zero_and_is_reported(functions_dir, caplog):
    with FunctionReward("graded_rewards:raises", RewardConfig(num_workers=1)) as reward:
        with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.reward_function"):
            result = reward.score(["good", "bad", "good"], ["1"] * 3, prompts=["p"] * 3)
    assert result.rewards.tolist() == [1.0, 0.0, 1.0] and result.status == ["ok", "error", "ok"]
    assert result.counts["error"] == 1
    assert "1 of 3 items scored 0" in caplog.text and "first error: KeyError: 'no field'" in caplog.text


@pytest.mark.slow  # waits out the pool's one-second limit: outside the quick tier
def test_a_hung_function_is_stopped_by_the_pools_limit(functions_dir):
    with FunctionReward("graded_rewards:sleeps", RewardConfig(num_workers=1, item_timeout_s=1.0)) as reward:
        t0 = time.monotonic()
        result = reward.score(["60", "0"], ["1", "1"], prompts=["p", "p"])
        assert time.monotonic() - t0 < 10
        assert result.status == ["timeout", "ok"] and result.rewards.tolist() == [0.0, 1.0]
        assert reward._pool.replaced == 1


def test_a_function_the_workers_cannot_import_fails_the_pools_start(functions_dir):
    reward = FunctionReward("trainer_only_rewards:score", RewardConfig(num_workers=1))
    with pytest.raises(
        RuntimeError,
        match=r"a reward worker could not set up reward function trainer_only_rewards:"
        r"score: cannot import trainer_only_rewards \(ImportError: this module "
        r"imports in the trainer only\)",
    ):
        reward.start()


def test_a_function_reads_the_prompts():
    with pytest.raises(ValueError, match="a reward function reads all three"):
        FunctionReward(EXAMPLE, RewardConfig(num_workers=0)).score(["x"], ["1"])


def test_the_overlong_penalty_applies_to_a_functions_reward_not_its_label():
    config = RewardConfig(num_workers=0, overlong_max_length=10, overlong_cache_length=4)
    result = FunctionReward(EXAMPLE, config).score(['{"answer": 3}'] * 2, ["3", "3"], lengths=[4, 10], prompts=["", ""])
    assert result.rewards.tolist() == [1.0, 0.0] and result.correct.tolist() == [True, True]


def test_the_example_matches_the_json_field_exactly():
    completions = [
        'Adding them: {"answer": 12}',
        'first {"answer": 3} then {"answer": "12"}',
        '{"answer": 13}',
        "12",
        '{"result": 12}',
        '{"answer": 12',
        'text {"answer": " 12 "} more',
    ]
    with make_reward(EXAMPLE, RewardConfig(num_workers=0)) as reward:
        result = reward.score(completions, ["12"] * len(completions), prompts=["Sum 5 and 7."] * len(completions))
    assert result.rewards.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert np.array_equal(result.correct, result.rewards > 0.5)


def test_make_reward_gives_math_verify_by_default():
    assert type(make_reward("math_verify")) is MathReward
    assert type(make_reward(EXAMPLE)) is FunctionReward


def test_a_trained_policy_is_scored_with_math_verify_or_the_function_the_user_names(functions_dir):
    """The evaluation's and the probe's ``reward.function`` (None) is math_verify when that, or nothing, trained the
    policy (an export's run summary, one directory up, or a training checkpoint's own record); a function of its own
    is refused naming it, never imported (tests/analysis/test_trained_reward.py); one set by the user is kept."""
    import torch

    from arrol_pl.analysis.trained_reward import AsTrainedRewardConfig, trained_reward
    from arrol_pl.train.config.loader import ConfigError

    export = functions_dir / "run" / "export"
    export.mkdir(parents=True)
    fresh = AsTrainedRewardConfig()
    fresh.fill_in(export, "checkpoint")
    assert fresh.function == "math_verify"  # no summary beside the export
    (functions_dir / "run" / "summary.json").write_text(json.dumps({"config": {"reward": {"function": "math_verify"}}}))
    from_summary = AsTrainedRewardConfig()
    from_summary.fill_in(export, "checkpoint")
    assert from_summary.function == "math_verify"
    checkpoint = functions_dir / "last.ckpt"
    torch.save({"arrol": {"config": {"reward": {"function": "graded_rewards:raises"}}}}, checkpoint)
    assert trained_reward(checkpoint) == "graded_rewards:raises"
    with pytest.raises(ConfigError, match=r"^checkpoint=.* was trained with reward.function=graded_rewards:raises"):
        AsTrainedRewardConfig().fill_in(checkpoint, "checkpoint")
    chosen = AsTrainedRewardConfig(function="graded_rewards:graded")
    chosen.fill_in(checkpoint, "checkpoint")
    assert chosen.function == "graded_rewards:graded"
