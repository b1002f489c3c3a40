"""The decode-cost model: what a generation would have cost had some of its rollouts stopped at L_detect.

The oracle scorer (:mod:`.scorers`) lets every rollout run to its end, because its decision reads the outcome;
real pruning would have aborted the pruned ones at L_detect. The time that would have saved is *credited* from
this model, fitted on the engine's own steps in the same generation, and logged as a term of its own.

Decisions:
- **A step costs a fixed part plus a part per request it advances** (``t = fixed + per_request × n``): a batched
  decode step pays the model's weights and the scheduler once and each sequence's attention and sampling once
  more. The two numbers are fitted by least squares on the generation's own steps (the engine records each step's
  seconds and how many requests it advanced); steps over five times the median are prefill-heavy and left out.
- **The schedule is simulated, for the real lengths and the pruned ones alike**: requests enter first-in
  first-out into ``slots`` (``engine.max_num_seqs``), every running request gains one token per step and leaves
  when it reaches its length. With detect-first scheduling (``engine.detect_first``, which real pruning uses when
  the rollouts outnumber the slots) the pruned schedule is two passes: every rollout to L_detect, then the
  survivors' remainders. The credit is the model's time for the real schedule minus its time for the pruned one,
  so the model's error on the shared part cancels.
- Validated against real pruning by ``experiments/bench_credit.py``: random pruning that really aborts, against
  the same decisions credited on a full generation of the same rollouts.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

PREFILL_OUTLIER = 5.0
"""Steps longer than this many times the median step are left out of the fit (prompt prefill)."""


@dataclass(frozen=True)
class StepCost:
    """Seconds of one engine step that advances ``n`` requests: ``fixed + per_request × n``."""

    fixed: float
    per_request: float

    def seconds(self, counts: Sequence[int]) -> float:
        """The modelled seconds of steps advancing ``counts[i]`` requests each."""
        return sum(self.fixed + self.per_request * n for n in counts)


def fit_step_cost(step_seconds: Sequence[float], step_requests: Sequence[int]) -> StepCost:
    """Least squares of ``seconds ~ fixed + per_request × requests`` over the steps that advanced a request,
    without prefill-heavy outliers; a flat cost (``per_request = 0``) when the counts do not vary or the slope
    comes out negative."""
    if len(step_seconds) != len(step_requests):
        raise ValueError(f"{len(step_seconds)} step times for {len(step_requests)} request counts")
    pairs = [(float(t), int(n)) for t, n in zip(step_seconds, step_requests) if n > 0]
    if not pairs:
        raise ValueError("no engine step advanced a request: nothing to fit the decode cost on")
    cap = PREFILL_OUTLIER * statistics.median(t for t, _ in pairs)
    pairs = [(t, n) for t, n in pairs if t <= cap] or pairs
    ts, ns = [t for t, _ in pairs], [n for _, n in pairs]
    mean_t, mean_n = statistics.fmean(ts), statistics.fmean(ns)
    var_n = sum((n - mean_n) ** 2 for n in ns)
    if var_n == 0:
        return StepCost(mean_t, 0.0)
    slope = sum((n - mean_n) * (t - mean_t) for t, n in pairs) / var_n
    if slope < 0:
        return StepCost(mean_t, 0.0)
    return StepCost(max(mean_t - slope * mean_n, 0.0), slope)


def schedule(lengths: Sequence[int], slots: int) -> list[int]:
    """The requests each engine step advances when ``lengths`` (tokens per request, in arrival order) are decoded
    first-in first-out in ``slots`` slots, one token per running request per step."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    waiting = deque(int(n) for n in lengths if n > 0)
    running: list[int] = []
    counts = []
    while waiting or running:
        while waiting and len(running) < slots:
            running.append(waiting.popleft())
        counts.append(len(running))
        running = [n - 1 for n in running if n > 1]
    return counts


@dataclass(frozen=True)
class Credit:
    """What pruning at L_detect would have saved a generation: ``seconds`` (modelled) and ``tokens``."""

    seconds: float
    tokens: int
    cost: StepCost


def pruned_schedule(
    lengths: Sequence[int], pruned: Sequence[bool], detect_length: int, slots: int, detect_first: bool = False
) -> list[int]:
    """:func:`schedule` of a generation whose rollouts marked ``pruned`` stop at ``detect_length`` tokens: one pass,
    or with ``detect_first`` every rollout to L_detect, then the survivors' remainders."""
    if detect_first:
        return schedule([min(n, detect_length) for n in lengths], slots) + schedule(
            [n - detect_length for n, p in zip(lengths, pruned) if not p and n > detect_length], slots
        )
    return schedule([min(n, detect_length) if p else n for n, p in zip(lengths, pruned)], slots)


def pruned_seconds(
    cost: StepCost,
    lengths: Sequence[int],
    pruned: Sequence[bool],
    detect_length: int,
    slots: int,
    detect_first: bool | None,
) -> tuple[float, bool]:
    """The modelled seconds of a generation pruned to ``pruned`` (:func:`pruned_schedule`) and whether it ran
    detect-first; ``detect_first`` None: the schedule of the two ``cost`` models faster (one pass on a tie), as the
    engine chooses with ``engine.detect_first`` null."""
    return min(
        (cost.seconds(pruned_schedule(lengths, pruned, detect_length, slots, first)), first)
        for first in ((False, True) if detect_first is None else (detect_first,))
    )


def recomputed_tokens(prompt_length: int, detect_length: int, block: int | None) -> int:
    """Tokens a continued rollout's second request computes again (detect-first): its prompt is the rollout's prompt
    and first ``detect_length`` tokens, of which prefix caching serves the full ``block``-token blocks but never the
    last token (None: no prefix caching, all of them)."""
    n = prompt_length + detect_length
    return n if block is None else n - ((n - 1) // block) * block


def spread_pruned(rollouts: int, keep_ratio: float) -> list[bool]:
    """``rollouts`` prune flags, a share ``1 - keep_ratio`` of them set and spread evenly over the request order."""
    drop = 1.0 - keep_ratio
    return [int((i + 1) * drop) > int(i * drop) for i in range(rollouts)]


@dataclass(frozen=True)
class SchedulePlan:
    """The modelled seconds of a pruned generation in its two schedules, and the one chosen."""

    one_pass: float
    detect_first: float

    @property
    def chosen(self) -> bool:
        """Detect-first, when it is modelled strictly faster."""
        return self.detect_first < self.one_pass


SURVIVOR_QUANTILES = 9
"""How many quantiles of the survivor count :func:`plan_schedule` averages over."""


def plan_schedule(
    prompt_lengths: Sequence[int],
    group_size: int,
    keep_ratio: float,
    detect_length: int,
    response: int,
    slots: int,
    block: int | None,
    cost: StepCost,
    fixed_size: bool = False,
) -> SchedulePlan:
    """What a pruned generation of ``group_size`` rollouts per prompt would cost run as one request per rollout and
    run detect-first, with ``cost`` per step (``per_request``: per token computed) and every rollout at its budget
    ``response`` unless pruned (spread evenly). Detect-first runs the same tokens in fewer or as many steps, and
    computes each survivor's prompt again past its cached blocks (:func:`recomputed_tokens`).

    Survivors are drawn, so their count varies about ``keep_ratio`` of the rollouts: the figures are the mean over
    :data:`SURVIVOR_QUANTILES` quantiles of the count (normal approximation): binomial for independent draws, and
    for the fixed-size draw (``fixed_size``, ``pruning.draw``) only as much as each group's κG is fractional (a group
    keeps ⌊κG⌋ or ⌈κG⌉). Detect-first's second pass runs in whole waves of ``slots``, so a count just over a multiple
    of the slots costs it a whole extra wave; the mean over the counts prices that in."""
    rollouts = len(prompt_lengths) * group_size
    if fixed_size:
        part = keep_ratio * group_size % 1.0
        variance = len(prompt_lengths) * part * (1.0 - part)
    else:
        variance = keep_ratio * (1 - keep_ratio) * rollouts
    spread = statistics.NormalDist(keep_ratio * rollouts, max(variance, 1e-9) ** 0.5)
    one_pass = detect_first = 0.0
    lengths = [response] * rollouts
    for q in range(SURVIVOR_QUANTILES):
        kept = min(max(round(spread.inv_cdf((q + 0.5) / SURVIVOR_QUANTILES)), 0), rollouts)
        pruned = spread_pruned(rollouts, kept / rollouts)
        again = sum(
            recomputed_tokens(prompt_lengths[i // group_size], detect_length, block)
            for i, p in enumerate(pruned)
            if not p
        )
        one_pass += cost.seconds(pruned_schedule(lengths, pruned, detect_length, slots))
        detect_first += (
            cost.seconds(pruned_schedule(lengths, pruned, detect_length, slots, True)) + cost.per_request * again
        )
    return SchedulePlan(one_pass / SURVIVOR_QUANTILES, detect_first / SURVIVOR_QUANTILES)


def pruning_credit(
    lengths: Sequence[int],
    pruned: Sequence[bool],
    detect_length: int,
    slots: int,
    step_seconds: Sequence[float],
    step_requests: Sequence[int],
    detect_first: bool | None = False,
) -> Credit:
    """The credit for pruning the rollouts marked ``pruned`` at ``detect_length`` tokens.

    ``lengths``: each rollout's generated tokens in the full generation, in request order; ``step_seconds`` and
    ``step_requests``: that generation's engine steps (:class:`~arrol_pl.engine.protocol.GenerationResult`);
    ``detect_first``: the pruned generation would run every rollout to L_detect first, then the survivors; None: the
    schedule of the two the fitted cost models faster (``engine.detect_first`` null, the engine's choice)."""
    if len(lengths) != len(pruned):
        raise ValueError(f"{len(lengths)} lengths for {len(pruned)} prune flags")
    cost = fit_step_cost(step_seconds, step_requests)
    cut = [min(n, detect_length) if p else n for n, p in zip(lengths, pruned)]
    seconds = (
        cost.seconds(schedule(lengths, slots))
        - pruned_seconds(cost, lengths, pruned, detect_length, slots, detect_first)[0]
    )
    # never less than nothing, never more than the steps took
    return Credit(min(max(seconds, 0.0), sum(step_seconds)), sum(lengths) - sum(cut), cost)


def modelled_saving(
    response: int, detect_length: int, keep_ratio: float, rollouts: int, slots: int, cost: StepCost | None = None
) -> dict[str, float]:
    """What pruning at L_detect saves a generation of ``rollouts`` rollouts of ``response`` tokens each, keeping
    ``keep_ratio`` of them, in ``slots`` slots (detect-first when they outnumber the slots, as the engine runs it).

    Returns the ratios of the full generation to the pruned one in engine steps and in tokens, and, with a ``cost``,
    in modelled seconds: a step-bound engine (the fixed part dominates) gains the step ratio, a compute-bound one
    the token ratio."""
    if not 1 <= detect_length < response:
        raise ValueError(f"need 1 <= detect_length < response, got {detect_length}, {response}")
    kept = max(round(keep_ratio * rollouts), 0)
    full = schedule([response] * rollouts, slots)
    if rollouts > slots:
        pruned = schedule([detect_length] * rollouts, slots) + schedule([response - detect_length] * kept, slots)
    else:
        pruned = schedule([response] * kept + [detect_length] * (rollouts - kept), slots)
    out = {"steps": len(full) / len(pruned), "tokens": sum(full) / sum(pruned)}
    if cost is not None:
        out["seconds"] = cost.seconds(full) / cost.seconds(pruned)
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m arrol_pl.core.decode_cost``: the modelled saving for a setting (see :func:`modelled_saving`)."""
    import argparse

    p = argparse.ArgumentParser(description="What pruning at L_detect saves a generation, by the decode-cost model")
    p.add_argument("--response", type=int, required=True, help="response tokens per rollout")
    p.add_argument("--detect-length", type=int, required=True, help="L_detect")
    p.add_argument("--kappas", type=float, nargs="+", default=[0.5, 0.25], help="κ values")
    p.add_argument("--rollouts", type=int, required=True, help="B × G per engine")
    p.add_argument("--slots", type=int, required=True, help="engine.max_num_seqs (or what the KV cache holds)")
    p.add_argument("--fixed", type=float, default=None, help="seconds a step costs whatever it decodes")
    p.add_argument("--per-request", type=float, default=None, help="seconds a step costs per request it decodes")
    args = p.parse_args(argv)
    cost = None if args.fixed is None else StepCost(args.fixed, args.per_request or 0.0)
    print(
        f"response {args.response}, L_detect {args.detect_length} (1/{args.response / args.detect_length:.3g}), "
        f"{args.rollouts} rollouts in {args.slots} slots"
    )
    for kappa in args.kappas:
        saving = modelled_saving(args.response, args.detect_length, kappa, args.rollouts, args.slots, cost)
        print(f"  κ = {kappa:g}: " + ", ".join(f"{k} {v:.2f}×" for k, v in saving.items()))


if __name__ == "__main__":
    main()
