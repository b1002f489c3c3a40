"""What pruning would save a training step's generation, by the decode-cost model (:mod:`arrol_pl.core.decode_cost`),
for the policy's own lengths and the default rule's own decisions.

Decisions:
- **This machine**: the step cost (fixed + per request) fitted on the probe's own generation, then the schedule of a
  training step's B×G rollouts in ``engine.max_num_seqs`` slots (detect-first when they outnumber the slots and
  ``engine.detect_first`` is on, or, null, when the step cost models it faster), full against pruned: the
  modelled generation speedup.
- **A GPU setting** (``advise.gpu``: B and the slots): no step cost is known there, so the speedup is bracketed by
  the step ratio (a step-bound engine: a decode step costs the same whatever it decodes) and the token ratio (a
  compute-bound one).
- **Trained tokens**: the log-prob and update phases scale with the tokens trained on; their ratio is stated beside.
- The groups are the probe's, cycled to fill B prompts, with their lengths and decisions as measured.
"""

from __future__ import annotations

import torch

from arrol_pl.core.decode_cost import fit_step_cost, pruned_schedule, pruned_seconds, schedule


def training_step(lengths: torch.Tensor, pruned: torch.Tensor, prompts: int) -> tuple[list[int], list[bool]]:
    """A step's ``prompts`` groups from the probe's ``lengths, pruned: (P, G)``, cycled: flat lengths and flags."""
    rows = [i % lengths.shape[0] for i in range(prompts)]
    return lengths[rows].flatten().tolist(), pruned[rows].flatten().tolist()


def ratios(lengths: list[int], pruned: list[bool], detect_length: int, slots: int, detect_first: bool) -> dict:
    """Full against pruned generation: engine ``steps`` and decoded ``tokens``, and the ``trained`` tokens."""
    first = detect_first and len(lengths) > slots
    full, cut = schedule(lengths, slots), pruned_schedule(lengths, pruned, detect_length, slots, first)
    kept = sum(n for n, p in zip(lengths, pruned) if not p)
    return {
        "steps": len(full) / max(len(cut), 1),
        "tokens": sum(full) / max(sum(cut), 1),
        "trained": sum(lengths) / max(kept, 1),
        "detect_first": first,
    }


def savings(
    lengths: torch.Tensor,
    pruned: torch.Tensor,
    detect_length: int,
    machine: dict,
    gpu: dict,
    step_seconds: list[float],
    step_requests: list[int],
) -> dict:
    """The modelled saving of pruning to ``pruned`` (``(P, G)`` bool, with ``lengths: (P, G)``) on this machine
    (``machine``: ``prompts``, ``slots``, ``detect_first``; the step cost fitted on ``step_seconds, step_requests``)
    and on a GPU setting (``gpu``: ``prompts``, ``slots``; steps and tokens only)."""
    out = {}
    flat, flags = training_step(lengths, pruned, machine["prompts"])
    cost = fit_step_cost(step_seconds, step_requests) if step_seconds else None
    first = machine["detect_first"]
    if first is None:  # the engine's own choice: the schedule the step cost models faster, one pass without one
        first = cost is not None and pruned_seconds(cost, flat, flags, detect_length, machine["slots"], None)[1]
    here = ratios(flat, flags, detect_length, machine["slots"], first)
    if cost is not None:
        full = cost.seconds(schedule(flat, machine["slots"]))
        cut = pruned_seconds(cost, flat, flags, detect_length, machine["slots"], here["detect_first"])[0]
        here["seconds"] = full / max(cut, 1e-12)
        here["step_cost"] = {"fixed": cost.fixed, "per_request": cost.per_request}
    out["machine"] = {**machine, **here}
    flat, flags = training_step(lengths, pruned, gpu["prompts"])
    out["gpu"] = {**gpu, **ratios(flat, flags, detect_length, gpu["slots"], True)}
    return out
