import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arrol_pl.core.survival import (
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
    p = survival_from_delta(q, 0.1, keep_ratio=0.5, target_positive_ratio=0.5, balance_strength=0.5, p_min=0.05, p_max=1.0)
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
@given(q=st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=32), kappa=st.floats(0.1, 1.0), rho=st.floats(0, 1))
def test_group_balanced_survival_keeps_kappa_and_steers_toward_rho(q, kappa, rho):
    qt = torch.tensor(q, dtype=torch.float64)
    p = group_balanced_survival(qt, kappa, rho, p_min=0.05, p_max=1.0).double()
    assert abs(float(p.mean()) - kappa) <= 1e-4
    assert torch.all(p >= 0.05 - 1e-6) and torch.all(p <= 1.0 + 1e-6)
    # the expected kept positive ratio is never further from ρ than keeping uniformly
    kept_ratio = float((p * qt).sum() / p.sum())
    assert abs(kept_ratio - rho) <= abs(float(qt.mean()) - rho) + 1e-6
