"""The reward's worker pool under hangs, deadlines and crashes, plus the reward options.

Hangs are real: a power tower makes sympy compute for minutes; with a long math-verify timeout only
the pool's own limits can stop it.
"""

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import warm_python

from arrol_pl.core.reward_shaping import overlong_penalty
from arrol_pl.tasks.extraction import extract_boxed, has_boxed_answer
from arrol_pl.tasks.reward import MathReward, RewardConfig, default_workers
from arrol_pl.tasks.verify import score_answer

TOWER = "\\boxed{9^{9^{9^{9}}}}"


def slow_pool(**overrides) -> MathReward:
    # verify_timeout_s=60: math-verify's SIGALRM would fire far too late; the pool must act first.
    config = dict(num_workers=2, parse_timeout_s=5, verify_timeout_s=60)
    config.update(overrides)
    reward = MathReward(RewardConfig(**config))
    reward.start()
    return reward


@pytest.mark.slow  # waits out a batch deadline: outside the quick tier
def test_outer_deadline_stops_a_hang_quickly(caplog):
    with slow_pool(item_timeout_s=300) as reward:
        completions = [TOWER] + [f"\\boxed{{{k}}}" for k in range(6)]
        golds = ["1"] + [str(k) for k in range(6)]
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="arrol_pl.tasks.reward"):
            result = reward.score(completions, golds, deadline_s=2.0)
        elapsed = time.monotonic() - t0
        assert elapsed < 4.0
        assert result.status[0] == "deadline"
        assert result.status[1:] == ["ok"] * 6  # the other worker kept scoring
        assert result.rewards.tolist() == [0.0] + [1.0] * 6
        assert result.counts["deadline"] == 1 and result.n_failed == 1
        assert "deadline=1" in caplog.text
        # The hung worker was replaced: the pool still scores.
        assert reward._pool.replaced == 1
        again = reward.score(["\\boxed{\\frac12}", "\\boxed{3}"], ["0.5", "3"])
        assert again.rewards.tolist() == [1.0, 1.0]


@pytest.mark.slow  # waits out an item's hard limit: outside the quick tier
def test_item_hard_limit_kills_and_replaces_a_hung_worker():
    with slow_pool(item_timeout_s=1.5) as reward:
        t0 = time.monotonic()
        result = reward.score([TOWER, "\\boxed{2}", "\\boxed{7}"], ["1", "2", "8"], deadline_s=60)
        assert time.monotonic() - t0 < 4.0
        assert result.status == ["timeout", "ok", "ok"]
        assert result.rewards.tolist() == [0.0, 1.0, 0.0]
        assert result.counts["timeout"] == 1
        assert reward._pool.replaced == 1


@pytest.mark.slow  # starts worker processes again and again: outside the quick tier
def test_a_crashed_worker_is_retried_then_counted():
    with slow_pool(item_timeout_s=300) as reward:
        pool = reward._pool
        # A dead idle worker is noticed before it is given work: nothing is lost.
        os.kill(pool._workers[0].process.pid, signal.SIGKILL)
        pool._workers[0].process.join(timeout=5)
        assert reward.score(["\\boxed{5}", "\\boxed{6}"], ["5", "6"]).status == ["ok", "ok"]
        assert pool.replaced == 1

        # A worker killed mid-item: the item is retried once, and scored "error" when it dies again.
        def kill_busy_worker_twice():
            killed = 0
            deadline = time.monotonic() + 20
            while killed < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
                for w in list(pool._workers):
                    if w.pending and w.process.is_alive():
                        os.kill(w.process.pid, signal.SIGKILL)
                        killed += 1
                        break

        killer = threading.Thread(target=kill_busy_worker_twice)
        killer.start()
        result = reward.score([TOWER], ["1"], deadline_s=30)
        killer.join()
        assert result.status == ["error"]
        assert result.rewards.tolist() == [0.0]
        assert pool.replaced == 3
        assert reward.score(["\\boxed{5}"], ["5"]).status == ["ok"]


@pytest.mark.slow  # starts a pool of worker processes: outside the quick tier
def test_scoring_from_a_thread_uses_the_workers(reward):
    """SIGALRM only works in a main thread: the pool makes scoring safe from any thread."""
    out = {}
    thread = threading.Thread(
        target=lambda: out.update(r=reward.score(["\\boxed{\\dfrac{1}{2}}", TOWER], ["0.5", "1"]))
    )
    thread.start()
    thread.join(timeout=30)
    assert out["r"].status == ["ok", "timeout"]
    assert out["r"].rewards.tolist() == [1.0, 0.0]


CALLER = """
import sys
import torch  # an entry point that imports torch at its top, with no main guard
from arrol_pl.tasks.pool import RewardPool

print("the caller's top ran", flush=True)
main = sys.modules["__main__"]
before = (main.__file__, main.__spec__)
pool = RewardPool(2, start_method=sys.argv[1], function="probe:modules", search_dir=sys.argv[2])
print(pool.score([("p", "c", "a")], deadline_s=60)[0][0], pool.score([("p", "c", "a")], deadline_s=60)[0][0])
assert (main.__file__, main.__spec__) == before, "the caller's __main__ was not put back"
pool.close()
"""

PROBE = """
import sys

def modules(prompt, completion, answer):
    # 1 + 2: the worker has not imported torch; + 4: its __main__ is not a run of the caller's script
    return float(1 + 2 * ("torch" not in sys.modules) + 4 * ("RewardPool" not in vars(sys.modules["__main__"])))
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_worker_runs_nothing_of_the_calling_script(tmp_path, start_method):
    """multiprocessing would run the caller's script again in each worker (as ``__mp_main__``): its top (an import
    of torch here, a few seconds and a few hundred MB per worker) and all the more a script without a main guard.
    The pool's workers start without it, and the caller's ``__main__`` is put back."""
    (tmp_path / "caller.py").write_text(CALLER)
    (tmp_path / "probe.py").write_text(PROBE)
    out = warm_python.run(
        [sys.executable, str(tmp_path / "caller.py"), start_method, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["the caller's top ran", "7.0 7.0"], out.stdout


def test_in_process_scoring_refuses_threads():
    reward = MathReward(RewardConfig(num_workers=0))
    errors = []

    def run():
        try:
            reward.score(["\\boxed{1}"], ["1"])
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])
    assert reward.score(["\\boxed{1}"], ["1"]).rewards.tolist() == [1.0]  # fine from the main thread


def test_large_batch_matches_in_process_scoring(reward):
    rng = np.random.default_rng(0)
    golds = [str(int(g)) for g in rng.integers(0, 50, size=1024)]
    preds = [str(int(p)) for p in rng.integers(0, 50, size=1024)]
    forms = ["\\boxed{%s}", "so \\boxed{%s}.", "\\boxed{%s.0}", "no box %s"]
    completions = [forms[i % 4] % p for i, p in enumerate(preds)]
    result = reward.score(completions, golds)
    expected = [(p == g) and i % 4 != 3 for i, (p, g) in enumerate(zip(preds, golds))]
    assert result.correct.tolist() == expected
    assert result.counts["no_answer"] == 256 and result.n_failed == 0


def test_score_answer_in_process():
    assert score_answer("\\frac{1}{2}", "0.5", 1, 1) == (True, "ok")
    assert score_answer("", "0.5", 1, 1) == (False, "parse_error")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
        ("a \\boxed{1} b \\boxed{ 2 }", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces neither open nor close
        ("\\boxed{\\{1, 2\\}", None),  # an escaped \} does not close the box: truncated
        ("\\boxed 7$", "7"),
        ("no box", None),
        ("\\boxed{}", ""),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_format_reward(reward):
    with MathReward(RewardConfig(num_workers=0, format_weight=0.1)) as r:
        result = r.score(["\\boxed{3}", "\\boxed{4}", "3", "\\boxed{}"], ["3", "3", "3", "3"])
    assert np.allclose(result.rewards, [1.1, 0.1, 0.0, 0.0])
    assert result.has_answer.tolist() == [True, True, False, False]
    assert has_boxed_answer("x \\boxed{1}") and not has_boxed_answer("\\boxed{ }")


def test_overlong_penalty_matches_dapo():
    # L_max = 4096, L_cache = 512: free up to 3584, linear to -1 at 4096, -1 beyond.
    lengths = [100, 3584, 3600, 3840, 4096, 5000]
    expected = [0.0, 0.0, -16 / 512, -0.5, -1.0, -1.0]
    assert np.allclose(overlong_penalty(lengths, 4096, 512), expected)
    assert np.allclose(overlong_penalty([4096, 4097], 4096, 0), [0.0, -1.0])
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty([1], 10, 20)


def test_overlong_penalty_in_the_reward():
    with MathReward(RewardConfig(num_workers=0, overlong_max_length=4096, overlong_cache_length=512)) as r:
        result = r.score(["\\boxed{3}", "\\boxed{3}"], ["3", "3"], lengths=[100, 3840])
        assert np.allclose(result.rewards, [1.0, 0.5])
        with pytest.raises(ValueError, match="lengths"):
            r.score(["\\boxed{3}"], ["3"])


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"verify_timeout_s": 2.5}, "verify_timeout_s"),  # float timeouts are silently ignored by math-verify
        ({"parse_timeout_s": 0}, "parse_timeout_s"),
        ({"num_workers": -1}, "num_workers"),
        ({"batch_deadline_s": 0}, "batch_deadline_s"),
        ({"start_method": "fork"}, "start_method"),
        ({"overlong_max_length": 100, "overlong_cache_length": 200}, "overlong_cache_length"),
    ],
)
def test_config_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        RewardConfig(**overrides)


@pytest.mark.parametrize("cpus, local_ranks, expected", [(128, "8", 16), (16, None, 16), (3, "2", 1), (2, "8", 1)])
def test_default_workers_share_this_process_cpus_among_the_node_ranks(monkeypatch, cpus, local_ranks, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    if local_ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_ranks)
    assert default_workers() == expected
    assert MathReward(RewardConfig()).num_workers == expected
    assert MathReward(RewardConfig(num_workers=3)).num_workers == 3  # a set count is kept


def test_default_workers_without_an_affinity_count_every_core(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_workers() == 3


def test_metrics_report_every_failure_kind(reward):
    result = reward.score(["\\boxed{1}", "x", "\\boxed{}"], ["1", "1", "1"])
    m = result.metrics()
    assert m["reward/accuracy"] == pytest.approx(1 / 3)
    assert m["reward/frac_no_answer"] == pytest.approx(1 / 3)
    assert m["reward/frac_parse_error"] == pytest.approx(1 / 3)
    assert {"reward/frac_timeout", "reward/frac_deadline", "reward/frac_error", "reward/frac_gold_error"} <= set(m)


def test_answer_classes_group_equivalent_answers(reward):
    classes = reward.answer_classes(
        [
            ["\\frac12", "0.5", "3", None, "1/2", "3.0", "x=3", ""],
            ["\\{1,2\\}", "2, 1", "\\{1,3\\}"],
            [None, None],
        ]
    )
    assert classes[0] == [0, 0, 2, None, 0, 2, 2, None]
    assert classes[1] == [0, 0, 2]  # a bare comma list compares as a set
    assert classes[2] == [None, None]


@pytest.mark.subprocess
def test_dataset_adapters_get_extraction_without_the_pool():
    code = (
        "import sys, arrol_pl.tasks.minerva, arrol_pl.tasks.rows; "
        "assert 'arrol_pl.tasks.pool' not in sys.modules and 'math_verify' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
