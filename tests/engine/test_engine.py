"""ArrolEngine against transformers and against the pruning spec (paper §4.3, Algorithm 1 l. 12–28).

All tests share one float32 engine on a tiny Qwen3 built in the session (see conftest.py).
"""

from __future__ import annotations

import pytest
import torch

from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.core.screening import GroupScreen

pytestmark = pytest.mark.engine

PROMPTS = [
    "Question: What is 12 + 35? Answer:",
    "Compute (3 * 4) - 5.",
    "Let us think step by step.\n",
    "The quick brown fox",
]


def hf_hidden(model, ids: list[int]) -> torch.Tensor:
    """transformers' final-layer (post-norm) hidden states, (T, D)."""
    with torch.no_grad():
        return model.model(torch.tensor([ids])).last_hidden_state[0]


def test_greedy_tokens_match_transformers(engine, hf_policy):
    result = engine.generate(PROMPTS, 1, dict(max_tokens=12, temperature=0.0))
    eos = engine.tokenizer.eos_token_id
    for r in result.rollouts:
        with torch.no_grad():
            out = hf_policy.generate(
                torch.tensor([r.prompt_token_ids]),
                max_new_tokens=12,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        hf_new = out[0, len(r.prompt_token_ids) :].tolist()
        assert r.response_token_ids == hf_new[: len(r.response_token_ids)]
        assert r.finish_reason == ("length" if len(r.response_token_ids) == 12 else "stop")


def test_detect_features_match_transformers_and_score_is_head(engine, hf_policy):
    detect = 5
    result = engine.generate(
        PROMPTS,
        3,
        dict(max_tokens=12, temperature=1.0, seed=7, ignore_eos=True),
        detect_length=detect,
        pruner=PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=1),
    )
    assert any(r.pruned for r in result.rollouts) and any(not r.pruned for r in result.rollouts)
    for r in result.rollouts:
        seq = r.prompt_token_ids + r.response_token_ids
        position = len(r.prompt_token_ids) + detect - 2
        expected = hf_hidden(hf_policy, seq)[position]
        assert r.feature.shape == (engine.hidden_size,)
        torch.testing.assert_close(r.feature, expected, atol=1e-4, rtol=0)
        with torch.no_grad():
            head_score = float(engine.head(r.feature[None]).item())
        assert r.score == pytest.approx(head_score, abs=1e-5)


def test_end_scoring_uses_the_state_that_sampled_the_last_token(engine, hf_policy):
    # stop early on a quarter of the vocabulary so lengths vary; detect_length=None scores at the end
    stop_ids = list(range(2, len(engine.tokenizer), 4))
    result = engine.generate(PROMPTS[:2], 4, dict(max_tokens=10, temperature=1.0, seed=3, stop_token_ids=stop_ids))
    lengths = {len(r.response_token_ids) for r in result.rollouts}
    assert len(lengths) > 1, "test needs rollouts of different lengths"
    for r in result.rollouts:
        assert not r.pruned and not r.eligible
        seq = r.prompt_token_ids + r.response_token_ids
        expected = hf_hidden(hf_policy, seq)[len(seq) - 2]
        torch.testing.assert_close(r.feature, expected, atol=1e-4, rtol=0)


def test_rollouts_finishing_before_detect_are_kept_and_scored(engine, hf_policy):
    detect = 6
    stop_ids = list(range(2, len(engine.tokenizer), 3))
    result = engine.generate(
        PROMPTS,
        4,
        dict(max_tokens=12, temperature=1.0, seed=5, stop_token_ids=stop_ids),
        detect_length=detect,
        pruner=PrunerParams(policy="random", keep_ratio=0.25, min_keep_per_group=0, seed=2),
    )
    early = [r for r in result.rollouts if len(r.response_token_ids) < detect]
    assert early, "test needs rollouts that finish before L_detect"
    for r in early:
        assert r.finish_reason == "stop" and not r.pruned and not r.eligible
        seq = r.prompt_token_ids + r.response_token_ids
        torch.testing.assert_close(r.feature, hf_hidden(hf_policy, seq)[len(seq) - 2], atol=1e-4, rtol=0)
    for r in result.rollouts:
        if r.pruned:
            assert r.eligible and len(r.response_token_ids) == detect


def test_half_keep_prunes_at_exactly_detect_length(engine):
    detect, max_tokens = 4, 16
    result = engine.generate(
        PROMPTS,
        8,
        dict(max_tokens=max_tokens, temperature=1.0, seed=11, ignore_eos=True),
        detect_length=detect,
        # Eq. 2 with an empty table: q = 0.5 and δ = 0, so every rollout survives with κ
        pruner=PrunerParams(policy="arrol", balance_target="global", keep_ratio=0.5, min_keep_per_group=0, seed=4),
    )
    pruned = [r for r in result.rollouts if r.pruned]
    kept = [r for r in result.rollouts if not r.pruned]
    assert pruned and kept
    for r in pruned:
        assert r.finish_reason == "pruned"
        assert len(r.response_token_ids) == detect
        assert r.generated_tokens == detect, "a pruned rollout must be aborted in the step that reached L_detect"
        assert r.text == engine.tokenizer.decode(r.response_token_ids, skip_special_tokens=True)
    for r in kept:
        assert r.finish_reason == "length" and len(r.response_token_ids) == max_tokens
        assert r.survival == pytest.approx(0.5)
    assert result.generated_tokens == len(pruned) * detect + len(kept) * max_tokens
    assert not engine.llm.has_unfinished_requests()


def test_policy_none_and_no_pruner_prune_nothing(engine):
    sampling = dict(max_tokens=8, temperature=1.0, seed=2, ignore_eos=True)
    for pruner in (PrunerParams(policy="none", keep_ratio=0.25, min_keep_per_group=0), None):
        result = engine.generate(PROMPTS, 4, sampling, detect_length=3, pruner=pruner)
        assert not any(r.pruned for r in result.rollouts)
        assert all(len(r.response_token_ids) == 8 and r.finish_reason == "length" for r in result.rollouts)
        assert all(r.feature is not None and r.score is not None for r in result.rollouts)
    inactive = PrunerParams(policy="arrol", keep_ratio=0.25, min_keep_per_group=0, active=False)
    assert not any(r.pruned for r in engine.generate(PROMPTS, 4, sampling, 3, inactive).rollouts)


def test_fixed_seed_reproduces_decisions_and_tokens(engine):
    def run():
        result = engine.generate(
            PROMPTS,
            6,
            dict(max_tokens=8, temperature=1.0, seed=21, ignore_eos=True),
            detect_length=3,
            pruner=PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=1, seed=9),
        )
        return [(r.pruned, tuple(r.response_token_ids), round(r.score, 5)) for r in result.rollouts]

    first, second = run(), run()
    assert first == second
    assert any(p for p, _, _ in first) and not all(p for p, _, _ in first)


def test_decisions_are_a_function_of_seed_prompt_and_scores(engine):
    """Replaying decide_batch offline on the returned scores gives the engine's decisions (Algorithm 1 l. 20-22)."""
    from arrol_pl.core.decisions import decide_batch

    params = PrunerParams(
        policy="arrol",
        keep_ratio=0.5,
        balance_strength=0.5,
        min_keep_per_group=2,
        seed=17,
        bin_posteriors=tuple(0.1 + 0.1 * i for i in range(8)),
    )
    result = engine.generate(
        PROMPTS, 6, dict(max_tokens=6, temperature=1.0, seed=4, ignore_eos=True), detect_length=2, pruner=params
    )
    rs = result.rollouts
    replay = decide_batch(
        params,
        torch.tensor([r.score for r in rs]),
        torch.tensor([r.eligible for r in rs]),
        torch.tensor([r.prompt_index for r in rs]),
    )
    assert [not r.pruned for r in rs] == replay.keep.tolist()
    assert [r.survival for r in rs] == pytest.approx(replay.survival.tolist())
    for p in range(len(PROMPTS)):
        assert sum(not r.pruned for r in rs if r.prompt_index == p) >= 2, "per-group floor"


def test_hooks_do_not_change_what_is_generated(engine):
    """The benchmark's stock baseline (nothing read from the hidden states) and the engine scoring at κ = 1 produce
    the same rollouts, and both count the requests each step advanced."""
    sampling = dict(max_tokens=8, temperature=1.0, seed=13, ignore_eos=True)
    stock = engine.generate(PROMPTS, 3, sampling, features=False)
    hooked = engine.generate(PROMPTS, 3, sampling, detect_length=2, pruner=PrunerParams(keep_ratio=1.0))
    assert [r.response_token_ids for r in stock.rollouts] == [r.response_token_ids for r in hooked.rollouts]
    assert stock.generated_tokens == hooked.generated_tokens == 8 * 3 * len(PROMPTS)
    assert all(r.feature is None and r.score is None for r in stock.rollouts)
    assert sum(stock.step_requests) == sum(hooked.step_requests) == stock.generated_tokens
    assert engine.tap.runner.execute_model == engine.tap._execute_model, "the tap stays in place"


def test_the_bare_loop_is_stock_vllm_on_the_same_requests(engine):
    """The benchmarks' reference: the same per-rollout seeds give the same tokens through vLLM's own loop (the
    tap out, one final output per request), and the tap is back afterwards."""
    sampling = dict(max_tokens=6, temperature=0.0, ignore_eos=True)
    from arrol_pl.engine.bare import generate_bare

    wall, tokens, steps = generate_bare(engine, PROMPTS, 2, sampling, logprobs_topk=0)
    ours = engine.generate(PROMPTS, 2, sampling, logprobs_topk=0)
    assert tokens == ours.generated_tokens == 6 * 2 * len(PROMPTS) and steps == ours.steps and wall > 0
    assert engine.tap.runner.execute_model == engine.tap._execute_model, "tap reinstalled after the bare run"
    assert not engine.llm.has_unfinished_requests()


@pytest.mark.parametrize("policy", ["random", "arrol"])
def test_achieved_keep_ratio_is_near_kappa(engine, policy):
    result = engine.generate(
        [f"{a} + {a + 1} =" for a in range(16)],
        8,
        dict(max_tokens=4, temperature=1.0, seed=0, ignore_eos=True),
        detect_length=2,
        pruner=PrunerParams(policy=policy, keep_ratio=0.5, min_keep_per_group=0, seed=123),
    )
    assert len(result.rollouts) == 128
    assert abs(result.keep_ratio - 0.5) < 0.15


def test_top_k_logprobs_are_returned_per_token(engine):
    result = engine.generate(
        PROMPTS[:1], 2, dict(max_tokens=5, temperature=1.0, seed=1, ignore_eos=True), detect_length=2, logprobs_topk=2
    )
    for r in result.rollouts:
        assert len(r.logprobs) == len(r.response_token_ids)
        for token, entry in zip(r.response_token_ids, r.logprobs):
            assert token in entry and len(entry) >= 2
            assert all(lp <= 0.0 for lp in entry.values())


def test_stats_heads_read_the_prefix_statistics_of_the_sampled_log_probs(engine, hf_policy):
    """A ``last+stats`` head scores [hidden state at L, the five prefix statistics of the first L tokens]; a
    ``stats`` head the statistics alone; the engine samples with top-20 log-probs for them and returns log-probs
    only when asked."""
    from arrol_pl.core.confidence import PREFIX_STATISTICS, STATISTICS_TOPK, prefix_statistics

    detect, width = 4, len(PREFIX_STATISTICS)
    sampling = dict(max_tokens=10, temperature=1.0, seed=3, ignore_eos=True)
    pruner = PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=2)
    paper_head = engine.head
    both = QualityHead(engine.hidden_size + width, 16, "last+stats")
    both.set_input_moments(torch.randn(32, engine.hidden_size + width) * 2 + 1)
    try:
        engine.set_head(both)
        assert (engine.head_input, engine.feature_dim) == ("last+stats", engine.hidden_size + width)
        silent = engine.generate(PROMPTS, 2, sampling, detect_length=detect, pruner=pruner)
        assert all(r.logprobs is None for r in silent.rollouts)
        result = engine.generate(PROMPTS, 2, sampling, detect_length=detect, pruner=pruner, logprobs_topk=2)
        assert any(r.pruned for r in result.rollouts)
        for quiet, r in zip(silent.rollouts, result.rollouts):
            assert r.feature.shape == (engine.hidden_size + width,)
            torch.testing.assert_close(quiet.feature, r.feature)  # asking for log-probs changes nothing
            position = len(r.prompt_token_ids) + detect - 2
            hidden = hf_hidden(hf_policy, r.prompt_token_ids + r.response_token_ids)[position]
            torch.testing.assert_close(r.feature[:-width], hidden, atol=1e-4, rtol=0)
            assert all(len(entry) >= STATISTICS_TOPK for entry in r.logprobs)  # a superset of the top 2
            stats = prefix_statistics(r.response_token_ids, r.logprobs, detect).float()
            torch.testing.assert_close(r.feature[-width:], stats)
            with torch.no_grad():
                assert r.score == pytest.approx(float(engine.head(r.feature[None])), abs=1e-5)
        engine.set_head(QualityHead(width, 16, "stats"))
        alone = engine.generate(PROMPTS, 2, sampling, detect_length=detect, pruner=pruner)
        for r, both_r in zip(alone.rollouts, result.rollouts):
            torch.testing.assert_close(r.feature, both_r.feature[-width:])
        with pytest.raises(ValueError, match="'stats' feature size 5"):
            engine.sync_weights(head_state=paper_head.state_dict())
    finally:
        engine.set_head(paper_head)
    assert engine.head_input == "last" and engine.feature_dim == engine.hidden_size


def hf_greedy(model, ids):
    """transformers' greedy continuation of 8 tokens (EOS ignored), the reference for engine outputs."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(ids) :].tolist()


def test_weight_sync_serves_the_updated_policy(engine, tiny_model_dirs, hf_policy):
    from transformers import AutoModelForCausalLM

    updated = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["updated"], dtype=torch.float32).eval()
    long_prompt = " ".join(f"{a} + {a} = {2 * a}." for a in range(40))
    prompts = [long_prompt, PROMPTS[0]]
    assert len(engine.tokenizer.encode(long_prompt)) > 200
    sampling = dict(max_tokens=8, temperature=0.0, ignore_eos=True)
    engine.generate(prompts, 1, sampling)  # fills the prefix cache with the old policy's KV

    new_head = QualityHead(engine.hidden_size, 256)
    old_head = {k: v.clone() for k, v in engine.head.state_dict().items()}
    try:
        seconds = engine.sync_weights(updated.state_dict().items(), new_head.state_dict())
        assert seconds > 0 and engine.sync_seconds[-1] == seconds
        result = engine.generate(prompts, 1, sampling, detect_length=3)
        for r in result.rollouts:
            assert r.response_token_ids == hf_greedy(updated, r.prompt_token_ids)
            with torch.no_grad():
                assert r.score == pytest.approx(float(new_head(r.feature[None])), abs=1e-5)
    finally:
        engine.sync_weights(hf_policy.state_dict().items(), old_head)
    result = engine.generate(prompts, 1, sampling)
    for r in result.rollouts:
        assert r.response_token_ids == hf_greedy(hf_policy, r.prompt_token_ids)


def test_bad_inputs_raise_clear_errors_and_engine_stays_usable(engine):
    sampling = dict(max_tokens=6, temperature=0.0)
    with pytest.raises(ValueError, match="prompts is empty"):
        engine.generate([], 2, sampling)
    with pytest.raises(ValueError, match="detect_length"):
        engine.generate(PROMPTS, 2, sampling, detect_length=6)
    with pytest.raises(ValueError, match="longer than the model context"):
        engine.generate([PROMPTS[0], [5] * engine.max_model_len], 2, sampling)
    with pytest.raises(ValueError, match="hidden size"):
        engine.set_head(QualityHead(engine.hidden_size + 1))
    with pytest.raises(ValueError, match="hidden size"):
        engine.sync_weights(head_state=QualityHead(engine.hidden_size // 2).state_dict())
    assert not engine.llm.has_unfinished_requests()
    result = engine.generate(PROMPTS, 2, sampling, detect_length=3, pruner=PrunerParams(policy="none"))
    assert len(result.rollouts) == 2 * len(PROMPTS)
    assert all(r.feature is not None for r in result.rollouts)


def test_heldout_evaluation_has_a_random_stream_of_its_own(engine):
    import torch

    from arrol_pl.tasks.problem import Problem
    from arrol_pl.tasks.reward import MathReward, RewardConfig
    from arrol_pl.train.run.heldout import evaluate_heldout

    problems = [Problem(f"p{i}", f"Compute {i} + 1.", str(i + 1)) for i in range(6)]
    reward = MathReward(RewardConfig(num_workers=0))
    try:
        torch.manual_seed(99)
        state = torch.get_rng_state()
        first = evaluate_heldout(engine, reward, problems, 3, 1.0, 12, seed=5)
        # training's stream is where it was: the evaluation drew from its own
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(7)  # a different training state, the same evaluation
        again = evaluate_heldout(engine, reward, problems, 3, 1.0, 12, seed=5)
    finally:
        reward.close()
    assert (first.accuracy, first.greedy_accuracy) == (again.accuracy, again.greedy_accuracy)
    assert first.problems == 6 and first.samples == 3 and first.accuracy_se >= 0
    # per problem, in the problems' order: what pairs two arms' evaluations by problem
    assert first.per_problem == again.per_problem and len(first.per_problem) == 6
    assert all(abs(v * 3 - round(v * 3)) < 1e-9 for v in first.per_problem)  # k of 3 samples right
    assert abs(sum(first.per_problem) / 6 - first.accuracy) < 1e-12

    # what that relies on: without per-request seeds the engine samples from torch's global generator
    def sample(seed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            rollouts = engine.generate([p.prompt for p in problems], 3, {"temperature": 1.0, "max_tokens": 12}).rollouts
        return [r.response_token_ids for r in rollouts]

    assert sample(5) == sample(5) != sample(6)


def test_partial_weight_sync_of_the_trained_top_layer(engine, tiny_model_dirs, hf_policy):
    """model.trainable_layers: only the top block and final norm are synced; the engine keeps the rest."""
    import copy

    from transformers import AutoModelForCausalLM

    from arrol_pl.train.policy.weights import freeze_lower_layers, policy_weights

    updated = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["updated"], dtype=torch.float32).eval()
    mixed = copy.deepcopy(hf_policy)
    top = len(mixed.model.layers) - 1
    mixed.model.layers[top].load_state_dict(updated.model.layers[top].state_dict())
    mixed.model.norm.load_state_dict(updated.model.norm.state_dict())
    assert freeze_lower_layers(mixed, 1) < sum(p.numel() for p in mixed.parameters()) // 2
    names = [name for name, _ in policy_weights(mixed)]
    assert names and all(n.startswith((f"model.layers.{top}.", "model.norm.")) for n in names)
    sampling = dict(max_tokens=8, temperature=0.0, ignore_eos=True)

    try:
        engine.sync_weights(policy_weights(mixed))
        for r in engine.generate(PROMPTS, 1, sampling).rollouts:
            assert r.response_token_ids == hf_greedy(mixed, r.prompt_token_ids)
    finally:
        engine.sync_weights(hf_policy.state_dict().items())


# ---------------------------------------------------------------- the group screen (beyond the paper)
IDENTITY = tuple((b + 0.5) / 32 for b in range(32))


def test_prompt_features_are_the_last_prompt_tokens_hidden_state(engine, hf_policy):
    feats = engine.prompt_features(PROMPTS)
    assert feats.shape == (len(PROMPTS), engine.hidden_size) and feats.dtype == torch.float32
    for prompt, row in zip(PROMPTS, feats):
        ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
        torch.testing.assert_close(row, hf_hidden(hf_policy, ids)[-1], atol=1e-4, rtol=0)
    assert not engine.llm.has_unfinished_requests()


def test_detect_screen_aborts_dropped_groups_at_l_detect_and_audits_run_on(engine):
    detect, max_tokens, size = 3, 12, 4
    screen = GroupScreen(keep=2, seed=5, audited=frozenset({1}), shadow=frozenset({3}))
    result = engine.generate(
        PROMPTS,
        size,
        dict(max_tokens=max_tokens, temperature=1.0, seed=3, ignore_eos=True),
        detect_length=detect,
        pruner=PrunerParams(policy="none", keep_ratio=1.0, bin_posteriors=IDENTITY, seed=2),
        screen=screen,
    )
    groups = [result.rollouts[k * size : (k + 1) * size] for k in range(len(PROMPTS))]
    dropped = [k for k in range(3) if groups[k][0].screened]
    kept = [k for k in range(3) if not groups[k][0].screened]
    assert len(kept) == 2 and len(dropped) == 1, "the screen keeps `keep` of the non-shadow groups"
    for k in range(3):
        assert all(r.group_p0 is not None and r.screened == (k in dropped) for r in groups[k])
    for k in dropped:
        for r in groups[k]:
            assert r.pruned and r.finish_reason == "pruned" and len(r.response_token_ids) == detect
            expected = max_tokens if k == 1 else detect
            assert r.generated_tokens == expected, "a dropped group is aborted at L_detect unless it is audited"
            assert (r.full_text is not None) == (k == 1)
    for k in kept:
        assert all(not r.pruned and len(r.response_token_ids) == max_tokens for r in groups[k])
    for r in groups[3]:  # the shadow group: complete, never trained
        assert r.screened and r.pruned and r.audited and r.group_p0 is None
        assert len(r.response_token_ids) == max_tokens and r.full_text == r.text
    assert result.keep_ratio == 1.0, "keep_ratio counts within-group pruning only"
    assert not engine.llm.has_unfinished_requests()


def test_detect_screen_needs_a_detect_length(engine):
    with pytest.raises(ValueError, match="needs detect_length"):
        engine.generate(PROMPTS[:1], 2, dict(max_tokens=4), screen=GroupScreen(keep=1))


@pytest.mark.parametrize("two_part", [False, True], ids=["one_pass", "detect_first"])
def test_a_generation_cut_short_while_adding_requests_leaves_none_running(engine, monkeypatch, two_part):
    """A signal (KeyboardInterrupt) that lands inside ``add_request`` after vLLM took the request, before its id came
    back: the generation aborts every request it handed an id to, so the engine is idle (it can close, or generate
    again) rather than holding a request nothing tracks."""
    from arrol_pl.engine import adapter

    original, calls = adapter.add_request, []

    def interrupted(*args, **kw):
        internal = original(*args, **kw)
        calls.append(internal)
        if len(calls) == (10 if two_part else 3):  # detect-first: inside the survivors' continuations
            raise KeyboardInterrupt
        return internal

    monkeypatch.setattr(adapter, "add_request", interrupted)
    pruner = PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=3) if two_part else None
    with pytest.raises(KeyboardInterrupt):
        engine.generate(
            ["1 + 1 =", "2 + 3 ="],
            4,
            {"max_tokens": 16, "temperature": 1.0},
            detect_length=4 if two_part else None,
            pruner=pruner,
            detect_first=two_part or None,
        )
    assert len(calls) == (10 if two_part else 3)
    assert not adapter.has_unfinished_requests(engine.llm)
    monkeypatch.setattr(adapter, "add_request", original)
    assert len(engine.generate(["1 + 1 ="], 2, {"max_tokens": 4, "temperature": 0.0}).rollouts) == 2
