"""The parts exact resume and fault handling are built from, without a model: the atomic checkpoint
writer, the safe reader, the prompt stream and the pruning-floor report."""

from __future__ import annotations

import logging
import os
import pickle
from types import SimpleNamespace

import pytest
import torch

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config
from arrol_pl.train.records.checkpoint import REQUIRED_ENTRIES, AtomicCheckpointIO, read_checkpoint
from arrol_pl.train.records.rundir import RecordWriteError
from arrol_pl.train.run.data import PromptDataModule, PromptStream, check_stream, stream_identity
from arrol_pl.train.run.prelaunch import effective_keep_ratio, report_pruning_floor


def checkpoint() -> dict:
    return {name: {"x": torch.arange(4.0)} for name in REQUIRED_ENTRIES}


class Unpicklable:
    def __reduce__(self):
        raise pickle.PicklingError("refuses to be saved")


def test_atomic_write_keeps_the_old_file_when_a_write_fails_midway(tmp_path):
    io = AtomicCheckpointIO()
    target = tmp_path / "ckpt" / "last.ckpt"
    io.save_checkpoint(checkpoint(), target)
    good = target.read_bytes()
    assert io.last_good == target
    # torch.save has written the archive's first records when the unpicklable entry fails it
    broken = {**checkpoint(), "big": torch.zeros(100_000), "z": Unpicklable()}
    with pytest.raises(RecordWriteError) as err:
        io.save_checkpoint(broken, target)
    assert f"writing checkpoint {target} failed" in str(err.value)
    assert f"the last good checkpoint is {target}" in str(err.value)
    assert target.read_bytes() == good
    assert os.listdir(target.parent) == ["last.ckpt"], "the temporary file was left behind"
    with pytest.raises(RecordWriteError, match="no checkpoint was written before it"):
        AtomicCheckpointIO().save_checkpoint(broken, tmp_path / "other.ckpt")


def test_read_checkpoint_names_the_file_and_what_is_wrong(tmp_path):
    good = tmp_path / "good.ckpt"
    torch.save(checkpoint(), good)
    assert torch.equal(read_checkpoint(good)["arrol"]["x"], torch.arange(4.0))

    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
    with pytest.raises(ConfigError, match=r"^trainer.resume='.*truncated.ckpt' cannot be read, truncated"):
        read_checkpoint(truncated)

    unsafe = tmp_path / "unsafe.ckpt"
    torch.save({**checkpoint(), "payload": SimpleNamespace(code="anything")}, unsafe)
    with pytest.raises(ConfigError, match="not a safe torch checkpoint"):
        read_checkpoint(unsafe)

    partial = tmp_path / "partial.ckpt"
    torch.save({"state_dict": {}}, partial)
    with pytest.raises(ConfigError, match=r"lacks 'optimizer_states' \(the policy optimizer\), 'arrol'"):
        read_checkpoint(partial)
    with pytest.raises(ConfigError, match="no such file"):
        read_checkpoint(tmp_path / "missing.ckpt")


def test_stream_resumed_at_any_step_yields_the_uninterrupted_batches():
    full = list(PromptStream(10, 3, total=12, seed=7))
    assert len(full) == 12 and all(len(b) == 3 for b in full)
    for k in (0, 1, 3, 5, 11):
        assert list(PromptStream(10, 3, total=12, seed=7, start=k)) == full[k:]
    for p in range(4):  # each pass (3 batches of 10 problems, remainder dropped) repeats no problem
        seen = [i for b in full[3 * p : 3 * p + 3] for i in b]
        assert len(set(seen)) == 9
    assert full[:3] != full[3:6], "each pass is a new permutation"
    assert list(PromptStream(10, 3, total=12, seed=8)) != full


def test_stream_position_round_trips_and_other_data_is_refused():
    problems = [SimpleNamespace(id=f"p{i}", prompt=f"{i}?", answer=str(i)) for i in range(10)]
    dm = PromptDataModule(problems, 3, seed=7, max_steps=12)
    state = {**dm.state_dict(), "position": 5}
    resumed = PromptDataModule(problems, 3, seed=7, max_steps=12)
    resumed.load_state_dict(state)
    assert [list(b) for b in resumed.train_dataloader()] == [
        [problems[i] for i in b] for b in PromptStream(10, 3, 12, 7, 5)
    ]
    with pytest.raises(ConfigError, match="algo.prompts_per_step = 3, this run has 4"):
        check_stream(state, stream_identity(problems, 4, 7))
    changed = problems[:9] + [SimpleNamespace(id="p9", prompt="9?", answer="10")]
    with pytest.raises(ConfigError, match="the training problems"):
        check_stream(state, stream_identity(changed, 3, 7))
    with pytest.raises(ConfigError, match=r"algo.prompts_per_step=11 is larger than the training set \(10 problems\)"):
        PromptDataModule(problems, 11)


def test_before_the_too_long_prompts_are_skipped_a_stream_saved_with_fewer_problems_is_checked_later():
    """The checks before launch see the problems as loaded; the checkpoint's stream is over those left once the
    prompts the engine cannot take are skipped (with the tokenizer): fewer problems there are the stream's to check
    when it loads its state, never more."""
    problems = [SimpleNamespace(id=f"p{i}", prompt=f"{i}?", answer=str(i)) for i in range(10)]
    saved = stream_identity(problems[:9], 3, 7)
    check_stream(saved, stream_identity(problems, 3, 7), rows_to_skip=True)
    with pytest.raises(ConfigError, match="the training set size = 9, this run has 10"):
        check_stream(saved, stream_identity(problems, 3, 7))
    with pytest.raises(ConfigError, match="the training set size = 10, this run has 9"):
        check_stream(stream_identity(problems, 3, 7), stream_identity(problems[:9], 3, 7), rows_to_skip=True)
    with pytest.raises(ConfigError, match="trainer.seed = 7, this run has 8"):
        check_stream(saved, stream_identity(problems, 3, 8), rows_to_skip=True)


@pytest.mark.parametrize(
    "overrides,kappa,warning",
    [
        ({}, 0.5, None),
        ({"algo": {"group_size": 2}}, 1.0, "pruning is disabled (effective κ = 1)"),
        ({"algo": {"group_size": 8}, "pruning": {"keep_ratio": 0.1}}, 0.25, "effective κ = 0.250"),
        (
            {"algo": {"group_size": 2}, "pruning": {"keep_ratio": 0.05, "min_keep_per_group": 0}},
            0.05,
            "a step whose rollouts are all pruned is skipped",
        ),
        ({"pruning": {"policy": "none"}}, 1.0, None),
    ],
)
def test_effective_keep_ratio_is_said_at_start(caplog, overrides, kappa, warning):
    run = load_run_config(overrides)
    assert effective_keep_ratio(run) == pytest.approx(kappa)
    with caplog.at_level(logging.WARNING):
        report_pruning_floor(run)
    if warning is None:
        assert not caplog.records
    else:
        assert warning in caplog.text


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"trainer": {"checkpoint_every": -1}}, "trainer.checkpoint_every must be >= 1, got -1"),
        ({"trainer": {"resume": "/nonexistent/last.ckpt"}}, "trainer.resume='/nonexistent/last.ckpt': no such file"),
        ({"trainer": {"precision": "8-bit"}}, "trainer.precision='8-bit'"),
        ({"engine": {"dtype": "int4"}}, "engine.dtype='int4'"),
        ({"trainer": {"max_minutes": -1}}, "trainer.max_minutes must be > 0 (or null: no budget), got -1"),
        ({"algo": {"old_logprobs": "cached"}}, "algo.old_logprobs='cached'"),
    ],
)
def test_trainer_and_engine_keys_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_run_config(overrides)


def test_time_budget_stops_after_the_step_that_reaches_it_and_checkpoints_it(tmp_path):
    from arrol_pl.train.run.callbacks import RunCheckpoints

    saved = []
    trainer = SimpleNamespace(
        global_step=0,
        max_steps=300,
        should_stop=False,
        save_checkpoint=lambda path, weights_only: saved.append(path.name),
    )
    module = SimpleNamespace(history=[], ranks=None)
    stop = RunCheckpoints(tmp_path, checkpoint_every=100, max_train_seconds=30.0)
    for step, wall in enumerate([9.0, 19.0, 29.9, 30.2], start=1):
        trainer.global_step = step
        module.history.append({"time/wall": wall})
        stop.on_train_batch_end(trainer, module, None, None, step - 1)
        assert trainer.should_stop == (wall >= 30.0), step
    assert stop.out_of_time and saved == ["step00004.ckpt", "last.ckpt"]  # resumable from where it stopped
    # several ranks stop at one step: any rank over budget stops all
    voted = []
    ranks = SimpleNamespace(max=lambda x: voted.append(x) or 1)
    other = RunCheckpoints(tmp_path, 100, max_train_seconds=30.0)
    trainer.should_stop, trainer.global_step = False, 1
    other.on_train_batch_end(trainer, SimpleNamespace(history=[{"time/wall": 1.0}], ranks=ranks), None, None, 0)
    assert voted == [0] and trainer.should_stop


def test_the_engine_step_cost_goes_into_the_checkpoint_and_back():
    """A resumed run chooses the pruned generation's schedule (``engine.detect_first`` null) from the step cost the run
    it resumes measured, not from one measured again."""
    from arrol_pl.core.decode_cost import StepCost
    from arrol_pl.engine.protocol import engine_step_cost, restore_engine_step_cost
    from arrol_pl.engine.scheduling import Scheduling

    measured = SimpleNamespace(scheduling=Scheduling(None, 32, 128))
    assert engine_step_cost(measured) is None and engine_step_cost(object()) is None  # before a fit; a plain backend
    measured.scheduling.measured([0.01 + 0.001 * n for n in range(20)], list(range(20)))
    saved = engine_step_cost(measured)
    assert saved == pytest.approx({"fixed": 0.01, "per_request": 0.001})
    resumed = SimpleNamespace(scheduling=Scheduling(None, 32, 128))
    restore_engine_step_cost(resumed, saved)
    assert resumed.scheduling.step_cost == StepCost(saved["fixed"], saved["per_request"])
    resumed.scheduling.measured([5.0] * 20, list(range(20)))  # a later generation never refits it
    assert resumed.scheduling.step_cost == StepCost(saved["fixed"], saved["per_request"])
    restore_engine_step_cost(object(), saved)  # a backend without a schedule: nothing to restore
