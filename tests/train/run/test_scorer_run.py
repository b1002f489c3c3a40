"""experiments/run.py with another scorer at L_detect (``pruning.scorer``): the real entry point, engine and
rewards. The checker's scores are what the calibrator learns; the oracle prunes after the end, trains on the
survivors and credits the decode time apart from the measured clock; bad choices fail before any model loads."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_run_smoke import refused_before_hydra_starts, run_script  # noqa: E402
from test_screen_run import history_of  # noqa: E402

from arrol_pl.tasks.arithmetic import CHECK_SCORES  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_checker_prunes_in_the_engine_and_its_scores_feed_the_calibrator(tmp_path, policy_cache):
    """The only run with a scorer other than the head at L_detect (the task's prefix checker), in the engine."""
    out = run_script(
        tmp_path,
        "trainer.max_steps=2",
        "pruning=arrol",
        "pruning.scorer=checker",
        "data.num_heldout=0",
        f"hydra.run.dir={tmp_path / 'run'}",
        warm=True,
        cache=policy_cache,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    history = history_of(tmp_path / "run")
    assert [h["pruning/active"] for h in history] == [0.0, 1.0]
    assert all(h["pruning/keep_ratio"] < 1.0 for h in history[1:])
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    buffered = set(ckpt["arrol"]["calibrator"]["scores"].tolist())
    assert buffered and buffered <= set(CHECK_SCORES), "the calibrator bins the checker's scores, not the head's"


def test_the_oracle_trains_on_its_survivors_and_credits_the_decode_time(tmp_path, policy_cache):
    """The only run of the oracle arm: rollouts decode to the end, are pruned by their outcome, and the decode time
    pruning would have saved is credited apart from the measured clock."""
    out = run_script(
        tmp_path,
        "trainer.max_steps=2",
        "pruning=arrol",
        "pruning.scorer=oracle",
        "pruning.oracle_auc=1.0",
        "study=test",
        "data.num_heldout=0",
        "algo.max_response_tokens=48",
        "engine.detect_length=6",
        f"hydra.run.dir={tmp_path / 'run'}",
        warm=True,
        cache=policy_cache,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    history = history_of(tmp_path / "run")
    credited = 0.0
    for h in history:
        credited += h["time/credit"]
        assert h["time/wall_credited"] == pytest.approx(h["time/wall"] - credited), "the credit is its own term"
        if "scorer/auc" in h:
            assert h["scorer/auc"] == 1.0, "AUC 1: every right rollout scores above every wrong one"
    assert history[0]["time/credit"] == 0.0 and history[0]["pruning/keep_ratio"] == 1.0, "the cold start keeps all"
    for h in history[1:]:
        assert h["pruning/active"] == 1.0 and h["pruning/keep_ratio"] < 1.0
        assert h["tokens/kept"] < h["tokens/generated"], "the pruned rollouts ran to the end, then were dropped"
        # a saving in steps only where a pruned rollout was among the longest: all 16 decode at once here
        assert h["oracle/credited_tokens"] > 0 and h["time/credit"] >= 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("pruning.scorer=oracle", "pruning.oracle_auc=0.9"), "it is a study arm only"),
        (
            ("pruning.scorer=checker", "data=gsm8k", "model=hf", "model.path=none"),
            "needs a task that checks a response prefix",
        ),
        (("pruning.scorer=oracle",), "scorer=oracle needs oracle_auc"),
    ],
)
def test_a_scorer_that_cannot_work_fails_before_any_model_loads(tmp_path, command_main, overrides, message):
    out = refused_before_hydra_starts(command_main, tmp_path, *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "cache").exists()
