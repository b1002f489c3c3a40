"""Finishing a run: the summary's arithmetic over the history (:func:`summarise`), the exported policy with its
head and calibrator (:func:`export_policy`), its model card (:func:`write_run_card`), both written whole
(:func:`export_run`), its push to the hub (:func:`push_export`), and the exception a stopped run ends with
(:class:`RunInterrupted`).

Decisions:
- **An export is whole or absent.** It is written beside ``export/`` and renamed into place once complete, so a
  crash, a ``kill -9`` or a full disk during it never leaves a directory that looks like an export and is not one.
- **The hub repository is the export.** ``trainer.push_to_hub`` pushes ``export/`` whole, in one commit, as a model
  repository: the policy and tokenizer at its root (``AutoModelForCausalLM.from_pretrained(repo id)``), the head in
  ``quality_head/``, the run's card as ``README.md``. What the push expects is checked first (:func:`hub_files`);
  a push that fails keeps the export and names the command that pushes it again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import signal
from pathlib import Path
from typing import Any


from arrol_pl.core.screen_audit import audit_totals
from arrol_pl.models.head import HEAD_FOLDER, save_head
from arrol_pl.tasks.prompts import DATA_RECORD
from arrol_pl.train.config.run import RunConfig
from arrol_pl.train.policy.update import POLICY_SUMMARY
from arrol_pl.train.records.rundir import RecordWriteError, resume_command, write_rows, writing
from arrol_pl.train.records.summary import RunSummary, values_from
from arrol_pl.train.run.console import weight_bars_off
from arrol_pl.train.step.context import PhaseTimer


SUMMARY_PHASES = (*PhaseTimer.PHASES, "step")
"""The phases ``summary.json``'s ``seconds_per_phase`` holds: every timed phase, then the whole step."""


def mean_after(history: list[dict[str, float]], key: str, start: int) -> float | None:
    values = values_from(history, key, start)
    return sum(values) / len(values) if values else None


def majority_floor(history: list[dict[str, float]], start: int) -> float | None:
    """Mean over the steps from ``start`` where the head was scored of max(acc, 1 − acc) of the step's
    survivors: the accuracy of always answering the step's more common label."""
    values = [
        max(h["reward/accuracy"], 1 - h["reward/accuracy"])
        for h in history[start:]
        if "head/accuracy" in h and "reward/accuracy" in h
    ]
    return sum(values) / len(values) if values else None


def screen_summary(history: list[dict[str, float]], start: int = 0) -> dict[str, Any]:
    """Per screen stage that ran: its audit counts summed over the run and the precisions they give; and
    ``cost_share``, the screen's mean share of the step from ``start`` on: the prompt stage's seconds plus the
    generation seconds of the groups the detect stage dropped (by their share of the generated tokens)."""
    out: dict[str, Any] = {}
    for stage in ("prompt", "detect"):
        if any(f"screen/{stage}_audit_audited" in h for h in history):
            totals = audit_totals(history, stage)
            out[stage] = {
                **dataclasses.asdict(totals),
                **{k: None if math.isnan(v) else v for k, v in totals.precisions().items()},
            }
    shares = [
        (
            h.get("time/screen", 0.0)
            + h.get("time/generation", 0.0)
            * h.get("screen/tokens_dropped_groups", 0.0)
            / max(h.get("tokens/generated", 0.0), 1.0)
        )
        / h["time/step"]
        for h in history[start:]
        if "screen/groups_generated" in h and h.get("time/step")
    ]
    if shares:
        out["cost_share"] = sum(shares) / len(shares)
    return out


def summarise(
    run: RunConfig, history: list[dict[str, float]], before, after, wall: float, **outcome: Any
) -> RunSummary:
    """The run's :class:`RunSummary` from its history and held-out results; ``outcome``: the remaining fields
    (status, checkpoint, directories, ...)."""
    start = run.pruning.cold_start_steps  # a run that never left its cold start has no figures after it: None
    return RunSummary(
        name=run.name,
        heldout_accuracy_before=before.accuracy if before else None,
        heldout_accuracy_after=after.accuracy if after else None,
        heldout_greedy_accuracy_before=before.greedy_accuracy if before else None,
        heldout_greedy_accuracy_after=after.greedy_accuracy if after else None,
        heldout_accuracy_se_before=before.accuracy_se if before else None,
        heldout_accuracy_se_after=after.accuracy_se if after else None,
        heldout_problems=after.problems if after else 0,
        heldout_samples=after.samples if after else 0,
        heldout_per_problem_after=list(after.per_problem) if after else [],
        heldout_per_problem_before=list(before.per_problem) if before else [],
        train_accuracy_first=history[0].get("reward/accuracy") if history else None,
        train_accuracy_last10=mean_after(history, "reward/accuracy", max(len(history) - 10, 0)),
        keep_ratio_target=run.pruning.keep_ratio if run.pruning.policy != "none" else 1.0,
        keep_ratio_mean=mean_after(history, "pruning/keep_ratio", start),
        pruning_active_fraction=mean_after(history, "pruning/active", start),
        head_accuracy_after_cold_start=mean_after(history, "head/accuracy", start),
        head_majority_after_cold_start=majority_floor(history, start),
        head_auc_after_cold_start=mean_after(history, "head/auc", start),
        scorer_auc_after_cold_start=mean_after(history, "scorer/auc", start),
        scorer_within_auc_after_cold_start=mean_after(history, "scorer/within_auc", start),
        scorer_within_auc_survivors_after_cold_start=mean_after(history, "scorer/within_auc_survivors", start),
        head_within_auc_after_cold_start=mean_after(history, "head/within_auc", start),
        head_spearman_after_cold_start=mean_after(history, "head/spearman", start),
        head_calibration_error_after_cold_start=mean_after(history, "head/calibration_error", start),
        positive_ratio_mean=mean_after(history, "balance/positive_ratio", start),
        rho_1_minus_rho_mean=mean_after(history, "balance/rho_1_minus_rho", start),
        zero_advantage_fraction=mean_after(history, "balance/zero_advantage_fraction", start),
        screen=screen_summary(history, start),
        refill={k: mean_after(history, f"refill/{k}", 0) for k in ("rounds", "short", "informative_groups")}
        if any("refill/rounds" in h for h in history)
        else {},
        seconds_per_phase={p: mean_after(history, f"time/{p}", start) for p in SUMMARY_PHASES},
        seconds_per_step=mean_after(history, "time/step", start),
        policy={k: mean_after(history, f"policy/{k}", 0) for k in POLICY_SUMMARY},
        steps=len(history),
        wall_seconds=wall,
        training_seconds=history[-1].get("time/wall") if history else None,
        credited_seconds=sum(h["time/credit"] for h in history if "time/credit" in h)
        if any("time/credit" in h for h in history)
        else None,
        **outcome,
        config=dataclasses.asdict(run),
    )


def export_policy(module, tokenizer, out_dir: Path, prompt_format=None, data=None) -> Path:
    """A transformers directory plus the head and the calibrator, the prompt format the policy was trained in
    (``prompt_format.json``: evaluation uses it unless a dataset sets its own) and the run's ``data:`` section
    (:data:`~arrol_pl.tasks.prompts.DATA_RECORD`: what evaluation scores unless told). The head and calibrator go
    on the hub's terms into ``quality_head/`` (:func:`~arrol_pl.models.head.save_head`: safetensors, a config JSON
    and a card), which the evaluation and the probe read (:func:`~arrol_pl.models.head.load_head`). Several ranks:
    the sharded policy is gathered tensor by tensor into rank 0's host memory (the other ranks hold one tensor at a
    time on their device, not the whole policy), and rank 0 writes."""

    if not module.ranks.alone:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(module.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if module.ranks.rank:
            return out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        with weight_bars_off():
            module.policy.save_pretrained(out_dir, state_dict=full, safe_serialization=True)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        with weight_bars_off():
            module.policy.save_pretrained(out_dir, safe_serialization=True)
    if prompt_format is not None:
        prompt_format.save(out_dir)
    if data is not None:  # its files by absolute path: the run read them from its working directory
        record = dataclasses.asdict(data)
        record.update({key: str(Path(record[key]).absolute()) for key in ("path", "heldout_path") if record[key]})
        (out_dir / DATA_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    tokenizer.save_pretrained(out_dir)
    save_head(module.head, module.calibrator, out_dir / HEAD_FOLDER)
    return out_dir


def export_run(module, tokenizer, export_dir: Path, run: RunConfig, before, after) -> Path:
    """``export_dir`` whole or not at all: the policy with its head (:func:`export_policy`) and its card
    (:func:`write_run_card`) written into ``.<name>.partial`` beside it, then renamed into place, replacing an earlier
    export (a resumed run's); an error removes the partial copy, and one a killed run left is removed first.
    ``before``, ``after``: the held-out results (or None)."""
    export_dir = Path(export_dir)
    partial = export_dir.with_name(f".{export_dir.name}.partial")
    writer = module.ranks.rank == 0
    if writer:
        shutil.rmtree(partial, ignore_errors=True)
    try:
        export_policy(module, tokenizer, partial, run.data.prompt_format(), run.data)
        if writer:
            write_run_card(partial, run, len(module.history), before, after)
    except BaseException:
        if writer:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    if writer:
        if export_dir.exists():
            old = export_dir.with_name(f".{export_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            export_dir.rename(old)
            partial.rename(export_dir)
            shutil.rmtree(old)
        else:
            partial.rename(export_dir)
    return export_dir


HUB_FILES = {
    "config.json": "the policy's config",
    "model.safetensors": "the policy's weights (or model.safetensors.index.json and its shards)",
    "tokenizer_config.json": "the tokenizer",
    "README.md": "the run's card",
    f"{HEAD_FOLDER}/config.json": "the quality head's config and calibrator",
    f"{HEAD_FOLDER}/model.safetensors": "the quality head's weights",
}
"""What a pushed export must hold, by its path in the model repository (the same as in ``export/``)."""


def hub_files(export_dir: Path) -> dict[str, Path]:
    """Every file of ``export_dir`` (hidden ones aside) by its path in the model repository; ValueError naming what
    of :data:`HUB_FILES` is missing (sharded weights stand for ``model.safetensors``)."""
    export_dir = Path(export_dir)
    files = {
        p.relative_to(export_dir).as_posix(): p
        for p in sorted(export_dir.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(export_dir).parts)
    }
    sharded = "model.safetensors.index.json" in files
    missing = [
        f"{name} ({what})"
        for name, what in HUB_FILES.items()
        if name not in files and not (sharded and name == "model.safetensors")
    ]
    if missing:
        raise ValueError(f"{export_dir} is not a whole export: it lacks {', '.join(missing)}")
    return files


def push_export(export_dir: Path, repo_id: str, api=None) -> str:
    """Push ``export_dir`` to the hub model repository ``repo_id`` in one commit (created if missing), with ``api``
    (an ``huggingface_hub.HfApi``; the default one, logged in with the user's token); returns the repository's URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    files = hub_files(export_dir)
    api = HfApi() if api is None else api
    try:
        url = api.create_repo(repo_id, repo_type="model", exist_ok=True)
        api.create_commit(
            repo_id,
            [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(path)) for name, path in files.items()],
            commit_message="arrol-pl: the trained policy, its quality head and the run's card",
            repo_type="model",
        )
    except Exception as exc:  # network, token, permissions: the export stays, and how to push it again is named
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RuntimeError(
            f"trainer.push_to_hub={repo_id}: the push failed ({reason}); the export is kept in "
            f"{export_dir}: push it with `hf upload {repo_id} {export_dir} .`"
        ) from exc
    return str(url)


def write_run_card(export_dir: Path, run: RunConfig, steps: int, before, after) -> Path:
    """``export/README.md``: the model card of the exported policy and head: what trained it, the held-out accuracy
    before and after (``before``, ``after``: held-out results or None), the files and how to load them (from the
    hub repository ``trainer.push_to_hub`` when set)."""
    p, a = run.pruning, run.algo
    repo = run.trainer.push_to_hub  # pushed: the policy loads from the repository, the head from its download
    policy_at, head_at, fetch = (
        ('"export"', f'"export/{HEAD_FOLDER}"', "")
        if repo is None
        else (
            f'"{repo}"',
            f'f"{{local}}/{HEAD_FOLDER}"',
            f'from huggingface_hub import snapshot_download\n\nlocal = snapshot_download("{repo}")\n',
        )
    )
    policy = run.model.path or run.model.pretrained or "the tiny local policy (arrol-pl's default)"
    accuracy = (
        ""
        if before is None or after is None
        else f"\nHeld-out accuracy (avg@{after.samples}, T = {a.temperature}, {after.problems} problems): "
        f"{before.accuracy:.3f} before training, {after.accuracy:.3f} after; greedy "
        f"{before.greedy_accuracy:.3f} → {after.greedy_accuracy:.3f}.\n"
    )
    pruning = (
        "no pruning"
        if p.policy == "none"
        else (
            f"ARRoL's pruning (pruning.policy={p.policy}) at L_detect = {run.engine.detect_length} tokens, κ = "
            f"{p.keep_ratio}"
        )
    )
    card = f"""---
library_name: transformers
tags:
- arrol
- rlvr
- {a.name}
---

# {run.name}

{policy} trained by arrol-pl with {a.name.upper()} and {pruning} ({steps} steps, B = {a.prompts_per_step} prompts ×
G = {a.group_size} rollouts, data {run.data.name}, reward {run.reward.function}).
{accuracy}
## Files

- the policy: a transformers directory (`config.json`, `model.safetensors`, the tokenizer), `prompt_format.json`,
  the prompt format it was trained in, and `{DATA_RECORD}`, the data it was trained on and held out;
- `{HEAD_FOLDER}/`: the quality head and its calibrator (safetensors, `config.json`, a card of its own), which
  `arrol evaluate checkpoint=<the export>` scores each completion with.

## Load

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
from arrol_pl.models.head import CalibratedHead
{fetch}
policy = AutoModelForCausalLM.from_pretrained({policy_at})
tokenizer = AutoTokenizer.from_pretrained({policy_at})
head = CalibratedHead.from_pretrained({head_at})   # head(features) logits, head.posterior(features)
```

The run's whole configuration is in its `summary.json` and `.hydra/config.yaml`.
"""
    path = Path(export_dir) / "README.md"
    path.write_text(card)
    return path


class RunInterrupted(Exception):
    """Training stopped on a signal; the checkpoint, history and summary (``status: interrupted``) are written, or
    the record that could not be (``failed``, a :class:`~arrol_pl.train.records.rundir.RecordWriteError`: the
    checkpoint to resume from is then the last good one)."""

    def __init__(
        self, signum: int, summary: RunSummary, phase: str | None = None, failed: RecordWriteError | None = None
    ) -> None:
        self.signum, self.summary = signum, summary
        ckpt = summary.checkpoint
        resume = f"resume with {resume_command(ckpt)}" if ckpt else "no checkpoint to resume from"
        where = f" in {phase}" if phase else ""  # a phase stopped at once, keeping nothing of it
        write = f"{failed.failed}; " if failed is not None else ""
        super().__init__(f"{signal.Signals(signum).name}: stopped{where} after {summary.steps} steps; {write}{resume}")


def write_outcome(
    run: RunConfig,
    out_dir: Path,
    summary: RunSummary,
    history: list[dict[str, float]],
    rank: int,
    last_good: Path | None = None,
) -> RecordWriteError | None:
    """Rank 0 writes the whole ``history.jsonl`` (every rank holds the same, global, history: written as the run
    went, once more whole, with the final held-out evaluation on the last row), then ``summary.json``. Returns the
    first write that failed (a :class:`~arrol_pl.train.records.rundir.RecordWriteError` naming ``last_good``; None:
    none), after which the summary is still written, marked failed with it unless the run had ended otherwise."""
    if rank != 0:
        return None
    failed = None
    try:
        with writing("history", out_dir / "history.jsonl", last_good):
            write_rows(out_dir / "history.jsonl", history)
    except RecordWriteError as exc:
        failed = exc
        if summary.status == "completed":
            summary.status = "failed"
        summary.error = summary.error or str(exc)
    try:
        with writing("summary", out_dir / "summary.json", last_good):
            summary.write(out_dir)
    except RecordWriteError as exc:
        failed = failed or exc
    return failed
