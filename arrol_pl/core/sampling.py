"""The keep/prune draw of one group (Algorithm 1 lines 20–22): which rollouts survive, given each one's survival
probability p, and the chance π_ij that two of them survive together.

Two designs, both with P(i survives) = p_i exactly (``pruning.draw``):

- ``fixed_size`` (the default): conditional Poisson sampling, the maximum-entropy design of fixed size. With
  Σp whole, exactly Σp rollouts survive; with Σp fractional, ⌊Σp⌋ or ⌈Σp⌉ (a phantom unit of probability
  ⌈Σp⌉ − Σp is drawn with them and dropped). A group's survivor count does not vary, so the per-group floor
  (two survivors, what GRPO needs for an advantage) never tops up a group whose Σp reaches it: at κ = 0.25 in
  groups of 8 independent draws keep E[max(2, Binomial(8, 1/4))] = 2.47 survivors per group, 24 % above κ.
- ``independent``: one Bernoulli(p_i) each (π_ij = p_i p_j), the design the paper's sampling step reads as.

Conditional Poisson: P(S) ∝ Π_{i∈S} w_i over the sets of the size drawn; working weights w are fitted by Newton's
method so that each inclusion probability is p_i (Chen, Dempster & Liu 1994), and
π_ij = w_i w_j e_{n-2}(w without i, j) / e_n(w), e_k the elementary symmetric polynomials. A set is drawn item by
item, one uniform each, item i entering with w_i e_{k-1}(w_{>i}) / e_k(w_{≥i}) while k are still needed.
Estimators over pairs of survivors (the AUC within groups) weight a pair 1/π_ij (Horvitz–Thompson), which is
1/(p_i p_j) only for independent draws.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

DRAWS = ("fixed_size", "independent")
_EPS = 1e-9


def independent_inclusion(p: torch.Tensor) -> torch.Tensor:
    """``p: (n,)`` → ``(n, n)`` float64 π_ij of independent draws: p_i p_j, p_i on the diagonal."""
    p = torch.as_tensor(p, dtype=torch.float64).flatten()
    out = torch.outer(p, p)
    out.diagonal().copy_(p)
    return out


def _esp_without_pairs(w: torch.Tensor, k: int) -> torch.Tensor:
    """``w: (K, m)`` → ``(K, m, m, k + 1)``: e_0..e_k of each row's w without items a and b (a = b: without a)."""
    rows, m = w.shape
    present = ~torch.eye(m, dtype=torch.bool)  # present[j, a]: item j is in "without a"
    mask = (present[:, :, None] & present[:, None, :]).to(torch.float64)  # (j, a, b)
    out = torch.zeros(rows, m, m, k + 1, dtype=torch.float64)
    out[..., 0] = 1.0
    for j in range(m):
        out[..., 1:] += (w[:, j, None, None] * mask[j])[..., None] * out[..., :-1].clone()
    return out


def _esp_without_one(w: torch.Tensor, k: int) -> torch.Tensor:
    """``w: (K, m)`` → ``(K, m, k + 1)``: e_0..e_k of each row's w without item a."""
    rows, m = w.shape
    present = (~torch.eye(m, dtype=torch.bool)).to(torch.float64)  # present[j, a]
    out = torch.zeros(rows, m, k + 1, dtype=torch.float64)
    out[..., 0] = 1.0
    for j in range(m):
        out[..., 1:] += (w[:, j, None] * present[j])[..., None] * out[..., :-1].clone()
    return out


def _pick(t: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``t[..., k]`` with ``k`` broadcast over the leading dimensions (negative k: clamped to 0)."""
    return t.gather(-1, k.clamp(min=0).expand(*t.shape[:-1], 1)).squeeze(-1)


def _cps_inclusion(w: torch.Tensor, size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Conditional Poisson of ``size (K,)`` with weights ``w: (K, m)`` (0: not in the draw) → ``(π_i (K, m),
    π_ij (K, m, m))``, π_i on the diagonal. e_k without a pair comes from e_k without one item by taking the other
    out (e_k(w_{-a,-b}) = e_k(w_{-a}) - w_b e_{k-1}(w_{-a,-b}), the smaller weight of the two taken out); a row whose
    pairs fail their identity Σ_{j≠i} π_ij = (size - 1) π_i is computed again item by item."""
    top = int(size.max())
    alone = _esp_without_one(w, top)  # (K, m, top + 1)
    without_one = _pick(alone, (size - 1)[:, None, None])  # (K, m)
    total = (w * without_one).sum(1) / size  # e_size(w) = Σ_i w_i e_{size-1}(w_{-i}) / size
    single = w * without_one / total[:, None]
    two = torch.ones_like(w[:, :, None] * w[:, None, :])  # e_0(w_{-a,-b}); then e_1, ... up to size - 2
    without_two = torch.where((size >= 2)[:, None, None], two, 0.0)
    for k in range(1, top - 1):
        two = alone[:, :, None, k] - w[:, None, :] * two  # [a, b]: b taken out of "without a"
        without_two = torch.where((size - 2 == k)[:, None, None], two, without_two)
    without_two = torch.where(w[:, None, :] <= w[:, :, None], without_two, without_two.transpose(1, 2))
    joint = w[:, :, None] * w[:, None, :] * without_two / total[:, None, None]
    joint.diagonal(dim1=1, dim2=2).copy_(0.0)
    check = (joint.sum(2) - (size - 1)[:, None] * single).abs().amax(1)
    bad = (check > 1e-9) | (joint < -1e-12).flatten(1).any(1) | ~torch.isfinite(joint).flatten(1).all(1)
    if bool(bad.any()):
        exact = _esp_without_pairs(w[bad], top)
        joint[bad] = (
            w[bad][:, :, None]
            * w[bad][:, None, :]
            * torch.where((size[bad] >= 2)[:, None, None], _pick(exact, (size[bad] - 2)[:, None, None, None]), 0.0)
            / total[bad][:, None, None]
        )
    joint.diagonal(dim1=1, dim2=2).copy_(single)
    return single, joint


def _newton_step(
    p: torch.Tensor,
    active: torch.Tensor,
    log_w: torch.Tensor,
    single: torch.Tensor,
    joint: torch.Tensor,
    error: torch.Tensor,
    rows: torch.Tensor,
    at: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]],
) -> tuple[torch.Tensor, ...]:
    """One Newton step on log w of the rows ``rows`` of :func:`conditional_poisson_weights` (p, its active items and
    the design at log w, all of those rows), each row's step halved until it shrinks the row's largest error: the
    design at the new log w, as ``at`` returns it."""
    block = (active[:, :, None] & active[:, None, :]).to(torch.float64)  # the rows' sum-to-zero direction
    outside = torch.diag_embed((~active).to(torch.float64))
    jacobian = (joint - single[:, :, None] * single[:, None, :]) * block  # d π_i / d log w_j
    jacobian.diagonal(dim1=1, dim2=2).copy_(single * (1.0 - single))
    step, info = torch.linalg.solve_ex(jacobian + block + outside, single - p)
    fixed_point = torch.logit(single.clamp(1e-300, 1 - 1e-16)) - torch.logit(p.clamp(1e-300, 1 - 1e-16))
    bad = (info != 0) | ~torch.isfinite(step).all(1)
    step = torch.where(active & ~bad[:, None], step, torch.where(active, fixed_point, 0.0))
    scale = torch.ones(p.shape[0], 1, dtype=torch.float64)
    trial = at(log_w - step, rows)
    for _ in range(40):  # halve the step of each row whose error it did not shrink
        worse = ~(trial[3] < error)  # NaN (an overflowing step) is worse
        if not bool(worse.any()):
            break
        scale = torch.where(worse[:, None], scale / 2, scale)
        redo = at(log_w - scale * step, rows)
        trial = tuple(torch.where(worse.reshape(-1, *[1] * (a.dim() - 1)), b, a) for a, b in zip(trial, redo))
    return trial


def conditional_poisson_weights(
    p: torch.Tensor, size: int | torch.Tensor, tol: float = 1e-10, max_iter: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Working weights of the conditional Poisson design of ``size`` whose inclusion probabilities are ``p``, by
    Newton's method on log w from Hájek's approximation, log w = logit p - (p - 1/2) / max(1, Σ p(1 - p)), each
    step halved until it shrinks the largest error; with the design's π_ij at them (p_i on the diagonal).
    ``p: (m,)`` each in (0, 1) summing to ``size``, or ``(K, m)`` rows with ``size (K,)`` (an item of p = 0 is not
    in its row's draw). Returns ``(w, π)`` shaped as ``p`` and ``(..., m, m)``."""
    p = torch.as_tensor(p, dtype=torch.float64)
    single_row = p.dim() == 1
    p = p.reshape(1, -1) if single_row else p
    size = torch.as_tensor(size, dtype=torch.long).reshape(-1).expand(p.shape[0])
    active = p > 0
    count = active.sum(1, keepdim=True)

    def at(log_w: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The design at ``log_w`` of the rows ``rows`` (indices into p): its log w, π_i, π_ij and largest error."""
        live = active[rows]
        centre = torch.where(live, log_w, 0.0).sum(1, keepdim=True) / count[rows]  # the design is that of c·w too
        log_w = torch.where(live, log_w - centre, float("-inf"))
        single, joint = _cps_inclusion(torch.exp(log_w), size[rows])
        return log_w, single, joint, (single - p[rows]).abs().amax(1)

    spread = torch.where(active, p * (1.0 - p), 0.0).sum(1, keepdim=True).clamp(min=1.0)
    everyone = torch.arange(p.shape[0])
    log_w, single, joint, error = at(torch.log(p / (1.0 - p)) - (p - 0.5) / spread, everyone)  # Hájek's approximation
    for _ in range(max_iter):
        if bool((error < tol).all()):
            w = torch.exp(log_w)
            return (w[0], joint[0]) if single_row else (w, joint)
        rows = torch.nonzero(error >= tol, as_tuple=True)[0]  # a converged row is left as it is
        new = _newton_step(p[rows], active[rows], log_w[rows], single[rows], joint[rows], error[rows], rows, at)
        for whole, part in zip((log_w, single, joint, error), new):
            whole[rows] = part
    raise RuntimeError(f"the fixed-size draw's weights did not converge for survival probabilities {p.tolist()}")


def _draw_cps(w: torch.Tensor, size: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One set of ``size (K,)`` per row from the conditional Poisson design with weights ``w: (K, m)``, item by
    item with its uniform (``uniforms: (K, m)``; an item the row must take or cannot take reads none). Returns
    ``(K, m)`` bool."""
    rows, m = w.shape
    top = int(size.max())
    suffix = torch.zeros(rows, m + 1, top + 1, dtype=torch.float64)  # suffix[:, i, k] = e_k(w_i, ..., w_{m-1})
    suffix[:, m, 0] = 1.0
    for i in range(m - 1, -1, -1):
        suffix[:, i] = suffix[:, i + 1]
        suffix[:, i, 1:] += w[:, i, None] * suffix[:, i + 1, :-1]
    chosen = torch.zeros(rows, m, dtype=torch.bool)
    need = size.clone()
    for i in range(m):
        k = need[:, None]
        ahead = suffix[:, i + 1].gather(1, (k - 1).clamp(min=0)).squeeze(1)
        here = suffix[:, i].gather(1, k).squeeze(1)
        enter = torch.where((need > 0) & (here > 0), w[:, i] * ahead / here.clamp(min=1e-300), 0.0)
        take = (enter >= 1.0 - _EPS) | (uniforms[:, i] < enter)
        chosen[:, i] = take
        need = need - take.long()
    return chosen


def fixed_size_draws(p: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of groups drawn at fixed size: ``p, uniforms: (K, n)`` → ``(keep (K, n) bool, π (K, n, n) float64)``.
    p = 1 always survives, p = 0 never; the rest of a row by conditional Poisson of size Σp (a phantom unit makes
    a fractional Σp whole: ⌊Σp⌋ or ⌈Σp⌉ survive). ``uniforms`` in [0, 1), one per rollout (the rollout's own)."""
    p = torch.as_tensor(p, dtype=torch.float64).clamp(0.0, 1.0)
    uniforms = torch.as_tensor(uniforms, dtype=torch.float64)
    rows, n = p.shape
    certain, free = p >= 1.0 - _EPS, (p > _EPS) & (p < 1.0 - _EPS)
    level = torch.where(certain, 1.0, torch.where(free, p, 0.0))
    joint = level[:, :, None] * level[:, None, :]
    joint.diagonal(dim1=1, dim2=2).copy_(level)
    keep = certain.clone()
    q = torch.where(free, p, 0.0)
    total = q.sum(1)
    size = torch.round(total)
    fractional = (total - size).abs() > 1e-6
    size = torch.where(fractional, torch.ceil(total - 1e-6), size).long()
    q = torch.where(fractional[:, None] | (size == 0)[:, None], q, q * (size / total.clamp(min=1e-300))[:, None])
    if bool(fractional.any()):
        q = torch.cat([q, torch.where(fractional, size - total, 0.0)[:, None]], dim=1)  # the phantom, last
    drawn = (size > 0) & (size < (q > 0).sum(1))
    if bool(drawn.any()):
        rows_drawn = torch.nonzero(drawn, as_tuple=True)[0]
        w, pairs = conditional_poisson_weights(q[rows_drawn], size[rows_drawn])
        phantom = torch.ones(len(rows_drawn), q.shape[1] - n, dtype=torch.float64)  # read by no draw
        chosen = _draw_cps(w, size[rows_drawn], torch.cat([uniforms[rows_drawn], phantom], 1))
        both = free[rows_drawn, :, None] & free[rows_drawn, None, :]
        joint[rows_drawn] = torch.where(both, pairs[:, :n, :n], joint[rows_drawn])
        keep[rows_drawn] |= chosen[:, :n] & free[rows_drawn]
    plain = ~drawn  # nothing or everything of the free ones: each p is then 0 or 1
    keep[plain] |= free[plain] & (uniforms[plain] < p[plain])
    return keep, joint


def fixed_size_draw(p: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One group's :func:`fixed_size_draws`: ``p, uniforms: (n,)`` → ``(keep (n,), π (n, n))``."""
    keep, joint = fixed_size_draws(torch.as_tensor(p).reshape(1, -1), torch.as_tensor(uniforms).reshape(1, -1))
    return keep[0], joint[0]


def joint_rows(sample_index: Sequence[int], rows: Sequence[Sequence[float] | None]) -> torch.Tensor:
    """Survivors' pair chances as row-aligned data (they follow the rows through subsets, concatenation and the
    gather across ranks): ``(N, 1 + G)`` float64, column 0 each survivor's index in its group and the rest its
    π with each member of the group by index (a decision's ``inclusion`` row); a row of None (no draw known) is
    NaN and pairs as if drawn independently."""
    width = max((len(r) for r in rows if r is not None), default=0)
    out = torch.full((len(rows), 1 + width), float("nan"), dtype=torch.float64)
    for k, (index, row) in enumerate(zip(sample_index, rows)):
        if row is not None:
            out[k, 0] = float(index)
            out[k, 1 : 1 + len(row)] = torch.as_tensor(row, dtype=torch.float64)
    return out


def group_inclusion(
    group_ids: torch.Tensor, survival: torch.Tensor, joint: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """π_ab for the rows ``(N,)`` of survivors, group by group: ``(index (K, M), valid (K, M), inclusion (K, M, M))``
    with ``index[k]`` the rows of the k-th group in their order (``valid`` where the group has that many), and
    their π: p_a on the diagonal, the draw's chance from ``joint`` (:func:`joint_rows`) where both rows have it,
    p_a p_b otherwise (as if drawn independently)."""
    group_ids = torch.as_tensor(group_ids).flatten().to(torch.long)
    p = torch.as_tensor(survival, dtype=torch.float64).flatten()
    order = torch.sort(group_ids, stable=True).indices
    _, counts = torch.unique_consecutive(group_ids[order], return_counts=True)
    k, m = counts.numel(), int(counts.max()) if counts.numel() else 0
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(m)
    valid = slot[None, :] < counts[:, None]
    index = (
        order[(starts[:, None] + slot[None, :]).clamp(max=max(order.numel() - 1, 0))]
        if k
        else torch.zeros(0, 0, dtype=torch.long)
    )
    index = torch.where(valid, index, 0)
    pk = torch.where(valid, p[index], 0.0)
    inclusion = pk[:, :, None] * pk[:, None, :]
    if joint is not None and joint.shape[1] >= 2 and k:
        joint = torch.as_tensor(joint, dtype=torch.float64)
        rows = joint[index]  # (K, M, 1 + G)
        known = valid & ~torch.isnan(rows[..., 0])
        member = torch.where(known, rows[..., 0], 0.0).to(torch.long).clamp(max=joint.shape[1] - 2)
        within = rows[..., 1:].gather(2, member[:, None, :].expand(k, m, m))  # [k, a, b]: a's chance with b
        use = known[:, :, None] & known[:, None, :] & ~torch.isnan(within)
        inclusion = torch.where(use, within, inclusion)
    inclusion.diagonal(dim1=1, dim2=2).copy_(pk)
    return index, valid, inclusion


def joint_by_sample_index(inclusion: torch.Tensor, sample_index: Sequence[int]) -> list[tuple[float, ...] | None]:
    """One group's π ``(n, n)`` (members in ``sample_index`` order) as each member's row by sample index: entry k
    its chance with the member of index k (NaN where no member has k). None for all where indices repeat."""
    if len(set(sample_index)) != len(sample_index) or min(sample_index, default=0) < 0:
        return [None] * len(sample_index)
    width = max(sample_index, default=-1) + 1
    rows = torch.full((len(sample_index), width), float("nan"), dtype=torch.float64)
    rows[:, list(sample_index)] = torch.as_tensor(inclusion, dtype=torch.float64)
    return [tuple(r) for r in rows.tolist()]
