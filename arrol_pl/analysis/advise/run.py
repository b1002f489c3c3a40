"""The whole of ``arrol advise``: one generation from the run's own engine settings, the head's ranking by detection
length (:mod:`.lengths`), the gradient probe against the cost-matched control at every κ
(:mod:`arrol_pl.analysis.grad_probe`), the modelled saving (:mod:`.savings`), the verdict (:mod:`.verdict`); then
``advice.json``, ``advice.md`` and ``grad_probe.json`` in the run directory.

Decisions:
- **One sampling for everything**: the head prompts' G rollouts (the cold start a run would have, fitting the head
  and its calibrator) and the batches' G + R rollouts (the controls share the group's) come from one engine; the
  AUC table re-reads their hidden states at each L with transformers, the probe reads the engine's at L_detect.
- **The budget**: ``advise.minutes`` counts from the command's start. The batches' generation is sized to half the
  time the head prompts' generation leaves, at the rate that generation ran (:func:`budget_batches`); the gradient
  batches stop when the minutes run out (never before 2), and the advice says how many it measured.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


from arrol_pl.analysis.advise.config import AdviseConfig
from arrol_pl.analysis.advise.lengths import auc_by_length
from arrol_pl.analysis.advise.savings import savings
from arrol_pl.analysis.advise.verdict import candidates, decide, tables, verdict_line
from arrol_pl.analysis.grad_probe.choice import choose
from arrol_pl.analysis.grad_probe.config import GradProbeConfig, training_problems
from arrol_pl.analysis.grad_probe.rollouts import Rollouts, sample_rollouts
from arrol_pl.analysis.grad_probe.run import GradProbeJob, _finite, load_policy, probe_rollouts
from arrol_pl.analysis.grad_probe.subsets import kappa_key


@dataclass(kw_only=True)
class AdviseJob:
    config: AdviseConfig
    out: Path
    command: str
    data: str
    """The ``data=`` preset (recorded)."""


def run_advise(job: AdviseJob) -> dict[str, Any]:
    """Measure, decide, write ``advice.json`` / ``advice.md`` / ``grad_probe.json`` under ``job.out``, print the
    advice; returns what ``advice.json`` holds."""
    from arrol_pl.train.run.build import policy_directory

    start = time.perf_counter()
    run = job.config
    policy = policy_directory(run)
    probe_cfg = run.probe(str(policy))
    head_problems, batch_problems = training_problems(probe_cfg)
    parts = probe_cfg.parts
    prompt_format = run.data.prompt_format()
    job.out.mkdir(parents=True, exist_ok=True)
    deadline = None if run.advise.minutes is None else start + 60 * run.advise.minutes

    def trim(i: int, done: list[Rollouts]) -> int:
        if i == 0 or deadline is None:
            return len(batch_problems)
        return budget_batches(done[0], deadline, parts.samples, probe_cfg) * probe_cfg.prompts_per_batch

    fitting, probe = sample_rollouts(
        policy, (head_problems, batch_problems), (probe_cfg.group_size, parts.samples), probe_cfg, prompt_format, trim
    )
    generated = time.perf_counter()
    batch_problems = batch_problems[: len(probe.response_ids) // parts.samples]
    probe_cfg = replace(probe_cfg, batches=len(batch_problems) // probe_cfg.prompts_per_batch)
    choices = choose(probe_cfg, parts, fitting, probe)
    model = load_policy(policy)
    group_rows = [p * parts.samples + s for p in range(len(batch_problems)) for s in range(parts.group.stop)]
    pad_id = _pad_id(policy)
    aucs = auc_by_length(model, fitting, probe, group_rows, run.detect_lengths, probe_cfg.settings, pad_id)
    if run.advise.minutes is not None:
        left = run.advise.minutes - (time.perf_counter() - start) / 60
        probe_cfg = replace(probe_cfg, max_minutes=max(left, 1e-3))
    probe_job = GradProbeJob(
        config=probe_cfg,
        out=job.out,
        command=job.command,
        head_problems=head_problems,
        batch_problems=batch_problems,
        heldout_problems=[],
        prompt_format=prompt_format,
        data=job.data,
    )
    result = probe_rollouts(probe_job, policy, parts, fitting, probe, None, choices, model)
    (job.out / "grad_probe.json").write_text(json.dumps(result, indent=1, allow_nan=False))

    group = parts.group
    lengths, eligible = choices.lengths[:, group], choices.eligible[:, group]
    machine = {
        "prompts": run.algo.prompts_per_step,
        "slots": run.engine.max_num_seqs,
        "detect_first": run.engine.detect_first,
    }
    gpu = {"prompts": run.advise.gpu.prompts, "slots": run.advise.gpu.slots}
    saving = {}
    for kappa in probe_cfg.keep_ratios:
        keep = choices.chosen.subsets[kappa_key(f"{choices.rules[0]}/head", kappa, probe_cfg.keep_ratio)][1]
        saving[kappa] = savings(
            lengths, ~keep & eligible, run.engine.detect_length, machine, gpu, probe.step_seconds, probe.step_requests
        )
    kappas = sorted(probe_cfg.keep_ratios)
    rows = candidates(result, kappas, probe_cfg.keep_ratio, saving)
    batches = result["settings"]["measured_batches"]
    decision = decide(rows, probe_cfg.keep_ratio, run.engine.detect_length, batches, aucs, run.pruning.gate_auc)
    advice = _finite(
        {
            "command": job.command,
            "policy_dir": str(policy),
            "data": job.data,
            "verdict": decision,
            "verdict_line": verdict_line(decision),
            "detect_lengths": aucs,
            "candidates": rows,
            "settings": {
                "group_size": probe_cfg.group_size,
                "keep_ratio": probe_cfg.keep_ratio,
                "rule": choices.rules[0],
                "detect_length": run.engine.detect_length,
                "max_response_tokens": run.algo.max_response_tokens,
                "batches": batches,
                "prompts_per_batch": probe_cfg.prompts_per_batch,
                "head_prompts": probe_cfg.head_prompts,
                "reference_rollouts": probe_cfg.reference_rollouts,
                "mean_length": choices.mean_length,
            },
            "seconds": {"generation": generated - start, "total": time.perf_counter() - start},
        }
    )
    (job.out / "advice.json").write_text(json.dumps(advice, indent=1, allow_nan=False, ensure_ascii=False) + "\n")
    text = advice_text(advice)
    (job.out / "advice.md").write_text(text + "\n")
    print(text)
    print(f"outputs: {job.out / 'advice.md'}, advice.json, grad_probe.json")
    return advice


GENERATION_SHARE = 0.5
"""The share of the time left after the head prompts' generation that the batches' generation may take: the rest
reads the hidden states and takes the gradients."""


def budget_batches(fitting: Rollouts, deadline: float, samples: int, cfg: GradProbeConfig) -> int:
    """The batches whose generation fits :data:`GENERATION_SHARE` of the time left before ``deadline``, at the rate
    the head prompts' generation ran (``fitting``: tokens per second, tokens per rollout), at least 2 and at most
    ``cfg.batches``."""
    tokens = sum(len(r) for r in fitting.response_ids)
    rate = tokens / max(fitting.seconds, 1e-9)
    per_batch = cfg.prompts_per_batch * samples * max(tokens / max(len(fitting.response_ids), 1), 1.0) / rate
    left = deadline - time.perf_counter()
    return max(2, min(cfg.batches, int(GENERATION_SHARE * left / per_batch)))


def advice_text(advice: dict[str, Any]) -> str:
    """``advice.md``: the verdict, why, what was measured, the two tables."""
    s, v = advice["settings"], advice["verdict"]
    return "\n".join(
        [
            "# Will pruning pay?",
            "",
            f"**{advice['verdict_line']}**",
            "",
            *(f"- {reason}" for reason in v["why"]),
            "",
            f"Measured on `{advice['command']}`: G = {s['group_size']}, run κ = {s['keep_ratio']:g}, rule {s['rule']}, "
            f"L_detect = {s['detect_length']} of {s['max_response_tokens']} tokens "
            f"(mean length {s['mean_length']:.1f}); "
            f"head fit on {s['head_prompts']} prompts; gradient probe over {s['batches']} batches × "
            f"{s['prompts_per_batch']} prompts against R = {s['reference_rollouts']} reference rollouts each; "
            f"{advice['seconds']['total'] / 60:.1f} min.",
            "",
            *tables(advice["candidates"], advice["detect_lengths"]),
        ]
    )


def _pad_id(policy: Path) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
