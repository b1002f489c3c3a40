"""The offline quality-head probe (arrol_pl/analysis/head_probe/): positions, eligibility, the split, the probe
itself."""

import json
import math

import pytest
import torch

from arrol_pl.analysis.evaluation import DeepConfSettings, trace_scores
from arrol_pl.analysis.head_probe.features import (
    deepconf_at,
    detect_features,
    detect_lengths,
    detect_position,
    eligible_at,
    prefix_features,
    prefix_stats,
)
from arrol_pl.analysis.head_probe.fit import (
    ProbeSettings,
    fit_calibrator,
    load_exported_head,
    online_head_metrics,
    problem_parts,
    split_by_problem,
)
from arrol_pl.analysis.head_probe.lengths import evaluate_length, probe_lengths
from arrol_pl.analysis.head_probe.replay import BALANCE_ARMS, replay_balance, replay_votes
from arrol_pl.models.head import save_head
from arrol_pl.analysis.head_probe.tables import balance_table, inputs_table, markdown_table, votes_table
from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.head_training import HeadConfig
from arrol_pl.core.quality_head import QualityHead


def test_detect_lengths_are_fractions_of_max_tokens_and_must_be_distinct():
    assert detect_lengths([1 / 16, 1 / 8, 1 / 4, 1 / 2], 48) == [3, 6, 12, 24]
    with pytest.raises(ValueError, match="L=0"):
        detect_lengths([1 / 64], 48)
    with pytest.raises(ValueError, match="twice"):
        detect_lengths([0.1, 0.09], 48)
    with pytest.raises(ValueError, match="max_tokens"):
        detect_lengths([1.0], 48)


def test_detect_position_follows_the_engine_convention():
    # prompt of 5 tokens: L=1 reads the last prompt token, L reads the state that sampled token L
    assert detect_position(5, 10, 1) == 4
    assert detect_position(5, 10, 3) == 6
    # a rollout that ended before L: the state that sampled its last token
    assert detect_position(5, 2, 6) == 5
    with pytest.raises(ValueError):
        detect_position(5, 0, 3)


def test_eligible_means_reached_L_unfinished():
    assert eligible_at(torch.tensor([3, 4, 5, 48]), 4).tolist() == [False, False, True, True]


def test_split_by_problem_keeps_each_problem_in_one_part():
    problems = torch.arange(40).repeat_interleave(8)
    test = split_by_problem(problems, 0.5, seed=3)
    assert not set(problems[test].tolist()) & set(problems[~test].tolist())
    assert len(set(problems[test].tolist())) == 20
    assert torch.equal(test, split_by_problem(problems, 0.5, seed=3))
    assert not torch.equal(test, split_by_problem(problems, 0.5, seed=4))
    assert not split_by_problem(problems, 0.0, seed=3).any()
    test, calibration = problem_parts(problems, ProbeSettings(test_fraction=0.5, calibration_fraction=0.25))
    assert not (test & calibration).any()
    for part in (test, calibration, ~test & ~calibration):
        assert not set(problems[part].tolist()) & set(problems[~part].tolist())
    assert len(set(problems[calibration].tolist())) == 5
    # at least one problem on each side, however small the fraction
    assert len(set(problems[split_by_problem(problems, 0.001, seed=0)].tolist())) == 1
    with pytest.raises(ValueError, match="at least 2 problems"):
        split_by_problem(torch.zeros(8, dtype=torch.long), 0.5, seed=0)


def _synthetic(separable: bool, problems: int = 200, group: int = 8, dim: int = 8):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(problems * group, dim, generator=g)
    if separable:
        labels = (features[:, 0] > 0.3).float()
    else:
        labels = (torch.rand(problems * group, generator=g) < 0.4).float()
    return features, labels, torch.arange(problems).repeat_interleave(group)


def test_probe_on_separable_features_ranks_correct_rollouts_first():
    features, labels, problems = _synthetic(separable=True)
    settings = ProbeSettings(hidden_dim=32, training=HeadConfig(steps=300, lr=1e-2, replay=None))
    test, calibration = problem_parts(problems, settings)
    eligible = torch.ones_like(labels, dtype=torch.bool)
    confidence = torch.randn(labels.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = evaluate_length(4, features, labels, confidence, eligible, test, calibration, settings)
    assert r.n_train + r.n_calibration + r.n_test == labels.numel()
    assert r.head_auc > 0.97 and r.head_spearman > 0.7
    assert r.head_accuracy > max(0.9, r.majority_accuracy)
    assert r.head_ece < 0.1
    assert abs(r.deepconf_spearman) < 0.15  # random confidences: no signal
    assert r.test_head_scores.shape == r.test_labels.shape == (r.n_test,)


def test_probe_on_random_features_finds_no_signal():
    features, labels, problems = _synthetic(separable=False)
    settings = ProbeSettings(hidden_dim=32, training=HeadConfig(steps=200, lr=1e-2, replay=None))
    test, calibration = problem_parts(problems, settings)
    eligible = torch.ones_like(labels, dtype=torch.bool)
    r = evaluate_length(4, features, labels, torch.zeros(labels.numel()), eligible, test, calibration, settings)
    assert abs(r.head_spearman) < 0.12
    assert abs(r.head_auc - 0.5) < 0.08
    assert math.isnan(r.deepconf_spearman)  # constant confidence: undefined, not 0


@pytest.mark.slow  # trains a head at each of three lengths: outside the quick tier
def test_only_rollouts_longer_than_L_enter_the_probe_and_empty_parts_give_nan():
    features, labels, problems = _synthetic(separable=True, problems=40)
    response_lengths = torch.tensor([2, 9] * (labels.numel() // 2))
    logprobs = [[{0: -0.1, 1: -2.0}] * n for n in response_lengths.tolist()]
    settings = ProbeSettings(hidden_dim=16, training=HeadConfig(steps=50, replay=None), calibration_fraction=0.0)
    results = probe_lengths(
        {1: features, 4: features, 9: features},
        labels,
        response_lengths,
        problems,
        logprobs,
        [1, 4, 9],
        settings,
        fractions=[0.1, 0.4, 0.9],
    )
    assert [r.n_eligible for r in results] == [labels.numel(), labels.numel() // 2, 0]
    assert [r.fraction for r in results] == [0.1, 0.4, 0.9]
    assert results[1].n_train + results[1].n_test == labels.numel() // 2 and results[1].n_calibration == 0
    assert math.isnan(results[2].head_spearman) and results[2].n_test == 0
    row = results[2].row()
    assert row["head_spearman"] is None and "test_labels" not in row
    json.dumps([r.row() for r in results], allow_nan=False)
    table = markdown_table(results)
    assert "| 4 (2/5) |" in table and "n/a" in table
    assert "| head AUC within groups |" in table.splitlines()[0]  # what pruning acts on; n/a here: no groups


def test_deepconf_reads_only_the_first_L_tokens():
    settings = DeepConfSettings(topk=2)
    confident, unsure = {0: -0.01, 1: -5.0}, {0: -0.7, 1: -0.7}
    rollouts = [[confident] * 3 + [unsure] * 5, [unsure] * 8]
    at3 = deepconf_at(rollouts, 3, settings)
    assert at3[0] == pytest.approx(trace_scores([confident] * 3, settings))
    assert at3[0] > at3[1]
    assert deepconf_at(rollouts, 8, settings)[0] == pytest.approx(trace_scores(rollouts[0], settings))


def test_detect_features_batched_with_padding_match_one_sequence_at_a_time():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
    )
    model = Qwen3ForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (p,), generator=g).tolist() for p in (4, 7, 5, 6)]
    responses = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (9, 2, 12, 5)]
    lengths = [1, 3, 6]
    # a budget of 24 tokens forces several micro-batches, each right-padded
    got = detect_features(model, prompts, responses, lengths, pad_id=0, batch_tokens=24)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        with torch.no_grad():
            states = model.model(torch.tensor([p + r])).last_hidden_state[0]
        for length in lengths:
            expected = states[len(p) + min(len(r), length) - 2]
            torch.testing.assert_close(got[length][i], expected, atol=1e-5, rtol=0)


def test_load_exported_head_reads_head_calibrator_and_the_runs_detect_length(tmp_path):
    export = tmp_path / "run" / "export"
    export.mkdir(parents=True)
    assert load_exported_head(export) == (None, None, None)
    head = QualityHead(8, 4)
    calibrator = BinnedCalibrator(num_bins=16, capacity=32)
    calibrator.update(torch.tensor([-1.0, 2.0]), torch.tensor([0, 1]))
    save_head(head, calibrator, export / "quality_head")
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"config": {"engine": {"detect_length": 12}}}))
    loaded, cal, detect = load_exported_head(export)
    x = torch.randn(3, 8)
    torch.testing.assert_close(loaded(x), head(x))
    assert torch.equal(cal.bin_posteriors(), calibrator.bin_posteriors())
    assert detect == 12


def test_probe_settings_name_the_bad_field():
    with pytest.raises(ValueError, match="test_fraction"):
        ProbeSettings(test_fraction=1.0)
    with pytest.raises(ValueError, match="calibration_fraction"):
        ProbeSettings(calibration_fraction=-0.1)
    with pytest.raises(ValueError, match=r"^steps must be >= 1"):
        HeadConfig(steps=0)


def _tiny_qwen(layers: int = 4):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
    )
    return Qwen3ForCausalLM(config).eval()


def test_prefix_features_mean_and_middle_layer_match_one_sequence_at_a_time():
    model = _tiny_qwen(layers=4)
    g = torch.Generator().manual_seed(2)
    shared = torch.randint(1, 64, (6,), generator=g).tolist()
    # two rollouts share a prompt (one cached prompt forward serves both), one has its own
    prompts = [shared, shared, torch.randint(1, 64, (3,), generator=g).tolist()]
    responses = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (7, 2, 5)]
    lengths = [1, 3, 6]
    got = prefix_features(model, prompts, responses, lengths, ("last", "mean", "middle"), batch_tokens=5)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        with torch.no_grad():
            out = model.model(torch.tensor([p + r]), output_hidden_states=True)
        final, middle = out.last_hidden_state[0], out.hidden_states[2][0]  # 4 layers: the middle is after layer 2
        for length in lengths:
            k = min(len(r), length)
            torch.testing.assert_close(got["last"][length][i], final[len(p) + k - 2], atol=1e-5, rtol=0)
            torch.testing.assert_close(got["middle"][length][i], middle[len(p) + k - 2], atol=1e-5, rtol=0)
            torch.testing.assert_close(
                got["mean"][length][i], final[len(p) - 1 : len(p) + k - 1].mean(0), atol=1e-5, rtol=0
            )
    with pytest.raises(ValueError, match="stats"):
        prefix_features(model, prompts, responses, lengths, ("stats",))


def test_prefix_stats_hand_computed():
    # token 0 sampled twice; at t=1 the sampled token (5) was not the most likely one
    logprobs = [[{0: -0.1, 1: -2.5}, {5: -1.5, 2: -0.5}, {0: -0.2, 3: -1.8}]]
    stats = prefix_stats([[0, 5, 0]], logprobs, detect_length=2, topk=2)
    mean_lp, min_lp, last_lp, conf, top1 = stats[0].tolist()
    assert mean_lp == pytest.approx((-0.1 - 1.5) / 2) and min_lp == pytest.approx(-1.5)
    assert last_lp == pytest.approx(-1.5)
    assert conf == pytest.approx(((0.1 + 2.5) / 2 + (1.5 + 0.5) / 2) / 2)
    assert top1 == pytest.approx(0.5)
    assert torch.isnan(prefix_stats([[1, 2]], [None], 2)).all()


def test_replay_balance_steers_groups_with_an_informative_head():
    # 60 groups of 8 at pass rates 1/8..7/8; the head's score is the label plus noise (an informative head)
    g = torch.Generator().manual_seed(0)
    rates = torch.tensor([1, 2, 6, 7]).repeat(15) / 8
    labels = (torch.rand(60, 8, generator=g) < rates[:, None]).float().flatten()
    groups = torch.arange(60).repeat_interleave(8)
    scores = 2.0 * (labels - 0.5) + 0.5 * torch.randn(labels.numel(), generator=g)
    calibrator = fit_calibrator(scores, labels, num_bins=16)
    eligible = torch.ones(labels.numel(), dtype=torch.bool)
    out = replay_balance(scores, labels, eligible, groups, calibrator, keep_ratio=0.5, draws=8)
    assert out["none"]["keep"] == pytest.approx(1.0)
    for arm in ("arrol_anchored", "arrol_global", "arrol_group", "random"):
        assert out[arm]["keep"] == pytest.approx(0.5, abs=0.08)
    # the default anchored rule: fewer zero-advantage groups and more balance than random
    assert out["arrol_anchored"]["zero_adv_vs_random"] < -2 * out["arrol_anchored"]["zero_adv_vs_random_se"]
    assert out["arrol_anchored"]["balance"] > out["random"]["balance"]
    # the per-group target moves every group toward ρ = 0.5: fewer zero-advantage groups than random
    assert out["arrol_group"]["zero_adv_vs_random"] < -2 * out["arrol_group"]["zero_adv_vs_random_se"]
    assert out["arrol_group"]["balance"] > out["random"]["balance"]
    # so does keeping each group's best- and worst-scored rollouts (ranks only)
    assert out["arrol_spread"]["keep"] == pytest.approx(0.5, abs=0.08)
    assert out["arrol_spread"]["zero_adv_vs_random"] < -2 * out["arrol_spread"]["zero_adv_vs_random_se"]
    table = balance_table([type("R", (), {"detect_length": 4, "balance": out})()])
    assert "| 4 | ARRoL, per-group target |" in table and "| 4 | random |" in table
    # an uninformative head (constant scores) prunes like random
    flat = replay_balance(torch.zeros_like(scores), labels, eligible, groups, calibrator, keep_ratio=0.5, draws=8)
    for arm in ("arrol_anchored", "arrol_group", "arrol_spread"):
        assert flat[arm]["zero_adv"] == pytest.approx(flat["random"]["zero_adv"], abs=0.1)


def test_replay_balance_decides_each_draw_as_the_engine_s_batch_rule():
    """All draws are decided in one call; each draw's keep is what decide_batch gives h_t of step 0 of a run seeded
    seed + d (with rollouts finished before L always kept, and groups of several sizes)."""
    from arrol_pl.core.decisions import decide_batch
    from arrol_pl.core.pruning import PruningConfig, build_pruner_params

    g = torch.Generator().manual_seed(1)
    groups = torch.cat([torch.arange(6).repeat_interleave(8), torch.tensor([6, 6, 6, 7, 7, 7, 7])])
    labels = (torch.rand(groups.numel(), generator=g) < 0.4).float()
    scores = labels + torch.randn(groups.numel(), generator=g)
    eligible = torch.rand(groups.numel(), generator=g) > 0.15
    calibrator = fit_calibrator(scores, labels, num_bins=8)
    out = replay_balance(scores, labels, eligible, groups, calibrator, keep_ratio=0.5, draws=5, seed=3)
    for arm in ("arrol_anchored", "random"):
        kept, shared = [], []
        for d in range(5):
            config = PruningConfig(keep_ratio=0.5, cold_start_steps=0, seed=3 + d, **BALANCE_ARMS[arm])
            keep = decide_batch(build_pruner_params(config, calibrator, 0), scores, eligible, groups).keep
            kept.append(torch.stack([keep[groups == k].double().mean() for k in range(8)]))
            rewards = [labels[(groups == k) & keep] for k in range(8)]
            shared.append(torch.tensor([float(r.numel() < 2 or bool((r == r[0]).all())) for r in rewards]))
        assert out[arm]["keep"] == pytest.approx(float(torch.stack(kept).mean()), abs=1e-12)
        assert out[arm]["zero_adv"] == pytest.approx(float(torch.stack(shared).double().mean()), abs=1e-12)


def test_evaluate_length_reports_within_group_auc_and_the_replay():
    g = torch.Generator().manual_seed(3)
    problems = torch.arange(40).repeat_interleave(8)
    labels = (torch.rand(320, generator=g) < 0.5).float()
    features = torch.randn(320, 6, generator=g)
    features[:, 0] += 3 * labels  # separable within groups too
    eligible = torch.ones(320, dtype=torch.bool)
    test, calibration = problem_parts(problems, ProbeSettings(test_fraction=0.5, calibration_fraction=0.25))
    r = evaluate_length(
        4,
        features,
        labels,
        features[:, 1].double(),
        eligible,
        test,
        calibration,
        ProbeSettings(hidden_dim=16, training=HeadConfig(steps=100, lr=1e-2, replay=None)),
        standardize=True,
        groups=problems,
    )
    assert r.head_within_auc > 0.9 and 0.3 < r.deepconf_within_auc < 0.7
    assert set(r.balance) == {"arrol_anchored", "arrol_global", "arrol_group", "arrol_spread", "random", "none"}
    json.dumps(r.row(), allow_nan=False)
    assert "| stats | 4 |" in inputs_table({"stats": [r]})


def test_replay_votes_an_informative_head_outvotes_a_wrong_majority():
    # 40 problems x 8 rollouts: 3 correct answers (class 0) against 5 identical wrong ones (class 1), so the
    # majority is always wrong; the features at L_detect and at the end both carry the label
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([1.0] * 3 + [0.0] * 5).repeat(40)
    groups = torch.arange(40).repeat_interleave(8)
    classes = [[0, 0, 0, 1, 1, 1, 1, 1]] * 40
    end = torch.randn(320, 4, generator=g)
    end[:, 0] += 4 * labels
    detect = end + 0.5 * torch.randn(320, 4, generator=g)
    test, calibration = problem_parts(groups, ProbeSettings(test_fraction=0.5, calibration_fraction=0.25))
    out = replay_votes(
        end,
        detect,
        labels,
        torch.ones(320, dtype=torch.bool),
        groups,
        classes,
        torch.ones(320, dtype=torch.float64),
        test,
        calibration,
        ProbeSettings(hidden_dim=16, training=HeadConfig(steps=100, lr=1e-2, replay=None)),
    )
    assert out["problems"] == {"n": float(int(test.view(40, 8)[:, 0].sum())), "k": 8.0}
    assert out["majority"]["accuracy"] == 0.0 and out["deepconf"]["accuracy"] == 0.0  # equal weights: majority
    assert out["arrol_end"]["accuracy"] == 1.0 and out["arrol_end"]["vs_majority"] == 1.0
    assert out["pass"]["accuracy"] == 1.0 and out["avg"]["accuracy"] == pytest.approx(3 / 8)
    assert out["arrol_detect"]["accuracy"] == 1.0  # the pruning head, applied to complete rollouts
    assert "| ARRoL vote, head trained on complete rollouts | 1.000 ± 0.000 | +1.000 ± 0.000 |" in votes_table(out)


def test_online_head_metrics_adds_the_within_group_auc():
    # a head reading feature 0: positives score higher, inside each group too; a group offset (difficulty)
    # lifts the pooled AUC only
    torch.manual_seed(0)
    head = QualityHead(3, 4)
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
        head.fc1.weight[0, 0] = 1.0
        head.fc2.weight[0, 0] = 1.0
    groups = torch.arange(20).repeat_interleave(4)
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0]).repeat(20)
    features = torch.zeros(80, 3)
    features[:, 0] = 2.0 + labels + 0.1 * groups
    eligible = torch.ones(80, dtype=torch.bool)
    eligible[0] = False
    m = online_head_metrics(head, None, features, labels, eligible, groups)
    assert m["n"] == 79 and m["within_auc"] == pytest.approx(1.0)
    assert "within_auc" not in online_head_metrics(head, None, features, labels, eligible)
