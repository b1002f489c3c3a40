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
- **Training recipe of the RL run.** BCE minibatch steps through :func:`~arrol_pl.train.phases.head_update`
  on a :class:`~arrol_pl.train.phases.FeatureReplay` window holding the fit part, AdamW.
- **Calibration on fresh scores.** The online calibrator sees each rollout's score before the head has
  trained on it; the head's scores on its own training rollouts are over-confident. The calibrator is
  therefore fitted on a held-apart share of the training problems (``calibration_fraction``; 0 fits it on
  the head-fit part, which biases the ECE low and the accuracy high).
- **Metrics** come from :mod:`arrol_pl.core.metrics` through :func:`~arrol_pl.train.phases.head_metrics`
  (accuracy of the calibrated posterior > 0.5, AUC, Spearman, ECE); the majority-class accuracy of the
  test part is reported beside the head's accuracy, as the floor it must beat.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.metrics import binary_auc, spearman
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.train.evaluation import DeepConfSettings, trace_scores
from arrol_pl.train.logprobs import make_micro_batches
from arrol_pl.train.phases import FeatureReplay, head_metrics, head_update


@dataclass(frozen=True)
class ProbeSettings:
    """How a probe head is trained and calibrated at each detection length."""

    hidden_dim: int = 256
    """Head width (conf/model/tiny.yaml ``head_hidden_dim``)."""
    steps: int = 300
    """BCE minibatch steps."""
    lr: float = 1e-3
    """AdamW learning rate (``algo.head_lr``)."""
    batch_size: int = 256
    """Minibatch size (``algo.head_batch_size``)."""
    calibration_bins: int = 128
    """B of the binned calibrator (``pruning.num_bins``)."""
    test_fraction: float = 0.5
    """Share of the problems whose rollouts test the head (the rest train and calibrate it)."""
    calibration_fraction: float = 0.25
    """Share of the training problems held apart to fit the calibrator (0: fit it on the head-fit part)."""
    seed: int = 0
    """Seeds the head's initialisation and minibatch draws."""

    def __post_init__(self) -> None:
        if self.hidden_dim < 1:
            raise ValueError(f"ProbeSettings.hidden_dim must be >= 1, got {self.hidden_dim}")
        if self.steps < 1:
            raise ValueError(f"ProbeSettings.steps must be >= 1, got {self.steps}")
        if not self.lr > 0:
            raise ValueError(f"ProbeSettings.lr must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ValueError(f"ProbeSettings.batch_size must be >= 1, got {self.batch_size}")
        if self.calibration_bins < 1:
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


@torch.no_grad()
def detect_features(
    model: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    lengths: Sequence[int],
    pad_id: int = 0,
    batch_tokens: int = 16384,
) -> dict[int, torch.Tensor]:
    """Detect-time features of every rollout at every L in ``lengths`` from one forward per rollout.

    Args:
        model: a transformers causal LM (its ``base_model`` gives the post-norm ``last_hidden_state``).
        prompt_ids, response_ids: N token lists (the engine's ``Rollout.prompt_token_ids`` / ``response_token_ids``).
        lengths: detection lengths L.
        pad_id: right-padding id (masked out).
        batch_tokens: micro-batch budget, rows × longest sequence.
    Returns:
        ``{L: (N, D) float32 on CPU}``; row i at ``detect_position(P_i, n_i, L)``.
    """
    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ValueError(f"need as many prompts as responses (> 0), got {len(prompt_ids)} and {len(response_ids)}")
    decoder = model.base_model
    device = next(model.parameters()).device
    hidden = model.config.hidden_size
    out = {length: torch.empty(len(prompt_ids), hidden, dtype=torch.float32) for length in lengths}
    for mb in tqdm(make_micro_batches(prompt_ids, response_ids, batch_tokens, pad_id), desc="features", leave=False):
        states = decoder(input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device),
                         use_cache=False).last_hidden_state
        rows = torch.arange(len(mb.indices), device=device)
        for length in lengths:
            pos = torch.tensor([detect_position(int(p), int(n), length)
                                for p, n in zip(mb.prompt_lengths, mb.response_lengths)], device=device)
            out[length][mb.indices] = states[rows, pos].float().cpu()
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


def train_probe(features: torch.Tensor, labels: torch.Tensor, settings: ProbeSettings) -> tuple[QualityHead, float]:
    """A fresh head trained on ``features: (N, D)``, ``labels: (N,)`` (training recipe, module docstring).

    Returns the head in eval mode and its full-batch BCE on the training rollouts after training.
    """
    if labels.numel() == 0:
        raise ValueError("train_probe needs at least one labelled feature")
    with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the global RNG
        torch.manual_seed(settings.seed)
        head = QualityHead(features.shape[1], settings.hidden_dim)
    replay = FeatureReplay(labels.numel())
    replay.add(features, labels, torch.ones(labels.numel()))
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr)
    head_update(head, optimizer, replay, settings.steps, settings.batch_size,
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


HEAD_METRIC_KEYS = {"spearman": "head/spearman", "auc": "head/auc", "accuracy": "head/posterior_accuracy",
                    "accuracy_logit0": "head/accuracy", "ece": "head/calibration_error"}
"""Names here → :func:`~arrol_pl.train.phases.head_metrics`' keys."""


def quality_metrics(scores: torch.Tensor, labels: torch.Tensor, calibrator: BinnedCalibrator | None) -> dict[str, float]:
    """Spearman, AUC, accuracy (calibrated posterior > 0.5; raw logit > 0) and ECE; NaN where undefined."""
    if labels.numel() == 0:
        return {name: float("nan") for name in HEAD_METRIC_KEYS}
    m = head_metrics(scores, None if calibrator is None else calibrator.posterior(scores), labels)
    # head_metrics leaves out what is undefined (one class only, no calibrator): NaN here.
    return {name: m.get(key, float("nan")) for name, key in HEAD_METRIC_KEYS.items()}


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
    fraction: float | None = None
    test_labels: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_head_scores: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)
    test_deepconf: torch.Tensor = field(default_factory=lambda: torch.empty(0), repr=False)

    def row(self) -> dict[str, Any]:
        """JSON-ready scalars (NaN → None)."""
        out = {k: v for k, v in asdict(self).items() if not k.startswith("test_")}
        return {k: json_number(v) for k, v in out.items()}


def json_number(value: Any) -> Any:
    """``value`` with a non-finite float turned into None (JSON has no NaN)."""
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
) -> LengthResult:
    """Train, calibrate and test a probe head at one L; DeepConf on the same test rollouts.

    Args:
        features: ``(N, D)`` detect-time features at L of all N rollouts.
        labels: ``(N,)`` final correctness in {0, 1}.
        confidences: ``(N,)`` DeepConf trace confidence over the first L tokens.
        eligible: ``(N,)`` bool, rollouts scored at L (:func:`eligible_at`).
        test, calibration: ``(N,)`` bool problem-level parts (:func:`split_by_problem`); the rest fit the head.

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
    head, train_loss = train_probe(features[fit_rows], labels[fit_rows], settings)
    calibrator = fit_calibrator(head_scores(head, features[cal_rows]), labels[cal_rows], settings.calibration_bins)
    scores = head_scores(head, features[test_rows])
    conf = confidences[test_rows]
    head_m = quality_metrics(scores, y, calibrator)
    return LengthResult(
        **counts, head_spearman=head_m["spearman"], head_auc=head_m["auc"], head_accuracy=head_m["accuracy"],
        head_accuracy_logit0=head_m["accuracy_logit0"], head_ece=head_m["ece"], head_train_loss=train_loss,
        deepconf_spearman=spearman(conf, y), deepconf_auc=binary_auc(conf, y),
        test_labels=y, test_head_scores=scores, test_deepconf=conf,
    )


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
                                eligible_at(response_lengths, length), test, calibration, settings), fraction=frac)
        for length, frac in zip(lengths, fracs)
    ]


def load_exported_head(export_dir: Path) -> tuple[QualityHead | None, BinnedCalibrator | None, int | None]:
    """The head and calibrator a training run exported, and the run's ``L_detect``; None for each one absent.

    ``L_detect`` is read from ``summary.json`` one directory above ``export_dir`` (``config.engine.detect_length``).
    """
    head = calibrator = detect_length = None
    if (export_dir / "quality_head.pt").exists():
        blob = torch.load(export_dir / "quality_head.pt", map_location="cpu", weights_only=True)
        head = QualityHead(blob["input_dim"], blob["hidden_dim"])
        head.load_state_dict(blob["state_dict"])
        head.eval()
    if (export_dir / "calibrator.pt").exists():
        state = torch.load(export_dir / "calibrator.pt", map_location="cpu", weights_only=True)
        calibrator = BinnedCalibrator(state["num_bins"], state["capacity"], state["alpha"])
        calibrator.load_state_dict(state)
    summary = export_dir.parent / "summary.json"
    if summary.exists():
        engine_cfg = json.loads(summary.read_text()).get("config", {}).get("engine", {})
        detect_length = engine_cfg.get("detect_length")
    return head, calibrator, detect_length


def online_head_metrics(head: QualityHead, calibrator: BinnedCalibrator | None, features: torch.Tensor,
                        labels: torch.Tensor, eligible: torch.Tensor) -> dict[str, float | int]:
    """The run's own head (trained online during RL) on every eligible rollout: n, positive rate and
    :func:`quality_metrics` (with the run's calibrator when given)."""
    y = labels[eligible].float()
    m = quality_metrics(head_scores(head, features[eligible]), y, calibrator)
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
