"""When the engine returns its sampled-token log-probs: on the check steps (``trainer.logprob_check_every``) and on
every step with ``algo.rollout_is_cap``; elsewhere GRPO's generation skips vLLM's per-token log-softmax."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import TrainerConfig
from arrol_pl.train.step.groups import engine_logprobs
from arrol_pl.train.step.rollouts import RolloutRound


def config(every: int, cap: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(trainer=SimpleNamespace(logprob_check_every=every), algo=SimpleNamespace(rollout_is_cap=cap))


def test_the_check_steps_start_at_step_0_and_the_correction_needs_every_step():
    assert [s for s in range(25) if engine_logprobs(config(10), s)] == [0, 10, 20]
    assert [s for s in range(4) if engine_logprobs(config(1), s)] == [0, 1, 2, 3]
    assert not any(engine_logprobs(config(0), s) for s in range(25))
    assert all(engine_logprobs(config(0, cap=2.0), s) for s in range(25))
    assert TrainerConfig().logprob_check_every == 10


def test_a_negative_check_interval_is_refused_by_name():
    with pytest.raises(ConfigError, match="trainer.logprob_check_every must be >= 0, got -1"):
        TrainerConfig(logprob_check_every=-1)


class RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[int | None] = []

    def generate(self, prompts, group_size, sampling, detect_length, params, logprobs_topk=None, screen=None):
        self.calls.append(logprobs_topk)
        return SimpleNamespace(rollouts=[])


class NullTimer:
    def __call__(self, name):
        import contextlib

        return contextlib.nullcontext()


@pytest.mark.parametrize("logprobs,expected", [(True, 0), (False, None)])
def test_a_round_asks_the_engine_for_the_sampled_tokens_log_probs_only_when_told(logprobs, expected):
    engine = RecordingEngine()
    rnd = RolloutRound(engine, None, {"max_tokens": 8}, 4, 2, NullTimer(), logprobs=logprobs)
    rnd.generate([SimpleNamespace(prompt="1 + 1 =")], params=None)
    assert engine.calls == [expected]
