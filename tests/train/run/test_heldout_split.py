"""The held-out evaluation split over two ranks: two real processes in one gloo world, each with its own vLLM
engine joined to it (as a training run starts them), each generating its chunks of the problems.

Both ranks return the same result, and it is the one a single rank computes with the same chunks and seed;
training's random stream is where it was. Scoring: the untrained tiny policy never writes a boxed answer, so
math-verify would score every completion 0 and the comparison would say nothing; the ranks score a completion
right when its text has an even length instead, a deterministic function of what the engine generated.

On CUDA the evaluation also forks the current device's generator, the one the engine samples from there.
"""

from __future__ import annotations

import pytest
import torch
from test_distributed import launch


RANK = """
import dataclasses
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch

from arrol_pl.engine import ArrolEngine, EngineConfig
from arrol_pl.tasks.problem import Problem
from arrol_pl.train.config.sections import TrainerConfig
from arrol_pl.train.run.world import init_launcher_world, leave_world
from arrol_pl.train.step.rank_sync import ONE_RANK, RankSync
from arrol_pl.train.run.heldout import evaluate_heldout


class EvenLength:
    def score(self, completions, golds, lengths=None, prompts=None):
        return SimpleNamespace(correct=np.array([len(text) % 2 == 0 for text in completions], dtype=bool))


policy, out, max_model_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = init_launcher_world(TrainerConfig(devices=2, strategy="fsdp", accelerator="cpu"))
engine = ArrolEngine(policy, EngineConfig(dtype="float32", max_model_len=max_model_len), join_launcher_world=True)
problems = [Problem(f"p{i}", f"Compute {i} + {i * i}.", str(i + i * i)) for i in range(7)]
evaluate = lambda **kw: dataclasses.asdict(evaluate_heldout(engine, EvenLength(), problems, 3, 1.0, 12, seed=5, **kw))
torch.manual_seed(99)
state = torch.get_rng_state()
results = {"split": evaluate(ranks=RankSync(), chunk=2)}  # 4 chunks: 0 and 2 on rank 0, 1 and 3 on rank 1
results["rng_kept"] = torch.equal(torch.get_rng_state(), state)
if rank == 0:  # one rank alone, after the split: the same chunks and seeds, then one call over the whole set
    results["one_rank_chunked"] = evaluate(ranks=ONE_RANK, chunk=2)
    results["one_rank"] = evaluate()
torch.save(results, f"{out}.rank{rank}")
engine.close()
leave_world()
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.slow
def test_two_ranks_split_the_heldout_evaluation_into_the_one_rank_result(tmp_path, tiny_model_dirs):
    """Two ranks of engines, without training: their chunks of the held-out set gather into exactly what one rank
    computes (test_distributed_run.py checks the split inside a training run, not this equality)."""
    out = tmp_path / "heldout"
    launch(
        ["-c", RANK, str(tiny_model_dirs["policy"]), str(out), str(tiny_model_dirs["max_model_len"])], 2, timeout=600
    )
    ranks = [torch.load(f"{out}.rank{r}", weights_only=False) for r in range(2)]
    split = ranks[0]["split"]
    assert ranks[1]["split"] == split  # every rank holds the whole result
    assert split["problems"] == 7 and len(split["per_problem"]) == 7 and split["samples"] == 3
    assert ranks[0]["one_rank_chunked"] == split  # independent of the number of ranks
    assert 0 < split["accuracy"] < 1, "the scorer should find some completions right, some wrong"
    assert len(set(split["per_problem"])) > 1
    assert all(r["rng_kept"] for r in ranks)  # training's stream is where it was on both ranks
    # One call over the whole set decodes greedily to the same completions; its samples are another draw.
    one = ranks[0]["one_rank"]
    assert one["greedy_accuracy"] == split["greedy_accuracy"]
    assert one["problems"] == 7


class DeviceSampler:
    """What the engine does with unseeded requests on CUDA, without vLLM's GPU stack: it draws from the current
    device's default generator (one draw per rollout)."""

    def generate(self, prompts, n, sampling, progress=None, features=True):
        from types import SimpleNamespace

        assert not features  # the held-out evaluation reads no hidden row: the tap only counts

        draws = torch.randint(0, 10, (len(prompts) * n,), device="cuda").tolist()
        return SimpleNamespace(
            rollouts=[
                SimpleNamespace(text="x" * d, response_token_ids=[0] * d, prompt_index=i // n)
                for i, d in enumerate(draws)
            ]
        )


class EvenLength:
    def score(self, completions, golds, lengths=None, prompts=None):
        import numpy as np
        from types import SimpleNamespace

        return SimpleNamespace(correct=np.array([len(text) % 2 == 0 for text in completions], dtype=bool))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_evaluation_neither_sees_nor_moves_the_cuda_generator():
    from arrol_pl.tasks.problem import Problem
    from arrol_pl.train.run.heldout import evaluate_heldout

    problems = [Problem(f"p{i}", f"q{i}", "1") for i in range(6)]
    torch.cuda.manual_seed(99)
    state = torch.cuda.get_rng_state()
    first = evaluate_heldout(DeviceSampler(), EvenLength(), problems, 4, 1.0, 8, seed=5)
    assert torch.equal(torch.cuda.get_rng_state(), state)  # training's device stream is where it was
    torch.cuda.manual_seed(7)
    assert evaluate_heldout(DeviceSampler(), EvenLength(), problems, 4, 1.0, 8, seed=5) == first


class Recorder:
    """Returns one empty completion per rollout and records how each generation was asked for."""

    def __init__(self) -> None:
        self.calls = []

    def generate(self, prompts, n, sampling, **kwargs):
        from types import SimpleNamespace

        self.calls.append(kwargs)
        return SimpleNamespace(
            rollouts=[
                SimpleNamespace(text="", response_token_ids=[], prompt_index=i // n) for i in range(len(prompts) * n)
            ]
        )


def test_the_evaluation_asks_the_engine_for_no_hidden_row_and_no_head_score():
    from arrol_pl.tasks.problem import Problem
    from arrol_pl.train.run.heldout import evaluate_heldout

    engine = Recorder()
    result = evaluate_heldout(engine, EvenLength(), [Problem(f"p{i}", f"q{i}", "1") for i in range(3)], 2, 1.0, 8)
    assert result.accuracy == 1.0  # empty texts have an even length
    assert [call.get("features", True) for call in engine.calls] == [False, False]


def test_each_evaluation_labels_its_progress_bars():
    """Before, during and after training read apart on the console: the label leads each bar's description."""
    from arrol_pl.tasks.problem import Problem
    from arrol_pl.train.run.heldout import evaluate_heldout

    engine = Recorder()
    evaluate_heldout(
        engine,
        EvenLength(),
        [Problem(f"p{i}", f"q{i}", "1") for i in range(3)],
        2,
        1.0,
        8,
        progress="held-out after training",
    )
    assert [call["progress"] for call in engine.calls] == [
        "held-out after training greedy",
        "held-out after training avg@2",
    ]
