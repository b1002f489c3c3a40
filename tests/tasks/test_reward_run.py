"""A whole run on a JSONL task scored by a reward function of the user's own (``reward.function``): the shipped
example (``examples/rewards.py``, exact match on a JSON field), wrapped by a module in the run's working directory
that logs every call. The run's rewards, its accuracy and its held-out figures are the function's, scored in the
reward workers (not the trainer's process), one call per rollout; and the evaluation of its export scores with the
same function, named again (what a run records is never imported: tests/analysis/test_trained_reward.py), on the
problems the run held out, which the export records."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
import os

from examples.rewards import json_answer_match


def logged(prompt, completion, answer):
    reward = json_answer_match(prompt, completion, answer)
    with open(os.environ["REWARD_PROBE_LOG"], "a") as log:
        log.write(json.dumps({"pid": os.getpid(), "prompt": prompt, "answer": answer, "reward": reward}) + "\\n")
    return reward
"""

HELDOUT, EVAL_SAMPLES = 2, 2


@pytest.mark.slow
def test_a_run_takes_its_rewards_from_the_users_function(tmp_path):
    rows = [
        {"id": f"q{i}", "prompt": f'Add {i} and {i + 3}. Reply as JSON: {{"answer": ...}}', "answer": str(2 * i + 3)}
        for i in range(8)
    ]
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "probe_rewards.py").write_text(PROBE)  # found in the working directory, by the workers too
    log = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "REWARD_PROBE_LOG": str(log),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "run.py"),
        "data=jsonl",
        f"data.path={data}",
        f"data.heldout_path={data}",
        f"data.num_heldout={HELDOUT}",
        f"trainer.eval_samples={EVAL_SAMPLES}",
        "reward.function=probe_rewards:logged",
        "reward.workers=2",
        "model.warm_start.steps=0",
        f"model.cache_dir={tmp_path / 'cache'}",
        "algo.prompts_per_step=2",
        "algo.group_size=4",
        "algo.max_response_tokens=16",
        "engine.detect_length=4",
        "pruning.cold_start_steps=1",
        "trainer.max_steps=2",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    process = warm_python.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        runtime_env=["REWARD_PROBE_LOG"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-4000:]

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["reward"] == {
        "function": "probe_rewards:logged",
        "workers": 2,
        "timeout": 3,
        "max_failed_steps": 3,
    }
    assert summary["reward_failures"] == {}
    evaluation = HELDOUT * (1 + EVAL_SAMPLES)  # greedy and sampled, before and after training
    scored = [int(row["policy/trained_rollouts"]) for row in history]
    assert len(calls) == 2 * evaluation + sum(scored), "one call per rollout scored, held-out ones included"
    assert {c["pid"] for c in calls} and process.pid not in {c["pid"] for c in calls}, "scored in the workers"
    golds = {r["answer"] for r in rows}
    assert all(c["answer"] in golds and "Reply as JSON" in c["prompt"] for c in calls)
    # the calls come in the run's order: the evaluation before, each step's survivors, the evaluation after
    start = evaluation
    for row, n in zip(history, scored):
        rewards = [c["reward"] for c in calls[start : start + n]]
        assert row["reward/mean"] == pytest.approx(sum(rewards) / n)
        assert row["reward/accuracy"] == pytest.approx(sum(r > 0.5 for r in rewards) / n)
        assert row["reward/frac_no_answer"] == 0.0  # math-verify would find no \boxed{} in these completions
        start += n
    after = calls[start:]
    assert len(after) == evaluation
    sampled = [c["reward"] for c in after[HELDOUT:]]
    assert summary["heldout_accuracy_after"] == pytest.approx(sum(r > 0.5 for r in sampled) / len(sampled))

    # The export evaluates with the function that trained it, named again, and votes over no answers; told no
    # datasets, on the data the run held out (the export records it: names and paths), saying so first.
    log.unlink()
    export = tmp_path / "run" / "export"
    assert json.loads((export / "data_config.json").read_text())["heldout_path"] == str(data)
    evaluation = warm_python.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            f"checkpoint={export}",
            "k=2",
            "limit=3",
            "max_tokens=16",
            "reward.function=probe_rewards:logged",
            f"hydra.run.dir={tmp_path / 'eval'}",
        ],
        cwd=tmp_path,
        env=env,
        runtime_env=["REWARD_PROBE_LOG"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert evaluation.returncode == 0, evaluation.stderr[-4000:]
    assert evaluation.stdout.splitlines()[0] == (
        f"evaluating {export} on the run's held-out set: jsonl, {data} (recorded in {export / 'data_config.json'}): "
        "the first 3 problems, k = 2"
    )
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["reward"] == "probe_rewards:logged" and metrics["data"].startswith("the run's held-out set: jsonl")
    records = [json.loads(line) for line in (tmp_path / "eval" / "records.jsonl").read_text().splitlines()]
    assert [(r["dataset"], r["id"]) for r in records] == [("jsonl", row["id"]) for row in rows[:3]]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3 * 2 and all("Reply as JSON" in c["prompt"] for c in calls)
    jsonl = metrics["metrics"]["jsonl"]
    assert jsonl["avg@k"] == pytest.approx(sum(c["reward"] > 0.5 for c in calls) / len(calls))
    assert jsonl["maj@k"] is None and jsonl["arrol@k"] is None  # no answers extracted: nothing to vote over
    results = (tmp_path / "eval" / "results.md").read_text()
    assert "extracts no answers" in results and "Scored: the run's held-out set: jsonl, " in results
