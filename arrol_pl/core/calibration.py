"""Online binned probability calibration (paper §4.2, Appendix A.4 Eq. 1).

Maps an uncalibrated quality-head logit ``s`` to a posterior ``q = P(Y=1 | b(s'))`` with
``s' = sigmoid(s)`` and ``b(s') = min(B-1, floor(B s'))``:

    P(b | Y=y) = (c_b^y + α) / (Σ_b' c_b'^y + α B)
    q_b        = π P(b|1) / (π P(b|1) + (1-π) P(b|0)),    π = P(Y=1) from the buffer.

Decisions:
- One chronological sliding window of labelled scores (capacity ``capacity``), split by label into
  the positive and negative buffers of Eq. 1. Two independent per-class windows would pin π at 0.5
  once both fill; one window keeps π an estimate over the same recent history as the likelihoods.
- Optional per-sample weights enter the counts and π. The trainer only sees survivors, which are
  biased toward kept rollouts; weighting each by ``1/p`` (its survival probability) undoes that
  (importance weighting; the paper leaves this choice open).
- With an empty buffer π = 0.5 and every bin has the same likelihood, so q = 0.5 everywhere.
- Each row may name its group (the prompt it answers), so the window also gives the AUC within groups
  (:meth:`BinnedCalibrator.within_auc`): what a rule choosing among one prompt's rollouts can use. Groups are
  told apart per ``update`` call, so group 3 of one step is not group 3 of the next.
- The window's AUCs are those of every rollout before pruning, estimated from the survivors: each row also keeps
  its survival probability p, apart from its weight (which importance weighting may leave at 1), and a pair of one
  group counts 1/π_ij, the chance both survived the draw (1/(p_i p_j) for independent draws; a fixed-size draw's
  own, :mod:`~arrol_pl.core.sampling`). Those pairs' sums are taken when their rows arrive and kept on the pair's
  earlier row (:func:`~arrol_pl.core.survivor_auc.pair_auc_sums`), so the window forgets a pair with its first row;
  pairs of different groups count 1/(p_i p_j) (drawn apart). The survivors' own AUC reads the order of what a rule
  chose to keep: the default rule keeps each group's two ends, and at a true AUC of 0.70 its survivors read 0.74.
  A row of p = 0 is in the window only by the floor's revival, and counts for no pair.
"""

from __future__ import annotations

from typing import Any

import torch

from arrol_pl.core.survivor_auc import inverse_survival, pair_auc_sums, pooled_auc

_GROUP_SPAN = 2**32
"""Group keys are ``update call × _GROUP_SPAN + group``; rows given no group get keys of their own from
``_GROUP_SPAN // 2`` up, so that they pair with nothing."""


def bin_index(scores: torch.Tensor, num_bins: int) -> torch.Tensor:
    """``scores: (N,)`` raw logits → ``(N,)`` long bin ids of ``sigmoid(scores)`` in ``[0, num_bins)``."""
    s = torch.sigmoid(scores.detach().to(torch.float64))
    return torch.clamp(torch.floor(s * num_bins), max=num_bins - 1).to(torch.long)


def posterior_from_table(table: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Look up per-bin posteriors ``table: (B,)`` for raw logits ``scores: (N,)`` → ``(N,)`` float32."""
    idx = bin_index(scores, table.numel()).to(table.device)
    return table[idx].to(torch.float32)


def monotone_table(table: torch.Tensor) -> torch.Tensor:
    """``table: (B,)`` per-bin posteriors → ``(B,)`` the closest non-decreasing table in least squares (pool adjacent
    violators, bins weighted equally). A head's score is meant to rise with P(correct); bins that break the order hold
    counting noise, and a rule that orders one group's rollouts by q must not read that noise as their order."""
    blocks: list[list[float]] = []  # [mean, number of bins]
    for value in torch.as_tensor(table, dtype=torch.float64).tolist():
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return torch.tensor([m for m, w in blocks for _ in range(int(w))], dtype=torch.float64)


def ordered_posterior(table: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Posteriors that keep the head's order: :func:`monotone_table` read by linear interpolation between bin centres,
    ``scores: (...)`` raw logits → float32 of the same shape. Rollouts of one bin no longer tie, and the order among
    them is the raw scores' (where the monotone table rises); the level stays the calibrator's."""
    return interpolated_posterior(monotone_table(table), scores)


def interpolated_posterior(table: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Per-bin posteriors ``table: (B,)`` read by linear interpolation between bin centres of ``sigmoid(scores)``:
    raw logits ``(...)`` → float32 of the same shape (:func:`ordered_posterior` passes the monotone table)."""
    mono = torch.as_tensor(table, dtype=torch.float64)
    b = mono.numel()
    x = torch.sigmoid(torch.as_tensor(scores, dtype=torch.float64)) * b - 0.5
    lo = x.floor().clamp(0, b - 1).to(torch.long)
    hi = (lo + 1).clamp(max=b - 1)
    frac = (x - lo).clamp(0.0, 1.0)
    return (mono[lo] * (1.0 - frac) + mono[hi] * frac).to(torch.float32)


class BinnedCalibrator:
    """Sliding-window binned Bayes calibrator.

    Args:
        num_bins: B, number of uniform bins on ``sigmoid(score)`` (paper: 128).
        capacity: how many most recent labelled scores the window holds.
        alpha: Laplace smoothing α added to every bin count.
    """

    def __init__(self, num_bins: int = 128, capacity: int = 4096, alpha: float = 1.0) -> None:
        if num_bins < 1:
            raise ValueError(f"num_bins must be >= 1, got {num_bins}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0 (Laplace smoothing), got {alpha}")
        self.num_bins = num_bins
        self.capacity = capacity
        self.alpha = float(alpha)
        # Ring buffer: row k holds (score, label, weight, group key, survival probability, and the pairs of one group
        # it forms with later rows: their 1/π weight ordered right and in all); ``_next`` is the slot the next sample
        # takes.
        self._scores = torch.zeros(capacity, dtype=torch.float64)
        self._labels = torch.zeros(capacity, dtype=torch.bool)
        self._weights = torch.zeros(capacity, dtype=torch.float64)
        self._groups = torch.zeros(capacity, dtype=torch.long)
        self._survival = torch.ones(capacity, dtype=torch.float64)
        self._pair_right = torch.zeros(capacity, dtype=torch.float64)
        self._pair_total = torch.zeros(capacity, dtype=torch.float64)
        self._size = 0
        self._next = 0
        self._total_seen = 0
        self._updates = 0

    def __len__(self) -> int:
        return self._size

    @property
    def total_seen(self) -> int:
        """Number of labelled samples ever added (including the ones the window forgot)."""
        return self._total_seen

    def update(
        self,
        scores: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor | None = None,
        groups: torch.Tensor | None = None,
        survival: torch.Tensor | None = None,
        joint: torch.Tensor | None = None,
    ) -> None:
        """Append labelled samples, oldest forgotten first. ``scores, labels, weights: (N,)``; ``groups: (N,)`` the
        group (prompt) of each row, integers in ``[0, 2**31)`` (None: each row a group of its own); ``survival: (N,)``
        each row's probability in [0, 1] of having survived the prune within its group (None: 1, nothing pruned);
        ``joint: (N, 1 + G)`` the draw's pair chances (:func:`~arrol_pl.core.sampling.joint_rows`; None:
        independent draws)."""
        scores = torch.as_tensor(scores, dtype=torch.float64).detach().flatten().cpu()
        labels = torch.as_tensor(labels).detach().flatten().cpu()
        if labels.numel() != scores.numel():
            raise ValueError(f"scores ({scores.numel()}) and labels ({labels.numel()}) differ in length")
        if not torch.all((labels == 0) | (labels == 1)):
            raise ValueError("labels must be 0 or 1")
        if weights is None:
            weights = torch.ones_like(scores)
        else:
            weights = torch.as_tensor(weights, dtype=torch.float64).detach().flatten().cpu()
            if weights.numel() != scores.numel():
                raise ValueError(f"weights ({weights.numel()}) and scores ({scores.numel()}) differ in length")
            if torch.any(weights < 0) or not torch.all(torch.isfinite(weights)):
                raise ValueError("weights must be finite and non-negative")
        if not torch.all(torch.isfinite(scores)):
            raise ValueError("scores must be finite")
        n = scores.numel()
        if survival is None:
            survival = torch.ones_like(scores)
        else:
            survival = torch.as_tensor(survival, dtype=torch.float64).detach().flatten().cpu()
            if survival.numel() != n:
                raise ValueError(f"survival ({survival.numel()}) and scores ({n}) differ in length")
            if not torch.all((survival >= 0) & (survival <= 1)):
                raise ValueError("survival probabilities must lie in [0, 1]")
        if groups is None:
            groups = _GROUP_SPAN // 2 + torch.arange(n)
        else:
            groups = torch.as_tensor(groups).detach().flatten().cpu().to(torch.long)
            if groups.numel() != n:
                raise ValueError(f"groups ({groups.numel()}) and scores ({n}) differ in length")
            if n and (int(groups.min()) < 0 or int(groups.max()) >= _GROUP_SPAN // 2):
                raise ValueError(
                    f"groups must lie in [0, {_GROUP_SPAN // 2}), got {int(groups.min())}..{int(groups.max())}"
                )
        if joint is not None and (joint.dim() != 2 or joint.shape[0] != n):
            raise ValueError(f"joint must be (N, 1 + G) for {n} rows, got {tuple(joint.shape)}")
        groups = groups + self._updates * _GROUP_SPAN
        self._updates += 1
        self._total_seen += n
        if n >= self.capacity:  # only the newest ``capacity`` survive
            scores, labels, weights = scores[-self.capacity :], labels[-self.capacity :], weights[-self.capacity :]
            groups, survival = groups[-self.capacity :], survival[-self.capacity :]
            joint = None if joint is None else joint[-self.capacity :]
            n = self.capacity
        right, total = pair_auc_sums(scores, labels, groups, survival, joint)
        slots = (self._next + torch.arange(n)) % self.capacity
        self._scores[slots] = scores
        self._labels[slots] = labels.to(torch.bool)
        self._weights[slots] = weights
        self._groups[slots] = groups
        self._survival[slots] = survival
        self._pair_right[slots], self._pair_total[slots] = right, total
        self._next = int((self._next + n) % self.capacity)
        self._size = min(self.capacity, self._size + n)

    def _order(self) -> torch.Tensor:
        if self._size < self.capacity:
            return torch.arange(self._size)
        return (self._next + torch.arange(self.capacity)) % self.capacity

    def buffer(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The window in chronological order: ``(scores, labels, weights)``, each ``(len,)``."""
        order = self._order()
        return self._scores[order].clone(), self._labels[order].clone(), self._weights[order].clone()

    def auc(self) -> float:
        """The scores' AUC over every pair of the window's rollouts before pruning, estimated from its survivors
        (module docstring; NaN until it holds both outcomes)."""
        order = self._order()
        return pooled_auc(
            self._scores[order],
            self._labels[order],
            self._groups[order],
            inverse_survival(self._survival[order]),
            float(self._pair_right[order].sum()),
            float(self._pair_total[order].sum()),
        )

    def within_auc(self) -> float:
        """The scores' AUC over the (correct, wrong) pairs of one group among each group's rollouts before pruning,
        estimated from the window's survivors (module docstring; NaN until a group holds both outcomes)."""
        order = self._order()
        total = float(self._pair_total[order].sum())
        return float(self._pair_right[order].sum()) / total if total else float("nan")

    def counts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted histogram counts ``(c^+, c^-)``, each ``(B,)`` float64 (Eq. 1)."""
        scores, labels, weights = self.buffer()
        idx = bin_index(scores, self.num_bins)
        pos = torch.bincount(idx[labels], weights=weights[labels], minlength=self.num_bins)
        neg = torch.bincount(idx[~labels], weights=weights[~labels], minlength=self.num_bins)
        return pos.to(torch.float64), neg.to(torch.float64)

    def prior(self) -> float:
        """π = P(Y=1), the weighted positive fraction of the window (0.5 when empty)."""
        pos, neg = self.counts()
        total = float(pos.sum() + neg.sum())
        return 0.5 if total == 0 else float(pos.sum()) / total

    def bin_posteriors(self) -> torch.Tensor:
        """``(B,)`` float64 posterior q_b for every bin (A.4)."""
        pos, neg = self.counts()
        b, a = self.num_bins, self.alpha
        like_pos = (pos + a) / (pos.sum() + a * b)
        like_neg = (neg + a) / (neg.sum() + a * b)
        total = float(pos.sum() + neg.sum())
        pi = 0.5 if total == 0 else float(pos.sum()) / total
        num = pi * like_pos
        return num / (num + (1.0 - pi) * like_neg)

    def posterior(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores: (N,)`` raw head logits → ``(N,)`` posteriors q."""
        return posterior_from_table(self.bin_posteriors(), torch.as_tensor(scores))

    def state_dict(self) -> dict[str, Any]:
        return {
            "num_bins": self.num_bins,
            "capacity": self.capacity,
            "alpha": self.alpha,
            "scores": self._scores.clone(),
            "labels": self._labels.clone(),
            "weights": self._weights.clone(),
            "groups": self._groups.clone(),
            "survival": self._survival.clone(),
            "pair_right": self._pair_right.clone(),
            "pair_total": self._pair_total.clone(),
            "size": self._size,
            "next": self._next,
            "total_seen": self._total_seen,
            "updates": self._updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("num_bins", "capacity", "alpha"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"calibrator state has {key}={state[key]!r}, this calibrator has {getattr(self, key)!r}"
                )
        # tensors, or the lists of a JSON copy (arrol_pl.models.head)
        self._scores = torch.as_tensor(state["scores"], dtype=torch.float64).clone()
        self._labels = torch.as_tensor(state["labels"], dtype=torch.bool).clone()
        self._weights = torch.as_tensor(state["weights"], dtype=torch.float64).clone()
        # a state saved before rows had groups: each of its rows a group of its own
        self._groups = (
            torch.as_tensor(state["groups"], dtype=torch.long).clone()
            if "groups" in state
            else _GROUP_SPAN // 2 + torch.arange(self.capacity)
        )
        # a state saved before rows kept their survival probability: its rows read as every rollout
        self._survival = (
            torch.as_tensor(state["survival"], dtype=torch.float64).clone()
            if "survival" in state
            else torch.ones(self.capacity, dtype=torch.float64)
        )
        self._size = int(state["size"])
        self._next = int(state["next"])
        self._total_seen = int(state["total_seen"])
        self._updates = int(state.get("updates", 1))
        if "pair_right" in state:
            self._pair_right = torch.as_tensor(state["pair_right"], dtype=torch.float64).clone()
            self._pair_total = torch.as_tensor(state["pair_total"], dtype=torch.float64).clone()
        else:  # a state saved before rows kept their pairs' sums: its draws read as independent
            self._pair_right = torch.zeros(self.capacity, dtype=torch.float64)
            self._pair_total = torch.zeros(self.capacity, dtype=torch.float64)
            order = self._order()
            for key in torch.unique(self._groups[order] // _GROUP_SPAN).tolist():  # one update call at a time
                rows = order[self._groups[order] // _GROUP_SPAN == key]
                self._pair_right[rows], self._pair_total[rows] = pair_auc_sums(
                    self._scores[rows], self._labels[rows], self._groups[rows], self._survival[rows]
                )
