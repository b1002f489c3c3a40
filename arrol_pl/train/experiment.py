"""Build and run one experiment from a validated :class:`RunConfig`: data → policy → engine → Lightning.

``run_experiment`` is what ``experiments/run.py`` calls (and what the tests call): it writes TensorBoard
events, checkpoints, an exported policy + head, ``history.jsonl`` and ``summary.json`` into the output
directory.

Faults (docs/guide.md, "When things go wrong"): every key, the data sizes, the checkpoint to resume and the
output directory are checked by :func:`preflight` before the output directory or any model exists; SIGINT /
SIGTERM stop after the step in flight with a checkpoint, the history and a summary marked ``interrupted``
(:class:`RunInterrupted`); a checkpoint that cannot be written stops the run the same way, naming the
last good one (:class:`~arrol_pl.train.checkpoint.CheckpointWriteError`).

Decisions:
- **One run per directory.** A directory that holds a run's files (:func:`run_files`) takes only that run's
  continuation, ``trainer.resume=<dir>/checkpoints/last.ckpt``; anything else is refused by
  :func:`check_output_dir` before anything is read or written there. Resuming from one of the directory's
  older step checkpoints is refused too: the steps after it would be dropped with the later checkpoints
  that hold them; a branch from there goes to a new directory.
- **The history lives in the run directory.** Each step's row is appended to ``history.jsonl`` as the step
  ends (:class:`~arrol_pl.train.callbacks.HistoryFile`), not stored in checkpoints. A resumed run starts from
  the rows before its checkpoint's step, read from the ``history.jsonl`` of the run that wrote the checkpoint
  (:func:`history_before`): rows of steps finished after that checkpoint are dropped, so a resume into its
  own directory repeats them once. TensorBoard continues in ``tb/``: the resumed session's event file
  starts with a purge at the checkpoint's step, so TensorBoard hides the earlier session's events from that
  step on (no step twice).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import signal
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from arrol_pl.train.rundir import check_output_dir, history_before, write_rows
from arrol_pl.train.config import ConfigError, RunConfig, prompts_drawn_per_step
from arrol_pl.train.phases import POLICY_SUMMARY
from arrol_pl.train.screening import audit_totals
from arrol_pl.train.summary import RunSummary, values_from

logger = logging.getLogger(__name__)

SUMMARY_PHASES = ("screen", "generation", "reward", "old_logprob", "ref_logprob", "update", "head", "optimizer", "sync", "step")


def load_splits(run: RunConfig) -> tuple:
    """Training and held-out ProblemSets; bad rows are skipped, counted and logged with their ids by the adapters."""
    from arrol_pl.tasks.registry import load_data

    return load_data(run.data)


def policy_directory(run: RunConfig) -> Path:
    if run.model.pretrained == "smollm2":
        from arrol_pl.models.smollm2 import prepare_smollm2

        return prepare_smollm2(run.model.cache_dir)
    if run.model.path is not None:
        from arrol_pl.models import hub

        path = hub.snapshot(run.model.path) if hub.is_hub_id(run.model.path) else Path(run.model.path)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model.path={run.model.path!r} is not a transformers model directory (no config.json)")
        return path
    from arrol_pl.train.warmstart import prepare_tiny_policy

    return prepare_tiny_policy(run.model, run.data, run.algo.max_response_tokens, run.trainer.seed)


def check_trainable_layers(run: RunConfig, policy_dir: Path) -> None:
    """``model.trainable_layers`` against the policy's depth (its config.json), before any weights load."""
    wanted = run.model.trainable_layers
    layers = json.loads((policy_dir / "config.json").read_text()).get("num_hidden_layers")
    if wanted is not None and layers is not None and wanted > layers:
        raise ConfigError(f"model.trainable_layers={wanted}: the policy in {policy_dir} has {layers} decoder layers")


def context_length(tokenizer, problems: list, max_response_tokens: int) -> int:
    longest = max(len(tokenizer.encode(p.prompt, add_special_tokens=False)) for p in problems)
    return int(math.ceil((longest + max_response_tokens + 1) / 64) * 64)


def build_engine(run: RunConfig, policy_dir: Path, tokenizer, problems: list):
    """The rollout engine of ``run`` on ``policy_dir``; its context fits the longest of ``problems``. With several
    ranks it joins their world (every rank builds its own, at the same point)."""
    from arrol_pl.engine import ArrolEngine

    e = run.engine
    return ArrolEngine(
        str(policy_dir),
        dataclasses.replace(e, max_model_len=e.max_model_len or context_length(tokenizer, problems,
                                                                             run.algo.max_response_tokens)),
        seed=run.trainer.seed, head_input=run.head.input, head_hidden_dim=run.head.hidden_dim,
        logprobs_mode="processed_logprobs",  # what the trainer compares its own against: T-scaled log-probs
        join_launcher_world=run.trainer.ranks > 1,
    )


def lightning_strategy(t):
    """``trainer.strategy`` as Lightning's: with several ranks ``fsdp`` is FSDP2, ``ModelParallelStrategy`` (CPU
    and CUDA; ``FSDPStrategy`` refuses a CPU accelerator), checkpointing full state dicts from rank 0."""
    if t.ranks == 1:
        return t.strategy
    from lightning.pytorch.strategies import ModelParallelStrategy

    from arrol_pl.train.distributed import rank_timeout

    # The timeout counts where Lightning creates the group itself; it reuses the one init_launcher_world made.
    return ModelParallelStrategy(data_parallel_size=t.ranks, tensor_parallel_size=1, save_distributed_checkpoint=False,
                                 timeout=rank_timeout(t))


def mean_after(history: list[dict[str, float]], key: str, start: int) -> float | None:
    values = values_from(history, key, start)
    return sum(values) / len(values) if values else None


def majority_floor(history: list[dict[str, float]], start: int) -> float | None:
    """Mean over the steps from ``start`` where the head was scored of max(acc, 1 − acc) of the step's
    survivors: the accuracy of always answering the step's more common label."""
    values = [max(h["reward/accuracy"], 1 - h["reward/accuracy"]) for h in history[start:]
              if "head/accuracy" in h and "reward/accuracy" in h]
    return sum(values) / len(values) if values else None


def screen_summary(history: list[dict[str, float]], start: int = 0) -> dict[str, Any]:
    """Per screen stage that ran: its audit counts summed over the run and the precisions they give; and
    ``cost_share``, the screen's mean share of the step from ``start`` on: the prompt stage's seconds plus the
    generation seconds of the groups the detect stage dropped (by their share of the generated tokens)."""
    out: dict[str, Any] = {}
    for stage in ("prompt", "detect"):
        if any(f"screen/{stage}_audit_audited" in h for h in history):
            totals = audit_totals(history, stage)
            out[stage] = {**dataclasses.asdict(totals),
                          **{k: None if math.isnan(v) else v for k, v in totals.precisions().items()}}
    shares = [(h.get("time/screen", 0.0) + h.get("time/generation", 0.0) * h.get("screen/tokens_dropped_groups", 0.0)
               / max(h.get("tokens/generated", 0.0), 1.0)) / h["time/step"]
              for h in history[start:] if "screen/groups_generated" in h and h.get("time/step")]
    if shares:
        out["cost_share"] = sum(shares) / len(shares)
    return out


def summarise(run: RunConfig, history: list[dict[str, float]], before, after, wall: float,
              **outcome: Any) -> RunSummary:
    """The run's :class:`RunSummary` from its history and held-out results; ``outcome``: the remaining fields
    (status, checkpoint, directories, ...)."""
    start = min(run.pruning.cold_start_steps, max(len(history) - 1, 0))
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
        head_within_auc_after_cold_start=mean_after(history, "head/within_auc", start),
        head_spearman_after_cold_start=mean_after(history, "head/spearman", start),
        head_calibration_error_after_cold_start=mean_after(history, "head/calibration_error", start),
        positive_ratio_mean=mean_after(history, "balance/positive_ratio", start),
        rho_1_minus_rho_mean=mean_after(history, "balance/rho_1_minus_rho", start),
        zero_advantage_fraction=mean_after(history, "balance/zero_advantage_fraction", start),
        screen=screen_summary(history, start),
        refill={k: mean_after(history, f"refill/{k}", 0) for k in ("rounds", "short", "informative_groups")}
        if any("refill/rounds" in h for h in history) else {},
        seconds_per_phase={p: mean_after(history, f"time/{p}", start) for p in SUMMARY_PHASES},
        seconds_per_step=mean_after(history, "time/step", start),
        policy={k: mean_after(history, f"policy/{k}", 0) for k in POLICY_SUMMARY},
        steps=len(history),
        wall_seconds=wall,
        **outcome,
        config=dataclasses.asdict(run),
    )


def export_policy(module, tokenizer, out_dir: Path, prompt_format=None) -> Path:
    """A transformers directory plus the head's weights, the calibrator and the prompt format the policy
    was trained in (``prompt_format.json``: evaluation uses it unless a dataset sets its own). Several ranks:
    the sharded policy is gathered tensor by tensor into rank 0's host memory (the other ranks hold one tensor at a
    time on their device, not the whole policy), and rank 0 writes."""
    if not module.ranks.alone:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(module.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if module.ranks.rank:
            return out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        module.policy.save_pretrained(out_dir, state_dict=full, safe_serialization=True)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        module.policy.save_pretrained(out_dir, safe_serialization=True)
    if prompt_format is not None:
        prompt_format.save(out_dir)
    tokenizer.save_pretrained(out_dir)
    module.head.save(out_dir / "quality_head.pt")
    torch.save(module.calibrator.state_dict(), out_dir / "calibrator.pt")
    return out_dir


class RunInterrupted(Exception):
    """Training stopped on a signal; the checkpoint, history and summary (``status: interrupted``) are written."""

    def __init__(self, signum: int, summary: RunSummary) -> None:
        self.signum, self.summary = signum, summary
        ckpt = summary.checkpoint
        resume = f"resume with trainer.resume={ckpt}" if ckpt else "no checkpoint to resume from"
        super().__init__(f"{signal.Signals(signum).name}: stopped after {summary.steps} steps; {resume}")


def effective_keep_ratio(run: RunConfig) -> float:
    """The keep ratio the per-group floor allows: at least ``min(floor, G) / G`` of each group survives."""
    p, g = run.pruning, run.algo.group_size
    if p.policy == "none":
        return 1.0
    return max(p.keep_ratio, min(p.min_keep_per_group, g) / g)


def report_pruning_floor(run: RunConfig) -> None:
    """Say at start what the floor does to κ; such configs are legal but easy to misread."""
    p, g = run.pruning, run.algo.group_size
    if p.policy == "none":
        return
    floor = min(p.min_keep_per_group, g)
    if floor == g:
        logger.warning("pruning.min_keep_per_group=%d >= algo.group_size=%d: every rollout survives, pruning is "
                       "disabled (effective κ = 1)", p.min_keep_per_group, g)
    elif floor / g > p.keep_ratio:
        logger.warning("pruning.min_keep_per_group=%d of algo.group_size=%d keeps at least %.3f of each group: "
                       "effective κ = %.3f, not pruning.keep_ratio=%.3f", floor, g, floor / g, floor / g, p.keep_ratio)
    if floor < 2:
        logger.warning("pruning.min_keep_per_group=%d: groups left with fewer than 2 survivors carry no advantage, "
                       "and a step whose rollouts are all pruned is skipped (counted as skipped/no_survivors)", floor)


def preflight(run: RunConfig, out_dir: Path | None = None) -> tuple[list, list, dict | None]:
    """Checks that need the data or the file system, before the output directory or any model exists: a GPU
    run's memory plan (:func:`~arrol_pl.train.memory_check.check_memory`), the checkpoint to resume, the output directory (``out_dir``, checked
    by :func:`check_output_dir`; None: not checked) and the data.

    Returns the training and held-out problems and the checkpoint to resume (memory-mapped, read with
    ``weights_only=True``) or None.
    """
    from arrol_pl.train.checkpoint import read_checkpoint
    from arrol_pl.train.data import check_fits, check_stream, stream_identity

    from arrol_pl.train.memory_check import check_memory

    check_memory(run)
    ckpt = read_checkpoint(run.trainer.resume) if run.trainer.resume is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, run.trainer.resume, ckpt)
    if ckpt is not None:
        saved = ckpt["arrol"].get("config", {})
        for section in ("model", "data"):
            for key, value in dataclasses.asdict(getattr(run, section)).items():
                was = saved.get(section, {}).get(key, value)
                if key not in ("cache_dir", "num_heldout", "activation_checkpointing") and was != value:
                    raise ConfigError(f"trainer.resume: the checkpoint was trained with {section}.{key}={was!r}, "
                                      f"this run sets {value!r}")
    train, heldout = load_splits(run)
    drawn = prompts_drawn_per_step(run)
    check_fits(len(train), drawn)
    if ckpt is not None:
        check_stream(ckpt["PromptDataModule"], stream_identity(train, drawn, run.trainer.seed))
    report_pruning_floor(run)
    return train, heldout, ckpt


def run_experiment(run: RunConfig, out_dir: Path, engine=None, overrides: list[str] | None = None,
                   accepted: Callable[[], None] | None = None) -> RunSummary:
    """Train per ``run``; returns (and writes) the summary. ``engine`` may be passed to share one (tests);
    ``overrides`` (the command line's) are recorded so sweep tables can name their rows; ``accepted`` is called
    once every check has passed, before anything is written (``run.py`` writes Hydra's record then).

    Raises :class:`~arrol_pl.train.config.ConfigError` before anything is written (an ``out_dir`` holding
    another run's files included), :class:`RunInterrupted` after a signal, and
    :class:`~arrol_pl.train.checkpoint.CheckpointWriteError` after a failed checkpoint write or any other exception
    the run raised, each once the history and a summary (``status`` interrupted or failed, ``error``) are written.
    """
    import lightning as L
    from transformers import AutoTokenizer

    from arrol_pl.tasks.prompts import render_problems
    from arrol_pl.tasks.reward import MathReward, RewardConfig
    from arrol_pl.train.callbacks import FinalEvaluation, HistoryFile, RunCheckpoints, StepProgressBar
    from arrol_pl.train.checkpoint import AtomicCheckpointIO, CheckpointWriteError
    from arrol_pl.train.loggers import make_logger
    from arrol_pl.train.data import PromptDataModule
    from arrol_pl.train.module import ArrolModule, HeldoutEvaluation
    from arrol_pl.train.distributed import RankSync
    from arrol_pl.train.heldout import HeldoutResult, evaluate_heldout

    t0 = time.perf_counter()
    L.seed_everything(run.trainer.seed, workers=True, verbose=False)
    train, heldout, resume = preflight(run, out_dir)
    if accepted is not None:
        accepted()
    resumed_rows = history_before(run.trainer.resume, resume) if resume is not None else []
    resumed_step = int(resume["global_step"]) if resume is not None else None
    rank = 0
    if run.trainer.ranks > 1:  # the world exists before the engines join it (docs/distributed.md)
        from arrol_pl.train.distributed import init_launcher_world

        rank = init_launcher_world(run.trainer)
    data_rows = {"train": train.report(), "heldout": heldout.report()}  # skipped rows per reason
    out_dir.mkdir(parents=True, exist_ok=True)
    t, a = run.trainer, run.algo
    stop = RunCheckpoints(out_dir / "checkpoints", t.checkpoint_every,
                          None if t.max_minutes is None else 60.0 * t.max_minutes, t.keep_checkpoints)
    io = AtomicCheckpointIO(last_good=Path(t.resume) if t.resume else None)
    status, failure, before, after, export_dir, fit_wall = "completed", None, None, None, None, 0.0
    owns_engine = engine is None
    reward = None
    module = None
    try:
        with stop:
            from arrol_pl.train.distributed import load_on_rank0, rank_zero_first

            policy_dir = rank_zero_first(lambda: policy_directory(run))  # several ranks: built once
            check_trainable_layers(run, policy_dir)
            tokenizer = AutoTokenizer.from_pretrained(policy_dir)
            fmt = run.data.prompt_format()
            train, heldout = render_problems(train, tokenizer, fmt), render_problems(heldout, tokenizer, fmt)
            if owns_engine:
                engine = build_engine(run, policy_dir, tokenizer, train + heldout)
            # several ranks: rank 0 loads, the others start on the meta device (ArrolModule.configure_model)
            policy = load_on_rank0(policy_dir, torch.float32)
            reference = load_on_rank0(policy_dir, getattr(torch, run.model.reference_dtype)) if a.kl_coef > 0 else None
            reward = MathReward(RewardConfig(
                num_workers=t.reward_workers,
                overlong_max_length=a.max_response_tokens if a.overlong_cache_length else None,
                overlong_cache_length=a.overlong_cache_length,
            ))
            # Preparing the policy (a warm start when its cache is cold) draws random numbers: reseed here so
            # the run itself does not depend on whether the cache existed.
            L.seed_everything(t.seed, workers=True, verbose=False)
            module = ArrolModule(run, policy, engine, reward, tokenizer.pad_token_id, reference)
            module.history = resumed_rows
            if a.dynamic_sampling_refill:
                from arrol_pl.train.refill import Refiller

                module.refiller = Refiller(engine, reward, train, run)
            engine.sync_weights(None, module.head.state_dict())
            evaluate = (lambda: evaluate_heldout(engine, reward, heldout, t.eval_samples, a.temperature,
                                                 a.max_response_tokens, fmt.stop, seed=t.eval_seed,
                                                 ranks=RankSync(), chunk=t.eval_chunk)
                        ) if heldout else (lambda: None)  # every rank's engine evaluates its chunks
            saved_before = resume["arrol"].get("heldout_before") if resume else None
            before = HeldoutResult(**saved_before) if saved_before else evaluate()
            module.run_info = {"policy_dir": str(Path(policy_dir).resolve()),
                               "heldout_before": dataclasses.asdict(before) if before else None}
            resume = None  # the trainer reads the checkpoint itself; drop the memory map
            # Batches are lists of Problems (text for the engine): the module's transfer hook keeps them as they are.
            warnings.filterwarnings("ignore", message="You have overridden `transfer_batch_to_device`")
            heldout_every = [HeldoutEvaluation(t.eval_every, evaluate)] if t.eval_every and heldout else []
            final = FinalEvaluation(evaluate, lambda: stop.requested)
            trainer = L.Trainer(
                max_steps=t.max_steps, accelerator=t.accelerator, devices=t.devices, strategy=lightning_strategy(t),
                num_nodes=t.num_nodes, use_distributed_sampler=False,  # every rank takes its share of the step's B
                precision=t.precision,
                logger=make_logger(t.logger, out_dir, run.name, resumed_step),
                # HistoryFile after the held-out evaluation (it completes the step's row), before the checkpoint
                callbacks=[*heldout_every, HistoryFile(out_dir / "history.jsonl"), stop, final, StepProgressBar()],
                plugins=[io], enable_checkpointing=False,  # RunCheckpoints writes them all
                log_every_n_steps=t.log_every, num_sanity_val_steps=0,
                limit_val_batches=0, enable_model_summary=False, default_root_dir=str(out_dir),
            )
            fit_start = time.perf_counter()
            if not stop.requested:
                trainer.fit(module, datamodule=PromptDataModule(train, prompts_drawn_per_step(run), t.seed,
                                                                t.max_steps),
                            ckpt_path=t.resume, weights_only=True)
            fit_wall = time.perf_counter() - fit_start - final.seconds
            if not stop.requested:
                final.run(module)  # done in on_train_end unless the fit had no step left to run
                after = final.result  # the last point of the held-out curve
                export_dir = export_policy(module, tokenizer, out_dir / "export", run.data.prompt_format())
    except CheckpointWriteError as exc:
        status, failure = "failed", exc
    except (KeyboardInterrupt, SystemExit):
        # Lightning turns the second Ctrl-C into SystemExit, and SIGTERM into one after the step.
        if not stop.requested:
            raise
    except ConfigError:
        raise
    except Exception as exc:  # a crash: the history and a summary marked failed are written, then it propagates
        status, failure = "failed", exc
    finally:
        if reward is not None:
            reward.close()
        if owns_engine and engine is not None:  # before the next multirun job starts its own engine in this process
            engine.close()
    if stop.requested:
        status = "interrupted"
    history = module.history if module is not None else []
    summary = summarise(
        run, history, before, after, time.perf_counter() - t0,
        status=status,
        signal=signal.Signals(stop.signum).name if stop.requested else None,
        error=str(failure) if failure else None,
        checkpoint=str(io.last_good) if io.last_good else None,
        skipped_steps=dict(module.skipped) if module is not None else {},
        keep_ratio_effective=effective_keep_ratio(run),
        fit_seconds=fit_wall,
        policy_dir=module.run_info.get("policy_dir") if module is not None else None,
        export_dir=str(export_dir) if export_dir else None,
        checkpoint_dir=str(out_dir / "checkpoints"),
        tensorboard_dir=str(out_dir / "tb"),
        overrides=overrides or [],
        data_rows=data_rows,
    )
    if rank == 0:  # every rank holds the same (global) history
        summary.write(out_dir)
        # Every step's metrics, one JSON object per line: what benchmark and results scripts read. Written as
        # the run went; once more whole, with the final held-out evaluation on the last row.
        write_rows(out_dir / "history.jsonl", history)
    if failure is not None:
        raise failure
    if stop.requested:
        raise RunInterrupted(stop.signum, summary)
    return summary
