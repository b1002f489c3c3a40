"""Offline probe of the quality head against DeepConf trace confidence (paper §4.2, Fig. 2(b–d)).

One fixed set of rollouts, generated once without pruning, is scored at several detection lengths L:
a fresh :class:`QualityHead` learns correctness from the detect-time features of some problems and is
tested on the others, next to DeepConf confidence over the same first L tokens of the same rollouts.

Decisions:
- **The engine's feature.** The feature at L of a rollout with prompt length P and n response tokens is
  transformers' ``last_hidden_state[P + min(n, L) - 2]`` over ``prompt + response``: the position
  convention of :mod:`arrol_pl.engine.engine` (the state that sampled token L, or the last token of a
  shorter rollout). ``last_hidden_state`` is post-norm, like the engine's tap; it is read from the
  decoder (``model.base_model``) so no LM-head logits are computed. One forward per rollout serves every
  L; right padding leaves the real tokens' positions and attention as they are.
- **Eligibility is the engine's.** At L a rollout is a prune candidate only if it reached token L
  unfinished, i.e. it has more than L response tokens (L < max_tokens); a rollout whose L-th token ended
  it is complete and is never scored for pruning. Only eligible rollouts enter the probe at L.
- **Split by problem.** Rollouts of one problem share a prompt and are correlated; a problem is in one
  part only (head-fit, calibration or test), drawn once with a seed so every L is tested on the same
  problems.
- **Training recipe of the RL run.** BCE minibatch steps through :func:`~arrol_pl.core.head_training.head_update`
  on a :class:`~arrol_pl.core.head_training.FeatureReplay` window holding the whole fit part, AdamW, with
  the trainer's :class:`~arrol_pl.core.head_training.HeadConfig` (more steps: one fit, not one per step).
- **Calibration on fresh scores.** The online calibrator sees each rollout's score before the head has
  trained on it; the head's scores on its own training rollouts are over-confident. The calibrator is
  therefore fitted on a held-apart share of the training problems (``calibration_fraction``; 0 fits it on
  the head-fit part, which biases the ECE low and the accuracy high).
- **Metrics** come from :mod:`arrol_pl.core.metrics` through :func:`~arrol_pl.core.head_training.head_quality`
  (accuracy of the calibrated posterior > 0.5, AUC, Spearman, ECE); the majority-class accuracy of the
  test part is reported beside the head's accuracy, as the floor it must beat.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from arrol_pl.analysis.evaluation import DeepConfSettings, trace_scores
from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.confidence import PREFIX_STATISTICS, STATISTICS_TOPK, prefix_statistics
from arrol_pl.core.head_training import FeatureReplay, HeadConfig, head_quality, head_update
from arrol_pl.core.metrics import binary_auc, mean_sd_se, spearman, voted_answer_correct, within_group_auc
from arrol_pl.core.pruning import PruningConfig, build_pruner_params, decide_batch
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.core.voting import arrol_vote, majority_vote, weighted_vote
from arrol_pl.train.summary import RunSummary


PROBE_TRAINING = HeadConfig(steps=300, replay=None)
"""The probe's head recipe: the trainer's (``head.*``), fitted once on the whole fit part."""


@dataclass(frozen=True)
class ProbeSettings:
    """How a probe head is trained and calibrated at each detection length."""

    hidden_dim: int = 256
    """Head width (the trainer's ``head.hidden_dim``)."""
    training: HeadConfig = field(default_factory=lambda: replace(PROBE_TRAINING))
    """BCE minibatch steps, learning rate, minibatch size."""
    calibration_bins: int | None = None
    """B of the binned calibrator; None: one bin per 32 calibration rollouts, at most 128 (the density of the
    engine's 128 bins over its 4096-rollout window; 128 bins over a few hundred rollouts leave most bins
    empty and the posterior no longer follows the score's order)."""
    test_fraction: float = 0.5
    """Share of the problems whose rollouts test the head (the rest train and calibrate it)."""
    calibration_fraction: float = 0.25
    """Share of the training problems held apart to fit the calibrator (0: fit it on the head-fit part)."""
    seed: int = 0
    """Seeds the head's initialisation and minibatch draws."""

    def __post_init__(self) -> None:
        if self.hidden_dim < 1:
            raise ValueError(f"ProbeSettings.hidden_dim must be >= 1, got {self.hidden_dim}")
        if self.calibration_bins is not None and self.calibration_bins < 1:
            raise ValueError(f"ProbeSettings.calibration_bins must be >= 1, got {self.calibration_bins}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"ProbeSettings.test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.calibration_fraction < 1.0:
            raise ValueError(f"ProbeSettings.calibration_fraction must be in [0, 1), got {self.calibration_fraction}")


def detect_lengths(fractions: Sequence[float], max_tokens: int) -> list[int]:
    """L = floor(fraction · max_tokens) for each fraction; each must give a distinct 1 <= L < max_tokens."""
    out = []
    for f in fractions:
        length = math.floor(f * max_tokens)
        if not 1 <= length < max_tokens:
            raise ValueError(f"fraction {f:g} of max_tokens={max_tokens} gives L={length}; need 1 <= L < max_tokens")
        if length in out:
            raise ValueError(f"fraction {f:g} of max_tokens={max_tokens} gives L={length} twice: pass distinct lengths")
        out.append(length)
    return out


def detect_position(prompt_length: int, response_length: int, detect_length: int) -> int:
    """0-based index into ``prompt + response`` of the engine's feature at ``detect_length`` (module docstring)."""
    if prompt_length < 1 or response_length < 1 or detect_length < 1:
        raise ValueError(
            f"detect_position needs positive lengths, got prompt={prompt_length}, response={response_length}, "
            f"L={detect_length}"
        )
    return prompt_length + min(response_length, detect_length) - 2


def eligible_at(response_lengths: torch.Tensor, detect_length: int) -> torch.Tensor:
    """``(N,)`` bool: the rollout reached token ``detect_length`` unfinished (the engine's ``eligible``)."""
    return torch.as_tensor(response_lengths) > detect_length


FEATURE_KINDS = ("last", "mean", "middle", "stats", "last+stats")
"""Head inputs the probe compares (module docstring): the paper's ``last``, a ``mean`` over the prefix, a
``middle`` layer, the prefix ``stats`` the engine samples with (no forward pass), and ``last+stats``
concatenated (what ``head.input=last+stats`` feeds the online head)."""


@torch.no_grad()
def prefix_features(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    lengths: Sequence[int],
    kinds: Sequence[str] = ("last",),
    pad_id: int = 0,
    batch_tokens: int = 16384,
) -> dict[str, dict[int, torch.Tensor]]:
    """Hidden-state features of every rollout at every L in ``lengths``, one forward per distinct prompt.

    The rows that sampled response tokens ``1..min(n, L)`` are the prompt's last position and the first
    ``min(n, L) - 1`` response tokens; so each distinct prompt is run once (its KV cache then shared by
    every rollout of it, as the engine's prefix cache shares it) and each response only up to
    ``max(lengths) - 1`` tokens. Right padding never reaches the rows read (causal attention).

    Args:
        model: a transformers causal LM (``base_model`` is its decoder).
        prompt_ids, response_ids: N token lists (the engine's ``Rollout.prompt_token_ids`` / ``response_token_ids``).
        lengths: detection lengths L.
        kinds: any of ``last`` (post-norm final layer at :func:`detect_position`: the engine's feature),
            ``mean`` (``last`` averaged over the rows that sampled tokens ``1..min(n, L)``) and ``middle``
            (the residual stream after decoder layer ``num_layers // 2`` at the same position).
        pad_id: right-padding id.
        batch_tokens: rows × response length per response forward.
    Returns:
        ``{kind: {L: (N, D) float32 on CPU}}``.
    """
    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ValueError(f"need as many prompts as responses (> 0), got {len(prompt_ids)} and {len(response_ids)}")
    hidden = [k for k in FEATURE_KINDS if "stats" not in k]
    unknown = set(kinds) - set(hidden)
    if unknown:
        raise ValueError(f"prefix_features kinds {sorted(unknown)}: choose from {hidden}")
    if any(len(p) < 1 or len(r) < 1 for p, r in zip(prompt_ids, response_ids)):
        raise ValueError("every prompt and response needs at least one token")
    decoder = model.base_model
    device = next(model.parameters()).device
    middle = model.config.num_hidden_layers // 2
    width = max(lengths)
    out = {kind: {length: torch.empty(len(prompt_ids), model.config.hidden_size) for length in lengths}
           for kind in kinds}
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompt_ids):
        by_prompt.setdefault(tuple(p), []).append(i)
    for prompt, members in tqdm(by_prompt.items(), desc="features", leave=False):
        head = decoder(input_ids=torch.tensor([prompt], device=device), use_cache=True, output_hidden_states=True)
        rows_per_batch = max(1, batch_tokens // max(width - 1, 1))
        for start in range(0, len(members), rows_per_batch):
            idx = members[start:start + rows_per_batch]
            n_resp = [len(response_ids[i]) for i in idx]
            # rows 0..k-1: the prompt's last position, then response tokens 0..k-2
            final = [head.last_hidden_state[0, -1:].expand(len(idx), 1, -1)]
            mid = [head.hidden_states[middle][0, -1:].expand(len(idx), 1, -1)]
            if width > 1:
                tail = torch.full((len(idx), width - 1), pad_id, dtype=torch.long)
                for j, i in enumerate(idx):
                    toks = list(response_ids[i][: width - 1])
                    tail[j, : len(toks)] = torch.tensor(toks)
                cache = copy.deepcopy(head.past_key_values)
                cache.batch_repeat_interleave(len(idx))
                body = decoder(input_ids=tail.to(device), past_key_values=cache, use_cache=True,
                               output_hidden_states=True)
                final.append(body.last_hidden_state)
                mid.append(body.hidden_states[middle])
            final_rows, mid_rows = torch.cat(final, 1).float().cpu(), torch.cat(mid, 1).float().cpu()
            for length in lengths:
                k = torch.tensor([min(n, length) for n in n_resp])
                rows = torch.arange(len(idx))
                if "last" in kinds:
                    out["last"][length][idx] = final_rows[rows, k - 1]
                if "middle" in kinds:
                    out["middle"][length][idx] = mid_rows[rows, k - 1]
                if "mean" in kinds:
                    upto = (torch.arange(final_rows.shape[1])[None, :] < k[:, None]).float()
                    out["mean"][length][idx] = (final_rows * upto[..., None]).sum(1) / k[:, None].float()
    return out


def detect_features(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    lengths: Sequence[int],
    pad_id: int = 0,
    batch_tokens: int = 16384,
) -> dict[int, torch.Tensor]:
    """The engine's detect-time feature (``last``) at every L: ``{L: (N, D)}``, row i at
    ``detect_position(P_i, n_i, L)`` (:func:`prefix_features`)."""
    return prefix_features(model, prompt_ids, response_ids, lengths, ("last",), pad_id, batch_tokens)["last"]


def prefix_stats(response_ids: Sequence[Sequence[int]], logprobs: Sequence[Sequence[dict[int, float]] | None],
                 detect_length: int, topk: int = STATISTICS_TOPK) -> torch.Tensor:
    """``(N, 5)`` :func:`~arrol_pl.core.confidence.prefix_statistics` of each rollout's first ``min(n, L)``
    tokens from the log-probs the engine sampled with (the engine's ``stats`` feature; no forward pass).
    NaN rows without log-probs."""
    out = torch.full((len(response_ids), len(PREFIX_STATISTICS)), float("nan"))
    for i, (tokens, lp) in enumerate(zip(response_ids, logprobs)):
        if lp:
            out[i] = prefix_statistics(tokens, lp, detect_length, topk).float()
    return out


def deepconf_at(logprobs: Sequence[Sequence[dict[int, float]] | None], detect_length: int,
                settings: DeepConfSettings) -> torch.Tensor:
    """``(N,)`` float64 DeepConf trace confidence over each rollout's first ``detect_length`` tokens (NaN without log-probs)."""
    return torch.tensor([trace_scores(None if lp is None else list(lp[:detect_length]), settings) for lp in logprobs],
                        dtype=torch.float64)


def split_by_problem(problem_ids: torch.Tensor, fraction: float, seed: int) -> torch.Tensor:
    """``(N,)`` bool, True for the rollouts of a seeded random ``fraction`` of the distinct problems.

    With ``fraction > 0`` at least one problem is drawn and at least one is left (so both parts exist).
    """
    problem_ids = torch.as_tensor(problem_ids)
    problems = torch.unique(problem_ids)
    if fraction <= 0:
        return torch.zeros_like(problem_ids, dtype=torch.bool)
    if problems.numel() < 2:
        raise ValueError(f"splitting by problem needs at least 2 problems, got {problems.numel()}")
    count = min(max(1, round(fraction * problems.numel())), problems.numel() - 1)
    order = torch.randperm(problems.numel(), generator=torch.Generator().manual_seed(seed))
    return torch.isin(problem_ids, problems[order[:count]])


def problem_parts(problem_ids: torch.Tensor, settings: ProbeSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """``(test, calibration)``, each ``(N,)`` bool: the test problems, then the calibration share of the
    others (none with ``calibration_fraction = 0``); the remaining rollouts fit the head."""
    problem_ids = torch.as_tensor(problem_ids)
    test = split_by_problem(problem_ids, settings.test_fraction, settings.seed)
    calibration = torch.zeros_like(test)
    calibration[~test] = split_by_problem(problem_ids[~test], settings.calibration_fraction, settings.seed + 1)
    return test, calibration


def train_probe(features: torch.Tensor, labels: torch.Tensor, settings: ProbeSettings,
                standardize: bool = False) -> tuple[QualityHead, float]:
    """A fresh head trained on ``features: (N, D)``, ``labels: (N,)`` (training recipe, module docstring);
    ``standardize``: the head z-scores its input with the training features' moments (as a ``stats`` head does
    online).

    Returns the head in eval mode and its full-batch BCE on the training rollouts after training.
    """
    if labels.numel() == 0:
        raise ValueError("train_probe needs at least one labelled feature")
    with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the global RNG
        torch.manual_seed(settings.seed)
        head = QualityHead(features.shape[1], settings.hidden_dim, standardize=standardize)
    replay = FeatureReplay(labels.numel())
    replay.add(features, labels, torch.ones(labels.numel()))
    t = settings.training
    optimizer = torch.optim.AdamW(head.parameters(), lr=t.lr)
    head_update(head, optimizer, replay, t.steps, t.batch_size,
                torch.Generator().manual_seed(settings.seed))
    head.eval()
    with torch.no_grad():
        loss = float(head.loss(features, labels.float()))
    return head, loss


def fit_calibrator(scores: torch.Tensor, labels: torch.Tensor, num_bins: int) -> BinnedCalibrator:
    """A binned calibrator (Eq. 1) whose window holds exactly ``scores, labels: (N,)``."""
    calibrator = BinnedCalibrator(num_bins=num_bins, capacity=max(labels.numel(), 1))
    calibrator.update(scores, labels)
    return calibrator


def head_scores(head: QualityHead, features: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float32 raw logits of ``head`` on ``features: (N, D)`` (CPU)."""
    with torch.no_grad():
        return head(features.to(next(head.parameters()).device)).float().cpu()


def quality_metrics(scores: torch.Tensor, labels: torch.Tensor, calibrator: BinnedCalibrator | None,
                    groups: torch.Tensor | None = None) -> dict[str, float]:
    """Spearman, AUC, accuracy (calibrated posterior > 0.5; raw logit > 0) and ECE, and with ``groups: (N,)``
    the AUC within groups (``within_auc``); NaN where undefined."""
    keys = ("spearman", "auc", "accuracy", "accuracy_logit0", "ece") + (() if groups is None else ("within_auc",))
    if labels.numel() == 0:
        return dict.fromkeys(keys, float("nan"))
    m = head_quality(scores, None if calibrator is None else calibrator.posterior(scores), labels, groups)
    out = {"spearman": m["spearman"], "auc": m["auc"], "accuracy": m["posterior_accuracy"],
           "accuracy_logit0": m["accuracy"], "ece": m["calibration_error"]}
    return out if groups is None else out | {"within_auc": m["within_auc"]}


@dataclass
class LengthResult:
    """The probe at one detection length; the tensors (test part) feed the plots and stay out of :meth:`row`."""

    detect_length: int
    n_total: int
    n_eligible: int
    n_train: int
    n_calibration: int
    n_test: int
    positive_rate: float
    """Fraction correct among the test rollouts."""
    majority_accuracy: float
    """max(positive_rate, 1 - positive_rate): accuracy of always predicting the majority class."""
    head_spearman: float
    head_auc: float
    head_accuracy: float
    """Calibrated posterior > 0.5 against correctness."""
    head_accuracy_logit0: float
    """Raw logit > 0 against correctness (no calibrator)."""
    head_ece: float
    head_train_loss: float
    deepconf_spearman: float
    deepconf_auc: float
    head_within_auc: float = float("nan")
    """AUC over the (correct, incorrect) pairs inside one problem's group (what balance and votes need)."""
    deepconf_within_auc: float = float("nan")
    balance: dict[str, dict[str, float]] = field(default_factory=dict)
    """:func:`replay_balance` on the test groups with this length's head and calibrator."""
    fraction: float | None = None
    test_labels: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_head_scores: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_deepconf: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)

    def row(self) -> dict[str, Any]:
        """JSON-ready scalars (NaN → None)."""
        out = {k: v for k, v in asdict(self).items() if not k.startswith("test_")}
        return {k: json_number(v) for k, v in out.items()}


def json_number(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts too) turned into None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: json_number(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def evaluate_length(
    detect_length: int,
    features: torch.Tensor,
    labels: torch.Tensor,
    confidences: torch.Tensor,
    eligible: torch.Tensor,
    test: torch.Tensor,
    calibration: torch.Tensor,
    settings: ProbeSettings,
    standardize: bool = False,
    groups: torch.Tensor | None = None,
) -> LengthResult:
    """Train, calibrate and test a probe head at one L; DeepConf on the same test rollouts.

    Args:
        features: ``(N, D)`` detect-time features at L of all N rollouts.
        labels: ``(N,)`` final correctness in {0, 1}.
        confidences: ``(N,)`` DeepConf trace confidence over the first L tokens.
        eligible: ``(N,)`` bool, rollouts scored at L (:func:`eligible_at`).
        test, calibration: ``(N,)`` bool problem-level parts (:func:`split_by_problem`); the rest fit the head.

        groups: ``(N,)`` problem ids: adds the within-group AUCs and the pruning replay (:func:`replay_balance`)
            of the test groups.
        standardize: the head z-scores each feature with the head-fit rows' moments (features of mixed
            scales, such as :func:`prefix_stats`, as the online ``stats`` head does; hidden states go in raw).

    A part left without eligible rollouts (L too long for the rollouts) gives NaN metrics and the counts.
    """
    labels = labels.float()
    fit_rows = eligible & ~test & ~calibration
    held_apart = bool(calibration.any())
    cal_rows = eligible & calibration if held_apart else fit_rows
    test_rows = eligible & test
    y = labels[test_rows]
    rate = float(y.double().mean()) if y.numel() else float("nan")
    counts = {"detect_length": detect_length, "n_total": int(labels.numel()), "n_eligible": int(eligible.sum()),
              "n_train": int(fit_rows.sum()), "n_calibration": int(cal_rows.sum()) if held_apart else 0,
              "n_test": int(test_rows.sum()), "positive_rate": rate, "majority_accuracy": max(rate, 1.0 - rate)}
    nan = float("nan")
    if not fit_rows.any() or not test_rows.any():
        return LengthResult(**counts, head_spearman=nan, head_auc=nan, head_accuracy=nan, head_accuracy_logit0=nan,
                            head_ece=nan, head_train_loss=nan, deepconf_spearman=nan, deepconf_auc=nan)
    if standardize:  # rows without log-probs (NaN statistics) read as zeros
        features = torch.nan_to_num(features)
    head, train_loss = train_probe(features[fit_rows], labels[fit_rows], settings, standardize)
    bins = settings.calibration_bins or min(128, max(1, int(cal_rows.sum()) // 32))
    calibrator = fit_calibrator(head_scores(head, features[cal_rows]), labels[cal_rows], bins)
    scores = head_scores(head, features[test_rows])
    conf = confidences[test_rows]
    g = None if groups is None else torch.as_tensor(groups)
    head_m = quality_metrics(scores, y, calibrator, None if g is None else g[test_rows])
    within: dict[str, Any] = {}
    if g is not None:
        within = {"head_within_auc": head_m["within_auc"],
                  "deepconf_within_auc": within_group_auc(conf, y, g[test_rows])}
        # every test rollout, finished-early ones included (always kept), as the engine would see the group
        all_test = test.clone()
        within["balance"] = replay_balance(head_scores(head, features[all_test]), labels[all_test],
                                           eligible[all_test], g[all_test], calibrator, seed=settings.seed)
    return LengthResult(
        **counts, head_spearman=head_m["spearman"], head_auc=head_m["auc"], head_accuracy=head_m["accuracy"],
        head_accuracy_logit0=head_m["accuracy_logit0"], head_ece=head_m["ece"], head_train_loss=train_loss,
        deepconf_spearman=spearman(conf, y), deepconf_auc=binary_auc(conf, y), **within,
        test_labels=y, test_head_scores=scores, test_deepconf=conf,
    )


BALANCE_ARMS = {
    "arrol_global": {"policy": "arrol", "balance_target": "global"},
    "arrol_group": {"policy": "arrol", "balance_target": "group"},
    "arrol_spread": {"policy": "arrol", "balance_target": "spread"},
    "random": {"policy": "random"},
    "none": {"policy": "none"},
}
"""Pruning rules :func:`replay_balance` compares (Table 4): ARRoL with the paper's Eq. 2, with the per-group
target and with the rank-only ``spread`` rule, random pruning at the same κ, and no pruning."""


def replay_balance(scores: torch.Tensor, labels: torch.Tensor, eligible: torch.Tensor, groups: torch.Tensor,
                   calibrator: BinnedCalibrator, keep_ratio: float = 0.5, draws: int = 32,
                   seed: int = 0) -> dict[str, dict[str, float]]:
    """Table 4 by replay: the engine's keep/prune rule (:func:`decide_batch`, h_t from ``calibrator`` as
    :func:`build_pruner_params` makes it) on recorded groups, ``draws`` times with fresh decision seeds.

    ``scores: (N,)`` head logits at L, ``labels: (N,)``, ``eligible: (N,)`` (False: finished before L, kept),
    ``groups: (N,)``. Per arm of :data:`BALANCE_ARMS`: the survivors' mean positive ratio ``rho``, ``balance``
    = E[ρ̂(1−ρ̂)], ``zero_adv`` (groups whose survivors share one reward) and ``keep``, each averaged over the
    draws per group, then over groups, with ``*_se`` its standard error over groups; ``zero_adv_vs_random``
    and ``balance_vs_random`` are paired per-group differences to random pruning (``*_se`` likewise).
    """
    labels = torch.as_tensor(labels, dtype=torch.float64)
    groups = torch.as_tensor(groups, dtype=torch.long)
    ids = torch.unique(groups)
    per_group: dict[str, torch.Tensor] = {}
    out: dict[str, dict[str, float]] = {}
    for arm, settings in BALANCE_ARMS.items():
        stats = torch.zeros(draws, ids.numel(), 4, dtype=torch.float64)
        for d in range(draws):
            config = PruningConfig(keep_ratio=keep_ratio, cold_start_steps=0, seed=seed + d, **settings)
            keep = decide_batch(build_pruner_params(config, calibrator, 0), scores, eligible, groups).keep
            for j, g in enumerate(ids.tolist()):
                member = groups == g
                r = labels[member & keep]
                rho = float(r.mean())
                stats[d, j] = torch.tensor([rho, rho * (1 - rho), float(r.numel() < 2 or bool((r == r[0]).all())),
                                            float(keep[member].double().mean())])
        per_group[arm] = stats.mean(0)
        se = per_group[arm].std(0) / math.sqrt(max(ids.numel(), 1))
        out[arm] = {name: float(per_group[arm][:, k].mean()) for k, name in enumerate(("rho", "balance", "zero_adv", "keep"))}
        out[arm].update({f"{name}_se": float(se[k]) for k, name in enumerate(("rho", "balance", "zero_adv", "keep"))})
    for arm in (a for a in BALANCE_ARMS if a.startswith("arrol")):
        for k, name in ((2, "zero_adv"), (1, "balance")):
            diff, _, diff_se = mean_sd_se(per_group[arm][:, k] - per_group["random"][:, k])
            out[arm][f"{name}_vs_random"], out[arm][f"{name}_vs_random_se"] = diff, diff_se
    return out


VOTE_RULES = {
    "majority": "majority vote (maj@k)",
    "deepconf": "DeepConf-weighted vote (full-trace confidence)",
    "arrol_detect": "ARRoL vote, head trained at L_detect (the pruning head, scoring complete rollouts)",
    "arrol_end": "ARRoL vote, head trained on complete rollouts",
}
"""Voting rules :func:`replay_votes` compares (Table 3); ARRoL's votes weigh answers by the ranks of the head's
scores of each complete rollout (§4.4)."""


def replay_votes(end_features: torch.Tensor, detect_features: torch.Tensor, labels: torch.Tensor,
                 eligible: torch.Tensor, groups: torch.Tensor, classes: Sequence[Sequence[int | None]],
                 confidences: torch.Tensor, test: torch.Tensor, calibration: torch.Tensor,
                 settings: ProbeSettings) -> dict[str, dict[str, float]]:
    """Table 3 by replay: k-sample votes on the test problems, with heads fit on the other problems' rollouts.

    ``end_features, detect_features: (N, D)`` hidden states at each rollout's last token and at L_detect;
    ``labels, eligible (at L_detect), groups (problem ids 0..P-1), confidences (full-trace DeepConf): (N,)``;
    ``classes[p]``: the answer classes of problem ``p``'s k rollouts in row order (None: no answer); ``test``,
    ``calibration``: problem-level parts as in :func:`evaluate_length` (the calibration part also fits the
    heads: votes need no calibrator). Per rule of :data:`VOTE_RULES`: ``accuracy`` (voted answer correct) and
    its standard error over test problems, paired differences ``vs_majority`` / ``vs_deepconf`` with theirs;
    ``avg`` and ``pass`` give the mean sample accuracy and the oracle (any sample correct) of the same problems.
    """
    labels = torch.as_tensor(labels, dtype=torch.float32)
    groups = torch.as_tensor(groups, dtype=torch.long)
    fit = ~test
    head_end, _ = train_probe(end_features[fit], labels[fit], settings)
    head_detect, _ = train_probe(detect_features[fit & eligible], labels[fit & eligible], settings)
    scores = {"arrol_end": head_scores(head_end, end_features), "arrol_detect": head_scores(head_detect, end_features)}
    conf = torch.nan_to_num(torch.as_tensor(confidences, dtype=torch.float64), nan=0.0)
    problems = torch.unique(groups[test]).tolist()
    hits = {rule: [] for rule in (*VOTE_RULES, "avg", "pass")}
    for g in problems:
        rows = torch.nonzero(groups == g, as_tuple=True)[0]
        cls, correct = list(classes[g]), [bool(c) for c in labels[rows]]
        winners = {"majority": majority_vote(cls), "deepconf": weighted_vote(cls, conf[rows].tolist()),
                    **{rule: arrol_vote(cls, scores[rule][rows]) for rule in ("arrol_detect", "arrol_end")}}
        for rule, winner in winners.items():
            hits[rule].append(float(voted_answer_correct(cls, correct, winner)))
        hits["avg"].append(sum(correct) / len(correct))
        hits["pass"].append(float(any(correct)))
    table = {rule: torch.tensor(v, dtype=torch.float64) for rule, v in hits.items()}
    n = len(problems)
    out: dict[str, dict[str, float]] = {"problems": {"n": float(n), "k": float(len(classes[problems[0]]))}}
    for rule, x in table.items():
        acc, _, se = mean_sd_se(x)
        out[rule] = {"accuracy": acc, "accuracy_se": se}
        if rule in VOTE_RULES:
            for base in ("majority", "deepconf"):
                diff, _, diff_se = mean_sd_se(x - table[base])
                out[rule] |= {f"vs_{base}": diff, f"vs_{base}_se": diff_se}
    return out


def votes_table(votes: dict[str, dict[str, float]]) -> str:
    """Markdown: each rule's vote accuracy (± standard error) and its paired difference to majority and DeepConf."""
    k, n = int(votes["problems"]["k"]), int(votes["problems"]["n"])
    lines = [f"| rule (k = {k}, {n} test problems) | accuracy | vs majority | vs DeepConf |", "|---|---|---|---|"]
    for rule, title in (*VOTE_RULES.items(), ("avg", "mean sample accuracy (avg@k)"), ("pass", "any sample correct (pass@k)")):
        v = votes[rule]
        cells = [f"{v['accuracy']:.3f} ± {v['accuracy_se']:.3f}"]
        for base in ("majority", "deepconf"):
            cells.append("" if rule == base or f"vs_{base}" not in v else f"{v[f'vs_{base}']:+.3f} ± {v[f'vs_{base}_se']:.3f}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def probe_lengths(
    features: dict[int, torch.Tensor],
    labels: torch.Tensor,
    response_lengths: torch.Tensor,
    problem_ids: torch.Tensor,
    logprobs: Sequence[Sequence[dict[int, float]] | None],
    lengths: Sequence[int],
    settings: ProbeSettings,
    deepconf: DeepConfSettings | None = None,
    fractions: Sequence[float] | None = None,
    standardize: bool = False,
) -> list[LengthResult]:
    """:func:`evaluate_length` at every L of ``lengths``, with one problem-level split shared by all L.

    ``features[L]: (N, D)``; ``labels, response_lengths, problem_ids: (N,)``; ``logprobs``: N per-token
    top-k dicts (the engine's ``Rollout.logprobs``); ``deepconf`` defaults to :class:`DeepConfSettings`' own;
    ``fractions[i]`` (of max_tokens) labels ``lengths[i]``.
    """
    deepconf = deepconf or DeepConfSettings()
    test, calibration = problem_parts(problem_ids, settings)
    fracs = list(fractions) if fractions is not None else [None] * len(lengths)
    if len(fracs) != len(lengths):
        raise ValueError(f"{len(fracs)} fractions for {len(lengths)} detection lengths")
    return [
        replace(evaluate_length(length, features[length], labels, deepconf_at(logprobs, length, deepconf),
                                eligible_at(response_lengths, length), test, calibration, settings, standardize,
                                problem_ids),
                fraction=frac)
        for length, frac in zip(lengths, fracs)
    ]


def load_exported_head(export_dir: Path) -> tuple[QualityHead | None, BinnedCalibrator | None, int | None]:
    """The head and calibrator a training run exported, and the run's ``L_detect``; None for each one absent.

    ``L_detect`` is read from ``summary.json`` one directory above ``export_dir`` (``config.engine.detect_length``).
    """
    head = calibrator = detect_length = None
    if (export_dir / "quality_head.pt").exists():
        head = QualityHead.load(export_dir / "quality_head.pt")
    if (export_dir / "calibrator.pt").exists():
        state = torch.load(export_dir / "calibrator.pt", map_location="cpu", weights_only=True)
        calibrator = BinnedCalibrator(state["num_bins"], state["capacity"], state["alpha"])
        calibrator.load_state_dict(state)
    if (export_dir.parent / "summary.json").exists():
        detect_length = RunSummary.read(export_dir.parent).config.get("engine", {}).get("detect_length")
    return head, calibrator, detect_length


def online_head_metrics(head: QualityHead, calibrator: BinnedCalibrator | None, features: torch.Tensor,
                        labels: torch.Tensor, eligible: torch.Tensor,
                        groups: torch.Tensor | None = None) -> dict[str, float | int]:
    """The run's own head (trained online during RL) on every eligible rollout: n, positive rate and
    :func:`quality_metrics` (with the run's calibrator when given); with ``groups: (N,)`` also its AUC
    within groups (what the pruning rules that compare a group's rollouts need)."""
    y = labels[eligible].float()
    m = quality_metrics(head_scores(head, features[eligible]), y, calibrator,
                        None if groups is None else torch.as_tensor(groups)[eligible])
    return {"n": int(y.numel()), "positive_rate": float(y.double().mean()) if y.numel() else float("nan"), **m}


METRIC_COLUMNS = (
    ("pos. rate", "positive_rate"), ("head ρ", "head_spearman"), ("head AUC", "head_auc"),
    ("head acc.", "head_accuracy"), ("majority acc.", "majority_accuracy"), ("head ECE", "head_ece"),
    ("DeepConf ρ", "deepconf_spearman"), ("DeepConf AUC", "deepconf_auc"),
)
"""Column title → :class:`LengthResult` field, after the L and n columns of :func:`markdown_table`."""


def markdown_table(results: Sequence[LengthResult]) -> str:
    """One row per detection length: the head against DeepConf (Spearman with correctness, AUC), accuracy, ECE."""
    titles = ["L", "n train/test"] + [title for title, _ in METRIC_COLUMNS]
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    for r in results:
        length = str(r.detect_length)
        if r.fraction is not None:
            length += f" ({Fraction(r.fraction).limit_denominator(1024)})"
        values = [getattr(r, key) for _, key in METRIC_COLUMNS]
        cells = [length, f"{r.n_train}/{r.n_test}"] + [f"{v:.3f}" if math.isfinite(v) else "n/a" for v in values]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float, spec: str = ".3f") -> str:
    return format(value, spec) if math.isfinite(value) else "n/a"


def inputs_table(by_kind: dict[str, Sequence[LengthResult]]) -> str:
    """Head inputs side by side: per input and L, the head's Spearman, AUC and within-group AUC, DeepConf's beside."""
    lines = ["| input | L | head ρ | head AUC | head AUC within groups | DeepConf ρ | DeepConf AUC | "
             "DeepConf AUC within groups |", "|---|---|---|---|---|---|---|---|"]
    for kind, results in by_kind.items():
        for r in results:
            cells = [kind, str(r.detect_length)] + [_cell(v) for v in (
                r.head_spearman, r.head_auc, r.head_within_auc, r.deepconf_spearman, r.deepconf_auc,
                r.deepconf_within_auc)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


BALANCE_TITLES = {"arrol_global": "ARRoL, global δ (Eq. 2)", "arrol_group": "ARRoL, per-group target",
                  "arrol_spread": "ARRoL, spread (ranks only)", "random": "random", "none": "no pruning"}


def balance_table(results: Sequence[LengthResult]) -> str:
    """:func:`replay_balance` per L: E[ρ̂], E[ρ̂(1−ρ̂)], zero-advantage groups and keep ratio (± standard error over
    groups), and ARRoL's paired difference to random in zero-advantage groups."""
    lines = ["| L | rule | E[ρ̂] | E[ρ̂(1−ρ̂)] | zero-advantage groups | keep | zero-adv. vs random |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for arm, title in BALANCE_TITLES.items():
            b = r.balance.get(arm)
            if b is None:
                continue
            vs = (f"{b['zero_adv_vs_random']:+.3f} ± {b['zero_adv_vs_random_se']:.3f}"
                  if "zero_adv_vs_random" in b else "")
            cells = [str(r.detect_length), title] + [f"{_cell(b[k])} ± {_cell(b[k + '_se'])}"
                                                    for k in ("rho", "balance", "zero_adv", "keep")] + [vs]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
