"""Survival probabilities (paper Appendix A.4, Eq. 2) and the single-prune oracle of Lemma 4.1.

    p_i = clip(κ + δ + λ (ρ - q_i), p_min, p_max)

δ is a scalar found by bisection (:func:`solve_delta`) so that the (optionally weighted) mean of ``p`` equals κ; the
per-group rules solve one δ per group exactly (:func:`solve_delta_per_group`). The mean
is continuous and non-decreasing in δ and ranges over ``[p_min, p_max]``, so κ is reachable iff
``p_min <= κ <= p_max``; otherwise the closest achievable mean is returned and the shortfall reported.
Paper values: λ = 0.5, ρ = 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SurvivalResult:
    """``probs: (N,)`` survival probabilities; ``delta`` the bias used; ``mean`` their (weighted) mean;
    ``shortfall = keep_ratio - mean`` (0 within tolerance when feasible); ``feasible`` whether κ was reachable."""

    probs: torch.Tensor
    delta: float
    mean: float
    shortfall: float
    feasible: bool


def survival_from_delta(
    posteriors: torch.Tensor,
    delta: float,
    keep_ratio: float,
    target_positive_ratio: float,
    balance_strength: float,
    p_min: float,
    p_max: float,
) -> torch.Tensor:
    """Eq. 2 for a fixed δ. ``posteriors: (N,)`` → ``(N,)``."""
    q = posteriors.to(torch.float64)
    raw = keep_ratio + delta + balance_strength * (target_positive_ratio - q)
    return torch.clamp(raw, p_min, p_max)


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor | None) -> float:
    if weights is None:
        return float(x.mean())
    return float((x * weights).sum() / weights.sum())


def solve_delta(
    posteriors: torch.Tensor,
    keep_ratio: float,
    target_positive_ratio: float,
    balance_strength: float,
    p_min: float,
    p_max: float,
    weights: torch.Tensor | None = None,
    tol: float = 1e-6,
    max_iter: int = 200,
) -> float:
    """Eq. 2's δ (A.4): the bias that makes the (weighted) mean of ``clip(κ + δ + λ(ρ − q_i), p_min, p_max)`` equal
    κ, by bisection on the mean, which is continuous and non-decreasing in δ. Where κ is out of reach (outside
    ``[p_min, p_max]``) the end of the bracket nearest it: every p at p_max, or every p at p_min.
    :func:`solve_delta_per_group` is the exact solution for many groups at once (the per-group rules)."""
    q = torch.as_tensor(posteriors, dtype=torch.float64).flatten()
    args = (keep_ratio, target_positive_ratio, balance_strength, p_min, p_max)

    def mean_at(d: float) -> float:
        return _weighted_mean(survival_from_delta(q, d, *args), weights)

    # Brackets where every p sits at p_min (lo) or at p_max (hi).
    shift = balance_strength * (target_positive_ratio - q)
    lo = float(p_min - keep_ratio - shift.max()) - 1.0
    hi = float(p_max - keep_ratio - shift.min()) + 1.0
    if mean_at(hi) < keep_ratio - tol:
        return hi
    if mean_at(lo) > keep_ratio + tol:
        return lo
    delta = 0.5 * (lo + hi)
    for _ in range(max_iter):
        delta = 0.5 * (lo + hi)
        m = mean_at(delta)
        if abs(m - keep_ratio) <= tol:
            break
        if m < keep_ratio:
            lo = delta
        else:
            hi = delta
    return delta


def survival_probabilities(
    posteriors: torch.Tensor,
    keep_ratio: float,
    target_positive_ratio: float = 0.5,
    balance_strength: float = 0.5,
    p_min: float = 0.05,
    p_max: float = 1.0,
    weights: torch.Tensor | None = None,
    delta: float | None = None,
    tol: float = 1e-6,
    max_iter: int = 200,
) -> SurvivalResult:
    """Survival probabilities with δ solved so that the weighted mean of ``p`` is κ (A.4).

    Args:
        posteriors: ``(N,)`` calibrated success probabilities q_i.
        keep_ratio: κ, target mean survival.
        target_positive_ratio: ρ, the positive ratio the kept rollouts are steered toward.
        balance_strength: λ, slope of the balance correction.
        p_min, p_max: clip bounds of Eq. 2.
        weights: optional ``(N,)`` non-negative weights for the mean (e.g. 1/p of buffered survivors).
        delta: use this δ instead of solving for it.
        tol: bisection stops when the mean is within ``tol`` of κ.
    """
    if not 0.0 <= p_min <= p_max <= 1.0:
        raise ValueError(f"need 0 <= p_min <= p_max <= 1, got p_min={p_min}, p_max={p_max}")
    q = torch.as_tensor(posteriors, dtype=torch.float64).flatten()
    if q.numel() == 0:
        raise ValueError("survival_probabilities needs at least one posterior")
    w = None if weights is None else torch.as_tensor(weights, dtype=torch.float64).flatten()
    if w is not None and (w.numel() != q.numel() or float(w.sum()) <= 0):
        raise ValueError("weights must match posteriors in length and have a positive sum")
    args = (keep_ratio, target_positive_ratio, balance_strength, p_min, p_max)
    if delta is None:
        delta = solve_delta(q, *args, weights=w, tol=tol, max_iter=max_iter)
    probs = survival_from_delta(q, delta, *args)
    mean = _weighted_mean(probs, w)
    shortfall = keep_ratio - mean
    return SurvivalResult(
        probs=probs.to(torch.float32),
        delta=float(delta),
        mean=mean,
        shortfall=shortfall,
        feasible=p_min - tol <= keep_ratio <= p_max + tol,
    )


def best_single_prune(posteriors: torch.Tensor, target_positive_ratio: float) -> int:
    """Lemma 4.1 / Theorem 4.2: ĵ = argmin_j |μ_{-j} - ρ|, the one rollout whose removal brings the
    group's mean posterior closest to ρ. ``posteriors: (G,)`` with G >= 2."""
    q = torch.as_tensor(posteriors, dtype=torch.float64).flatten()
    g = q.numel()
    if g < 2:
        raise ValueError("best_single_prune needs a group of at least 2")
    loo_means = (q.sum() - q) / (g - 1)
    return int(torch.argmin((loo_means - target_positive_ratio).abs()))


def solve_delta_per_group(
    base: torch.Tensor, keep_ratio: float | torch.Tensor, p_min: float, p_max: float
) -> torch.Tensor:
    """Exact δ per row so that ``mean(clip(base + δ, p_min, p_max)) = κ``; ``base: (K, n)`` → ``(K, 1)``; κ a scalar
    or ``(K, 1)``.

    The mean is piecewise linear and non-decreasing in δ with breakpoints ``p_min - base`` and ``p_max - base``:
    find the first breakpoint where it reaches κ by bisection over the sorted breakpoints and interpolate on the
    segment before it. Rows where κ is out of reach get the nearest end.
    """
    breaks = torch.cat([p_min - base, p_max - base], dim=1).sort(dim=1).values  # (K, 2n)
    k, m = breaks.shape
    target = torch.as_tensor(keep_ratio, dtype=base.dtype).reshape(-1, 1).expand(k, 1)

    def mean_at(index: torch.Tensor) -> torch.Tensor:  # (K, 1) breakpoint indices → the mean there, (K, 1)
        return torch.clamp(base + breaks.gather(1, index), p_min, p_max).mean(-1, keepdim=True)

    lo = torch.ones(k, 1, dtype=torch.long)
    hi = torch.full((k, 1), m - 1, dtype=torch.long)
    while bool((searching := lo < hi).any()):  # the first index in [1, m - 1] whose mean reaches κ (m - 1 if none)
        mid = (lo + hi) // 2
        reached = mean_at(mid) >= target
        hi, lo = torch.where(searching & reached, mid, hi), torch.where(searching & ~reached, mid + 1, lo)
    d0, d1 = breaks.gather(1, lo - 1), breaks.gather(1, lo)
    f0, f1 = mean_at(lo - 1), mean_at(lo)
    slope_ok = (f1 - f0) > 1e-15
    frac = torch.where(
        slope_ok, (target - f0) / torch.where(slope_ok, f1 - f0, torch.ones_like(f0)), torch.zeros_like(f0)
    )
    return d0 + frac.clamp(0, 1) * (d1 - d0)


GROUP_CHUNK = 64
"""Groups :func:`group_balanced_survival` solves at a time: 64 groups × 129 slopes keep the working set in cache (four
times faster than all groups at once on 8192 groups); each group's solution is its own, so the chunk changes no
result."""


def group_balanced_survival(
    posteriors: torch.Tensor,
    keep_ratio: float | torch.Tensor,
    target_positive_ratio: float | torch.Tensor = 0.5,
    p_min: float = 0.05,
    p_max: float = 1.0,
    num_slopes: int = 129,
) -> torch.Tensor:
    """Per-group survival that follows Lemma 4.1's direction: posteriors ``(n,)`` of one group, or ``(K, n)`` of K
    groups as rows → survival of the same shape.

    ``p_i = clip(κ + δ_g + c_g (q_i - μ_g), p_min, p_max)``: for each candidate slope ``c_g`` δ_g is
    solved exactly so that mean p = κ, and the slope whose expected kept positive ratio ``Σ p q / Σ p``
    lands closest to ρ is chosen (the smallest |c_g| among ties). A group above ρ therefore prunes
    its above-mean rollouts, a group below ρ its below-mean ones, and a balanced group prunes at
    random. Unclipped, the exact slope is ``κ (ρ - μ_g) / Var_g(q)``; the grid spans 4× that.
    ``keep_ratio`` and ``target_positive_ratio`` are scalars or one value per row (``(K,)``).
    """
    q = torch.as_tensor(posteriors, dtype=torch.float64)
    single = q.dim() == 1
    q = q.reshape(1, -1) if single else q
    k = q.shape[0]
    kappa = torch.as_tensor(keep_ratio, dtype=torch.float64).reshape(-1, 1).expand(k, 1)
    rho = torch.as_tensor(target_positive_ratio, dtype=torch.float64).reshape(-1, 1).expand(k, 1)
    best = torch.cat(
        [
            _group_balanced_rows(
                q[i : i + GROUP_CHUNK], kappa[i : i + GROUP_CHUNK], rho[i : i + GROUP_CHUNK], p_min, p_max, num_slopes
            )
            for i in range(0, k, GROUP_CHUNK)
        ]
    )
    return (best[0] if single else best).to(torch.float32)


def _group_balanced_rows(
    q: torch.Tensor, kappa: torch.Tensor, rho: torch.Tensor, p_min: float, p_max: float, num_slopes: int
) -> torch.Tensor:
    """:func:`group_balanced_survival` on ``(K, n)`` float64 rows, κ and ρ ``(K, 1)``."""
    k, n = q.shape
    centred = q - q.mean(1, keepdim=True)
    var = (centred**2).mean(1, keepdim=True)
    flat = (var < 1e-12).squeeze(1) | (n < 2)
    c_max = 4.0 * (kappa * (rho - q.mean(1, keepdim=True)) / var.clamp(min=1e-12)).abs() + 1e-6
    slopes = c_max * torch.linspace(-1.0, 1.0, num_slopes, dtype=torch.float64)  # (K, S)
    base = kappa.unsqueeze(2) + slopes.unsqueeze(2) * centred.unsqueeze(1)  # (K, S, n)
    rows = base.reshape(k * num_slopes, n)
    row_kappa = kappa.repeat_interleave(num_slopes, dim=0)
    probs = torch.clamp(rows + solve_delta_per_group(rows, row_kappa, p_min, p_max), p_min, p_max).reshape(base.shape)
    ratio = (probs * q.unsqueeze(1)).sum(2) / probs.sum(2).clamp(min=1e-12)
    err = (ratio - rho).abs() + 1e-9 * slopes.abs()
    best = probs[torch.arange(k), err.argmin(1)]
    best[flat] = torch.clamp(kappa, p_min, p_max).expand(k, n)[flat]
    return best


def anchored_survival(
    posteriors: torch.Tensor,
    scores: torch.Tensor,
    keep_ratio: float,
    target_positive_ratio: float = 0.5,
    p_min: float = 0.05,
    p_max: float = 1.0,
    floor: int | torch.Tensor = 0,
) -> torch.Tensor:
    """The default balance rule (beyond the paper's Eq. 2): anchors at both ends, Lemma 4.1's direction between.

    ``posteriors, scores: (n,)`` of one group or ``(K, n)`` of K groups → survival of the same shape. Each group's
    highest- and lowest-scored rollouts survive with ``a`` (``p_max`` unless the budget cannot pay it): GRPO needs
    both outcomes among the survivors, and the ends of the head's order are the likeliest to hold them. The other
    rollouts share what is left of the budget, ``κ' = (κ n - 2a) / (n - 2)``, by :func:`group_balanced_survival`
    toward ``ρ'``, the positive ratio they must reach for the whole kept set to sit at ρ given the anchors' q: a
    group whose expected share is above ρ prunes its above-mean middle, one below ρ its below-mean middle. Mean
    survival is κ whenever ``κ' ∈ [p_min, p_max]``. Ranks read the raw scores; levels read the posteriors.

    ``floor``: the survivors the per-group floor guarantees among these rollouts (one for all rows or ``(K,)``; 0:
    none). Where κ buys less than one survivor beyond it (``κ n - floor < 1``: at n = 8 and the floor of 2, κ < 3/8)
    the rows go to :func:`soft_anchored_survival` instead: there the anchors take nearly the whole budget, the group
    keeps about the floor's survivors, and random pruning, whose survivor count varies, gets more back through the
    floor than a weak head's order gains. A group of fewer than 3, or whose scores all tie (one shared prefix), falls
    back to :func:`group_balanced_survival`.
    """
    q = torch.as_tensor(posteriors, dtype=torch.float64)
    s = torch.as_tensor(scores, dtype=torch.float64)
    single = q.dim() == 1
    q, s = (q.reshape(1, -1), s.reshape(1, -1)) if single else (q, s)
    k, n = q.shape
    if n < 3:
        out = group_balanced_survival(q, keep_ratio, target_positive_ratio, p_min, p_max)
        return out[0] if single else out
    floor_rows = torch.as_tensor(floor, dtype=torch.float64).reshape(-1).expand(k)
    soft = (floor_rows > 0) & (keep_ratio * n - floor_rows < 1.0 - 1e-9)
    probs = torch.empty(k, n, dtype=torch.float64)
    if bool(soft.any()):
        probs[soft] = soft_anchored_survival(q[soft], s[soft], keep_ratio, target_positive_ratio, p_min, p_max).to(
            torch.float64
        )
    if not bool(soft.all()):
        probs[~soft] = _anchored_rows(q[~soft], s[~soft], keep_ratio, target_positive_ratio, p_min, p_max)
    tied = (s == s[:, :1]).all(1)
    if bool(tied.any()):
        probs[tied] = group_balanced_survival(q[tied], keep_ratio, target_positive_ratio, p_min, p_max).to(
            torch.float64
        )
    return (probs[0] if single else probs).to(torch.float32)


def _anchored_rows(
    q: torch.Tensor, s: torch.Tensor, keep_ratio: float, target_positive_ratio: float, p_min: float, p_max: float
) -> torch.Tensor:
    """:func:`anchored_survival`'s anchors and middle on ``(K, n)`` float64 rows, n >= 3."""
    k, n = q.shape
    anchor = min(max((keep_ratio * n - (n - 2) * p_min) / 2.0, p_min), p_max)
    rest_kappa = min(max((keep_ratio * n - 2.0 * anchor) / (n - 2), p_min), p_max)
    order = torch.argsort(s, dim=1, stable=True)
    ends, middle = torch.cat([order[:, :1], order[:, -1:]], dim=1), order[:, 1:-1]
    q_ends, q_mid = q.gather(1, ends), q.gather(1, middle)
    kept = 2.0 * anchor + rest_kappa * (n - 2)
    rho_mid = ((target_positive_ratio * kept - anchor * q_ends.sum(1)) / (rest_kappa * (n - 2))).clamp(0.0, 1.0)
    probs = torch.empty(k, n, dtype=torch.float64)
    probs.scatter_(1, ends, anchor)
    probs.scatter_(1, middle, group_balanced_survival(q_mid, rest_kappa, rho_mid, p_min, p_max).to(torch.float64))
    return probs


ANCHOR_LOG_ODDS = 3.0
""":func:`soft_anchored_survival`: the log odds ratio between a group's ends at which the anchors take their full
weight (an odds ratio of e³ ≈ 20); below it the weight is in proportion."""
RANK_TILT = 0.4
""":func:`soft_anchored_survival`: the reach of the rank tilt toward ρ as a share of κ (the end ranks at
κ(1 ± 0.4))."""


def soft_anchored_survival(
    posteriors: torch.Tensor,
    scores: torch.Tensor,
    keep_ratio: float,
    target_positive_ratio: float = 0.5,
    p_min: float = 0.05,
    p_max: float = 1.0,
) -> torch.Tensor:
    """The anchored rule where κ keeps little more than the floor (:func:`anchored_survival` sends those rows here):
    ``posteriors, scores: (n,)`` or ``(K, n)`` with n >= 3 → survival of the same shape.

    Each group moves from random pruning toward the anchored split as far as the head separates its ends:

        p = κ + w (A - κ) + (1 - w) · t κ · d_g · (2 r / (n - 1) - 1)
        w = min(1, (logit q_top - logit q_bottom) / L)

    ``A``: the two ends at ``a`` and the others at ``κ'`` as in :func:`anchored_survival`, the others uniform (they
    hold less than one expected survivor); ``r``: the rank of the raw score (0 the lowest); ``d_g = sign(ρ - mean q)``,
    Lemma 4.1's direction (a group below ρ favours its higher-scored rollouts); ``L`` = :data:`ANCHOR_LOG_ODDS`,
    ``t`` = :data:`RANK_TILT`; then clipped to ``[p_min, p_max]`` with δ re-solved for mean κ. The weight reads the
    odds ratio between the ends, which a head's discrimination sets whatever the pass rate. A head that barely
    separates the ends leaves survival near κ, so the survivor count keeps random pruning's spread and the floor
    revives the head's choices; one that separates them keeps them as the anchored rule does.
    """
    q = torch.as_tensor(posteriors, dtype=torch.float64)
    s = torch.as_tensor(scores, dtype=torch.float64)
    single = q.dim() == 1
    q, s = (q.reshape(1, -1), s.reshape(1, -1)) if single else (q, s)
    k, n = q.shape
    if n < 3:
        raise ValueError(f"soft_anchored_survival needs groups of at least 3, got {n}")
    anchor = min(max((keep_ratio * n - (n - 2) * p_min) / 2.0, p_min), p_max)
    rest_kappa = min(max((keep_ratio * n - 2.0 * anchor) / (n - 2), p_min), p_max)
    order = torch.argsort(s, dim=1, stable=True)
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(n).expand(k, n).contiguous())
    ends = (ranks == 0) | (ranks == n - 1)
    anchored = torch.where(ends, anchor, rest_kappa)
    log_odds = torch.logit(q.clamp(1e-6, 1.0 - 1e-6))
    gap = (log_odds.gather(1, order[:, -1:]) - log_odds.gather(1, order[:, :1])).clamp(min=0.0)
    weight = (gap / ANCHOR_LOG_ODDS).clamp(max=1.0)
    direction = torch.sign(target_positive_ratio - q.mean(1, keepdim=True))
    tilt = RANK_TILT * keep_ratio * direction * (2.0 * ranks / (n - 1) - 1.0)
    probs = keep_ratio + weight * (anchored - keep_ratio) + (1.0 - weight) * tilt
    clipped = ((probs < p_min) | (probs > p_max)).any(1)  # only where κ(1 ± t) leaves [p_min, p_max]
    if bool(clipped.any()):
        base = probs[clipped]
        probs[clipped] = torch.clamp(base + solve_delta_per_group(base, keep_ratio, p_min, p_max), p_min, p_max)
    return (probs[0] if single else probs).to(torch.float32)


def spread_survival(scores: torch.Tensor, keep_ratio: float, p_min: float = 0.05, p_max: float = 1.0) -> torch.Tensor:
    """Rank-only group survival (beyond the paper): raw head scores ``(n,)`` of one group, or ``(K, n)``, → survival.

    The group's highest- and lowest-scored rollouts survive with ``p_max``; the others share what is left of
    the budget, ``p = (κ n - 2 p_max) / (n - 2)`` clipped to ``[p_min, p_max]``. It reads only the order of the
    scores inside the group, never their calibrated level: GRPO needs both outcomes among the survivors, and
    a head can order one prompt's rollouts where its posterior's level is off. A group of fewer than 3 rollouts,
    or whose scores are all equal (one shared prefix), gets κ everywhere, as random pruning.
    """
    s = torch.as_tensor(scores, dtype=torch.float64)
    single = s.dim() == 1
    s = s.reshape(1, -1) if single else s
    k, n = s.shape
    p = torch.full((k, n), float(keep_ratio), dtype=torch.float64)
    if n >= 3:
        ranked = ~(s == s[:, :1]).all(1)
        rest = min(max((keep_ratio * n - 2.0 * p_max) / (n - 2), p_min), p_max)
        p[ranked] = rest
        rows = torch.nonzero(ranked, as_tuple=True)[0]
        p[rows, s[rows].argmax(1)] = p_max
        p[rows, s[rows].argmin(1)] = p_max
    return (p[0] if single else p).to(torch.float32)
