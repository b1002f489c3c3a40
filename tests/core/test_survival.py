import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arrol_pl.core.survival import (
    solve_delta_per_group,
    best_single_prune,
    group_balanced_survival,
    survival_from_delta,
    survival_probabilities,
)

posteriors = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=64)


@settings(max_examples=80, deadline=None)
@given(
    q=posteriors,
    kappa=st.floats(0.05, 1.0),
    rho=st.floats(0, 1),
    lam=st.floats(0, 2),
    p_min=st.floats(0, 0.3),
)
def test_mean_survival_equals_kappa_when_feasible(q, kappa, rho, lam, p_min):
    assume(p_min <= kappa)
    res = survival_probabilities(torch.tensor(q), kappa, rho, lam, p_min, 1.0)
    assert res.feasible
    assert abs(float(res.probs.double().mean()) - kappa) <= 1e-4
    assert abs(res.shortfall) <= 1e-4
    assert torch.all(res.probs >= p_min - 1e-6) and torch.all(res.probs <= 1.0 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(q=posteriors, kappa=st.floats(0.05, 1.0), lam=st.floats(0.01, 2))
def test_survival_non_increasing_in_posterior(q, kappa, lam):
    qt = torch.tensor(q)
    res = survival_probabilities(qt, kappa, 0.5, lam, 0.05, 1.0)
    order = torch.argsort(qt)
    p_sorted = res.probs[order]
    assert torch.all(p_sorted[1:] <= p_sorted[:-1] + 1e-6)


@settings(max_examples=60, deadline=None)
@given(
    q=posteriors,
    w=st.lists(st.floats(0.1, 10), min_size=64, max_size=64),
    kappa=st.floats(0.1, 0.9),
)
def test_weighted_mean_is_kappa(q, w, kappa):
    qt = torch.tensor(q)
    wt = torch.tensor(w[: len(q)])
    res = survival_probabilities(qt, kappa, 0.5, 0.5, 0.05, 1.0, weights=wt)
    assert abs(float((res.probs.double() * wt).sum() / wt.sum()) - kappa) <= 1e-4


def test_infeasible_kappa_reports_shortfall():
    q = torch.tensor([0.1, 0.5, 0.9])
    res = survival_probabilities(q, keep_ratio=0.9, p_min=0.05, p_max=0.6)
    assert not res.feasible
    assert torch.allclose(res.probs, torch.full((3,), 0.6))
    assert res.shortfall == pytest.approx(0.3)
    low = survival_probabilities(q, keep_ratio=0.1, p_min=0.2, p_max=1.0)
    assert torch.allclose(low.probs, torch.full((3,), 0.2)) and low.shortfall == pytest.approx(-0.1)


def test_fixed_delta_is_eq2():
    q = torch.tensor([0.0, 0.5, 1.0])
    p = survival_from_delta(
        q, 0.1, keep_ratio=0.5, target_positive_ratio=0.5, balance_strength=0.5, p_min=0.05, p_max=1.0
    )
    assert p.tolist() == pytest.approx([0.85, 0.6, 0.35])
    res = survival_probabilities(q, 0.5, delta=0.1)
    assert res.delta == 0.1 and res.probs.tolist() == pytest.approx([0.85, 0.6, 0.35])


def test_best_single_prune_is_lemma_4_1():
    # μ* = 0.7 > ρ = 0.5 and q_0 = 0.95 > μ*: pruning it must reduce the deviation (Lemma 4.1).
    q = torch.tensor([0.95, 0.7, 0.6, 0.55])
    j = best_single_prune(q, 0.5)
    assert j == 0
    mean_all = float(q.mean())
    mean_minus = float((q.sum() - q[j]) / 3)
    assert abs(mean_minus - 0.5) < abs(mean_all - 0.5)
    with pytest.raises(ValueError):
        best_single_prune(torch.tensor([0.3]), 0.5)


@settings(max_examples=60, deadline=None)
@given(
    q=st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=32),
    kappa=st.floats(0.1, 1.0),
    rho=st.floats(0, 1),
)
def test_group_balanced_survival_keeps_kappa_and_steers_toward_rho(q, kappa, rho):
    qt = torch.tensor(q, dtype=torch.float64)
    p = group_balanced_survival(qt, kappa, rho, p_min=0.05, p_max=1.0).double()
    assert abs(float(p.mean()) - kappa) <= 1e-4
    assert torch.all(p >= 0.05 - 1e-6) and torch.all(p <= 1.0 + 1e-6)
    # the expected kept positive ratio is never further from ρ than keeping uniformly
    kept_ratio = float((p * qt).sum() / p.sum())
    assert abs(kept_ratio - rho) <= abs(float(qt.mean()) - rho) + 1e-6


def dense_delta_rows(base: torch.Tensor, keep_ratio: torch.Tensor, p_min: float, p_max: float) -> torch.Tensor:
    """The δ solve with the mean evaluated at every breakpoint and the segment found by ``searchsorted``."""
    breaks = torch.cat([p_min - base, p_max - base], dim=1).sort(dim=1).values
    values = torch.clamp(base.unsqueeze(1) + breaks.unsqueeze(2), p_min, p_max).mean(-1)
    hi = torch.searchsorted(values.contiguous(), keep_ratio.contiguous()).clamp(1, breaks.shape[1] - 1)
    d0, d1 = breaks.gather(1, hi - 1), breaks.gather(1, hi)
    f0, f1 = values.gather(1, hi - 1), values.gather(1, hi)
    ok = (f1 - f0) > 1e-15
    frac = torch.where(ok, (keep_ratio - f0) / torch.where(ok, f1 - f0, torch.ones_like(f0)), torch.zeros_like(f0))
    return d0 + frac.clamp(0, 1) * (d1 - d0)


@pytest.mark.parametrize("n", [1, 2, 3, 6, 8, 16])
def test_delta_solve_by_bisection_equals_the_dense_evaluation(n):
    """The bisection over the sorted breakpoints reads the same means as evaluating all of them: the same δ, bit for
    bit, out-of-reach rows and tied breakpoints included."""
    gen = torch.Generator().manual_seed(n)
    base = torch.cat(
        [
            torch.randn(300, n, generator=gen, dtype=torch.float64),
            (torch.rand(300, n, generator=gen, dtype=torch.float64) * 4).round() / 4,
            torch.full((10, n), 0.3, dtype=torch.float64),
        ]
    )
    kappa = torch.rand(base.shape[0], 1, generator=gen, dtype=torch.float64) * 1.2 - 0.1
    assert torch.equal(solve_delta_per_group(base, kappa, 0.05, 1.0), dense_delta_rows(base, kappa, 0.05, 1.0))


def test_group_balanced_survival_of_many_groups_is_each_groups_own():
    """Solving groups in chunks changes nothing: K groups at once equal each group alone, bit for bit."""
    gen = torch.Generator().manual_seed(0)
    q = torch.rand(150, 6, generator=gen, dtype=torch.float64)
    rho = torch.rand(150, generator=gen, dtype=torch.float64)
    together = group_balanced_survival(q, 1 / 3, rho)
    assert torch.equal(together, torch.stack([group_balanced_survival(q[i], 1 / 3, rho[i]) for i in range(150)]))
