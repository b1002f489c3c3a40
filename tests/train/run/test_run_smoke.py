"""Whole-script smoke test of experiments/run.py: the real entry point, a real (tiny, unwarmed) Qwen3
policy, the real vLLM engine, real math-verify rewards, real TensorBoard events and checkpoints."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import warm_python
import torch

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def script_overrides(tmp: Path, *overrides: str, warm: bool = False, cache: Path | None = None) -> list[str]:
    return [
        f"model.warm_start.steps={1000 if warm else 0}",
        f"model.cache_dir={cache or tmp / 'cache'}",
        "data.num_heldout=8",
        "algo.prompts_per_step=4",
        "algo.group_size=4",
        "pruning.cold_start_steps=1",
        "trainer.checkpoint_every=2",
        *overrides,
    ]


def run_script(
    tmp: Path, *overrides: str, warm: bool = False, cache: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        *script_overrides(tmp, *overrides, warm=warm, cache=cache),
    ]
    return warm_python.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout)


def refused_before_hydra_starts(command_main, tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    """:func:`run_script`'s command line refused before Hydra starts a job (every value check of the typed config):
    ``arrol train``'s ``main`` in this process (``command_main`` in tests/conftest.py), the function
    experiments/run.py calls, with the same exit code and stderr, and no process to start."""
    return command_main(tmp, "train", *script_overrides(tmp, *overrides))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, policy_cache):
    """``+exp=grpo_vs_arrol`` over 3 steps: GRPO and ARRoL as two jobs of one process (the engine shut down between
    them) and one table; the ARRoL job's directory is the run the tests below read (events, checkpoints, resume,
    evaluation). Warm-started, so the policy writes real answers for the evaluation test."""
    tmp = tmp_path_factory.mktemp("smoke")
    sweep = tmp / "sweep"
    out = run_script(
        tmp, "+exp=grpo_vs_arrol", "trainer.max_steps=3", f"hydra.sweep.dir={sweep}", warm=True, cache=policy_cache
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return SimpleNamespace(tmp=tmp, out=out, cache=policy_cache, sweep=sweep, run=sweep / "1")  # jobs: none, arrol


def test_run_writes_events_checkpoints_and_summary(first_run):
    out, run = first_run.out, first_run.run
    assert len(list((run / "tb").glob("events.out.tfevents.*"))) == 1, "one TensorBoard event file per run"
    ckpts = {p.name for p in (run / "checkpoints").glob("*.ckpt")}
    assert {"step00002.ckpt", "last.ckpt"} <= ckpts
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3
    for key in (
        "heldout_accuracy_before",
        "heldout_accuracy_after",
        "keep_ratio_mean",
        "seconds_per_step",
        "wall_seconds",
        "fit_seconds",
    ):
        assert isinstance(summary[key], float) and math.isfinite(summary[key]), key
    assert summary["seconds_per_phase"]["generation"] > 0 and summary["seconds_per_phase"]["advantage"] > 0
    assert summary["config"]["pruning"]["policy"] == "arrol"
    assert (run / "export" / "config.json").exists() and (run / "export" / "quality_head" / "config.json").exists()
    assert "held-out accuracy" in out.stdout
    # Both evaluations keep their per-problem figures, so the report pairs the gain by problem.
    assert len(summary["heldout_per_problem_before"]) == len(summary["heldout_per_problem_after"]) == 8
    assert "(paired by problem)" in out.stdout and "two standard errors" in out.stdout

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb")).Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "reward/accuracy",
        "pruning/keep_ratio",
        "time/generation",
        "time/step",
        "balance/rho_1_minus_rho",
        "time/advantage",
        "time/sync",
    ):  # every phase times itself, the advantages and the sync included
        assert tag in tags, tag
    walls = [e.wall_time for e in events.Scalars("reward/accuracy")]
    assert len(walls) == 3 and walls == sorted(walls)
    assert [e.step for e in events.Scalars("heldout/accuracy")] == [2]  # the final evaluation, on the last step


def test_a_bf16_stats_head_run_trains_online_and_evaluates_from_the_checkpoint_of_an_unfinished_run(
    tmp_path, policy_cache
):
    """One run, three things no other test runs end to end:

    - ``trainer.precision=bf16-true`` (the policy held in bf16, as on CPUs with AVX512-BF16) with a bf16 engine:
      Lightning's precision plugin walks every batch, and the batch of problems must pass through it;
    - ``head.input=last+stats``: the engine feeds the head [hidden state, prefix statistics], the head standardises
      them with the replay window's moments, and the export keeps its input kind;
    - evaluation from a training checkpoint alone, as a killed run leaves it (no export, no summary): the head is
      rebuilt with its input kind from the checkpoint."""
    out = run_script(
        tmp_path,
        "trainer.max_steps=3",
        "pruning=arrol",
        "head.input=last+stats",
        "trainer.precision=bf16-true",
        "engine.dtype=bfloat16",
        f"hydra.run.dir={tmp_path / 'run'}",
        warm=True,
        cache=policy_cache,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert len(history) == 3 and all(math.isfinite(row["head/loss"]) for row in history)
    assert history[-1]["pruning/keep_ratio"] < 1.0  # pruned on the new head's scores after the cold start
    # the engine samples in bf16 and the trainer scores in bf16: close, not equal (fp32 gives ~1e-6); the engine
    # returns its log-probs on the check steps only (trainer.logprob_check_every = 10: step 0 of these three)
    diff = history[0]["policy/engine_logprob_diff_mean"]
    assert 0 < diff < 0.1 and math.isfinite(history[-1]["policy/grad_norm"])
    assert not any("policy/engine_logprob_diff_mean" in row for row in history[1:])
    from arrol_pl.models.head import load_head

    head = load_head(tmp_path / "run" / "export")[0]
    assert (head.input_kind, head.input_dim, head.standardize) == ("last+stats", 128 + 5, True)
    assert not torch.allclose(head.input_std, torch.ones_like(head.input_std))  # moments taken from real rollouts

    shutil.rmtree(tmp_path / "run" / "export")  # what a killed run leaves: its checkpoints and history
    (tmp_path / "run" / "summary.json").unlink()
    eval_dir = tmp_path / "eval"
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={tmp_path / 'run/checkpoints/last.ckpt'}",
            "k=2",
            "limit=4",
            f"hydra.run.dir={eval_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    # the results once (results.md, not again as logged dicts), and none of vLLM's notes on Triton
    assert "Triton" not in out.stdout + out.stderr and "arithmetic: {" not in out.stdout
    assert out.stdout.count("outputs: ") == 1
    records = [json.loads(line) for line in (eval_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(len(r["head_scores"]) == 2 for r in records)
    assert json.loads((eval_dir / "metrics.json").read_text())["metrics"]["arithmetic"]["problems"] == 4


def test_resume_restores_calibrator_and_step(first_run):
    tmp, cache, run = first_run.tmp, first_run.cache, first_run.run
    ckpt_path = run / "checkpoints" / "step00002.ckpt"
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 2

    from arrol_pl.core.calibration import BinnedCalibrator

    saved = ckpt["arrol"]["calibrator"]
    restored = BinnedCalibrator(saved["num_bins"], saved["capacity"], saved["alpha"])
    restored.load_state_dict(saved)
    # every survivor of steps 0 and 1 (GRPO trains on all of them) went into the calibrator, none twice
    first_rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert restored.total_seen == sum(h["policy/trained_rollouts"] for h in first_rows[:2])

    out = run_script(
        tmp,
        "trainer.max_steps=3",
        "pruning=arrol",
        "trainer.eval_every=50",  # the ARRoL job's config
        f"trainer.resume={ckpt_path}",
        f"hydra.run.dir={tmp / 'resumed'}",
        warm=True,
        cache=cache,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    first = json.loads((run / "summary.json").read_text())
    resumed = json.loads((tmp / "resumed" / "summary.json").read_text())
    assert resumed["steps"] == 3  # two restored from the checkpoint + one new
    last = torch.load(tmp / "resumed" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 3
    # one last.ckpt: no last-v1.ckpt beside the off-interval last step's (the only save of the resumed run)
    assert sorted(p.name for p in (tmp / "resumed" / "checkpoints").iterdir()) == ["last.ckpt", "step00003.ckpt"]
    history = [json.loads(line) for line in (tmp / "resumed" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0.0, 1.0, 2.0]
    # the restored part of the history is exactly the first run's (read from its directory), and the calibrator
    # continued from it
    assert history[:2] == first_rows[:2]
    grown = last["arrol"]["calibrator"]["total_seen"] - saved["total_seen"]
    assert grown == history[2]["policy/trained_rollouts"] > 0
    assert first["steps"] == 3


def test_bad_config_fails_before_any_model_loads(tmp_path, command_main):
    out = refused_before_hydra_starts(
        command_main, tmp_path, "pruning.keep_ratio=2", f"hydra.run.dir={tmp_path / 'bad'}"
    )
    assert out.returncode != 0
    assert "pruning.keep_ratio" in out.stderr
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_multirun_sweep_writes_one_table(first_run):
    """+exp=grpo_vs_arrol ran two jobs in one process and aggregated them into one table."""
    sweep = first_run.sweep
    assert len(list(sweep.glob("*/summary.json"))) == 2
    records = json.loads((sweep / "summary_table.json").read_text())
    runs = {r["run"]: r for r in records}
    assert set(runs) == {"pruning=none", "pruning=arrol"}
    assert runs["pruning=none"]["speedup"] == 1.0
    assert runs["pruning=none"]["keep ratio"] == 1.0
    assert "| pruning=arrol |" in (sweep / "summary_table.md").read_text()
    assert json.loads((sweep / "0" / "summary.json").read_text())["config"]["pruning"]["policy"] == "none"


def test_evaluate_writes_consistent_tables(first_run):
    """experiments/evaluate.py on the trained tiny policy's export: JSON, Markdown and JSONL agree, and maj@k, the
    ARRoL vote and pass@k are recomputed from the per-problem records. A second dataset, a file with a prompt longer
    than the policy's context in its middle, is evaluated without it, the row counted. (Evaluation from a training
    checkpoint instead of an export, as a killed run leaves it:
    test_a_bf16_stats_head_run_trains_online_and_evaluates_from_the_checkpoint_of_an_unfinished_run.)"""
    tmp = first_run.tmp
    ckpt = first_run.run / "export"
    out_dir = tmp / "eval-export"
    sums = [{"id": f"s{i}", "prompt": f"Compute {i} + 3.", "answer": str(i + 3)} for i in range(5)]
    sums[2] = {"id": "long", "prompt": "Compute " + " + ".join(str(i % 10) for i in range(2000)) + ".", "answer": "0"}
    (tmp / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sums))
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={ckpt}",
            "k=4",
            "limit=12",
            "+datasets.arithmetic.split=heldout",
            f"+datasets.jsonl.path={tmp / 'sums.jsonl'}",
            f"hydra.run.dir={out_dir}",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    written = json.loads((out_dir / "metrics.json").read_text())
    metrics = written["metrics"]["arithmetic"]
    records = [json.loads(line) for line in (out_dir / "records.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records if r["dataset"] == "jsonl"] == ["s0", "s1", "s3", "s4"]
    assert written["metrics"]["jsonl"]["problems"] == 4 and written["data_rows"]["jsonl"]["skipped"] == {"too_long": 1}
    assert (
        "jsonl: skipped 1 of 5 rows whose prompt the engine cannot take (too_long 1; prompt + max_tokens="
        in out.stdout + out.stderr
    )
    records = [r for r in records if r["dataset"] == "arithmetic"]
    assert len(records) == metrics["problems"] == 12 and metrics["k"] == 4
    # the export records the run's prompt format and evaluation used it (the tiny task's: chat template, no stop)
    assert written["prompt_formats"] == {
        "arithmetic": {"template": None, "chat": True, "stop": []},
        "jsonl": {"template": None, "chat": True, "stop": []},
    }

    from arrol_pl.core.metrics import pass_at_k, voted_answer_correct
    from arrol_pl.core.voting import arrol_vote, majority_vote

    def voted_correct(r, winner):
        return voted_answer_correct(r["classes"], r["correct"], winner)

    assert sum(a is not None for r in records for a in r["answers"]) > 0, "the warm-started policy gave no answers"
    maj = sum(voted_correct(r, majority_vote(r["classes"])) for r in records) / len(records)
    arrol = sum(voted_correct(r, arrol_vote(r["classes"], r["head_scores"])) for r in records) / len(records)
    avg = sum(sum(r["correct"]) for r in records) / (4 * len(records))
    passk = sum(pass_at_k(4, sum(r["correct"]), 4) for r in records) / len(records)
    assert metrics["maj@k"] == pytest.approx(maj)
    assert metrics["arrol@k"] == pytest.approx(arrol)
    assert metrics["avg@k"] == pytest.approx(avg) and metrics["pass@k"] == pytest.approx(passk)
    assert all(len(r["head_scores"]) == 4 and all(math.isfinite(x) for x in r["deepconf"]) for r in records)
    table = (out_dir / "results.md").read_text()
    assert f"| majority vote (maj@k) | {100 * maj:.2f} |" in table


@pytest.mark.parametrize(
    "override,message",
    [
        ("checkpoint=/nonexistent/export", "checkpoint='/nonexistent/export' does not exist"),
        ("k=0", "k must be >= 1"),
        ("+datasets.nope.split=test", "datasets.nope: unknown dataset"),
    ],
)
def test_evaluate_bad_input_is_named(tmp_path, command_main, override, message):
    """Refused before Hydra starts the job, so evaluate's ``main`` runs in this process on the user's arguments."""
    export = tmp_path / "export"
    export.mkdir()
    (export / "quality_head").mkdir()
    (export / "quality_head" / "config.json").write_text("{}")
    args = [f"checkpoint={export}", override] if not override.startswith("checkpoint=") else [override]
    out = command_main(tmp_path, "evaluate", *args, f"hydra.run.dir={tmp_path / 'eval'}")
    assert out.returncode != 0
    assert message in out.stderr


def test_evaluate_refuses_a_bad_prompt_template_inside_its_job(tmp_path):
    """A prompt format is checked against the data inside the job, after Hydra made its directory: through the
    script, as a user meets it."""
    export = tmp_path / "export"
    (export / "quality_head").mkdir(parents=True)
    (export / "quality_head" / "config.json").write_text("{}")
    out = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={export}",
            "+datasets.arithmetic.prompt_template=no-placeholder",
            f"hydra.run.dir={tmp_path / 'eval'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "datasets.arithmetic: prompt_template must hold exactly one" in out.stderr
