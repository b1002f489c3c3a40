"""Checks before launch: everything about a run that can be wrong is found before its output directory or any
model exists.

Faults (docs/guide.md, "When things go wrong"): every key, the data sources (a file missing, empty, unreadable
or without the fields looked for; a hub dataset while offline), the packages a packaged pretrained policy needs and
the model cache a built or converted policy goes into (a path under a file, a read-only or full file system, no
permission) are checked before Hydra starts the job (:func:`check_run_config`); the data sizes, the checkpoint to
resume, a GPU run's memory plan and the output directory by :func:`preflight`; such a run fails with one
:class:`~arrol_pl.train.config.loader.ConfigError` naming what is wrong.

Decisions:
- **One run per directory.** A directory that holds a run's files (:func:`~arrol_pl.train.records.rundir.run_files`)
  takes only that run's continuation, ``trainer.resume=<dir>`` (or its newest checkpoint); anything else is refused by
  :func:`~arrol_pl.train.records.rundir.check_output_dir` before anything is read or written there. Resuming from one of
  the directory's older step checkpoints is refused too: the steps after it would be dropped with the later
  checkpoints that hold them; a branch from there goes to a new directory.
- **A resume continues the same run**: its model and data settings must be the checkpoint's (the cache directory,
  the held-out count and activation checkpointing may change), and the prompt stream must be the one it drew from.
  Its reward function too, named again on the command line: the checkpoint's record of it is compared, never
  imported (:func:`check_resumed_reward`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable

from arrol_pl.tasks.user_function import MATH_VERIFY
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.reward import refuse_recorded
from arrol_pl.train.config.run import RunConfig, load_run_config, prompts_drawn_per_step
from arrol_pl.train.records.rundir import check_output_dir

logger = logging.getLogger(__name__)


def data_error(exc: Exception) -> ConfigError:
    """A source that gives no problem (:class:`~arrol_pl.tasks.problem.DatasetUnavailableError`, whose message names
    the key and the file) as the one-line error every refused config is."""
    return ConfigError(" ".join(str(exc).splitlines()))


def check_run_config(cfg: Any, load: Callable[[Any], RunConfig] = load_run_config) -> RunConfig:
    """A training command line's checks before Hydra starts the job (``arrol train``'s, ``--cfg job``'s, ``arrol
    advise``'s): the typed config (``load``, by default :func:`~arrol_pl.train.config.run.load_run_config`), its
    data sources, read briefly (:func:`~arrol_pl.tasks.registry.check_sources`), the packages of a packaged pretrained
    policy (:func:`check_pretrained`) and the model cache when the policy is built or converted there
    (:func:`check_model_cache`); raises :class:`ConfigError` naming the key."""
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.registry import check_sources

    run = load(cfg)
    try:
        check_sources(run.data)
    except DatasetUnavailableError as exc:
        raise data_error(exc) from None
    check_pretrained(run)
    check_model_cache(run)
    return run


def check_pretrained(run: RunConfig) -> None:
    """``model.pretrained=smollm2`` with the packages it needs installed
    (:func:`~arrol_pl.models.smollm2.check_installed`); else :class:`ConfigError` naming the pip command."""
    from arrol_pl.models.smollm2 import PretrainedUnavailableError, check_installed

    if run.model.pretrained != "smollm2":
        return
    try:
        check_installed()
    except PretrainedUnavailableError as exc:
        raise ConfigError(str(exc)) from None


def check_model_cache(run: RunConfig) -> None:
    """The model cache of a policy built there (the tiny one) or converted there (``model.pretrained``), before any
    model work (:func:`~arrol_pl.models.cache.check_writable`, which writes nothing); a ``model.path`` policy needs
    none. :class:`ConfigError` naming the cache and the keys that move it."""
    from arrol_pl.models.cache import CacheNotWritable, check_writable, resolve_cache_dir

    if run.model.path is not None:
        return
    try:
        check_writable(resolve_cache_dir(run.model.cache_dir))
    except CacheNotWritable as exc:
        raise ConfigError(str(exc)) from None


def load_splits(run: RunConfig) -> tuple:
    """Training and held-out ProblemSets; bad rows are skipped, counted and logged with their ids by the adapters.
    A source that gives no problem is a :class:`ConfigError` naming its key."""
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.registry import load_data

    try:
        return load_data(run.data)
    except DatasetUnavailableError as exc:
        raise data_error(exc) from None


def check_trainable_layers(run: RunConfig, policy_dir: Path) -> None:
    """``model.trainable_layers`` against the policy's depth (its config.json), before any weights load."""
    wanted = run.model.trainable_layers
    layers = json.loads((policy_dir / "config.json").read_text()).get("num_hidden_layers")
    if wanted is not None and layers is not None and wanted > layers:
        raise ConfigError(f"model.trainable_layers={wanted}: the policy in {policy_dir} has {layers} decoder layers")


def check_resumed_reward(saved: dict, function: str, checkpoint: str) -> None:
    """A resume scores with the reward its run was trained with, named on the command line: the checkpoint's
    record is compared, never imported (a file names no code to run). ConfigError naming the recorded function."""
    recorded = (saved.get("reward") or {}).get("function")
    if recorded is None or recorded == function:
        return
    keep = "a resume continues its run's reward (to change it, start a new run from its export)"
    if function == MATH_VERIFY:  # the default: a user who named nothing, or the built-in named again
        raise refuse_recorded(recorded, f"trainer.resume={checkpoint!r}", f"; {keep}")
    raise ConfigError(
        f"trainer.resume={checkpoint!r} was trained with reward.function={recorded}, this run sets {function}: {keep}"
    )


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
        logger.warning(
            "pruning.min_keep_per_group=%d >= algo.group_size=%d: every rollout survives, pruning is "
            "disabled (effective κ = 1)",
            p.min_keep_per_group,
            g,
        )
    elif floor / g > p.keep_ratio:
        logger.warning(
            "pruning.min_keep_per_group=%d of algo.group_size=%d keeps at least %.3f of each group: "
            "effective κ = %.3f, not pruning.keep_ratio=%.3f",
            floor,
            g,
            floor / g,
            floor / g,
            p.keep_ratio,
        )
    if floor < 2:
        logger.warning(
            "pruning.min_keep_per_group=%d: groups left with fewer than 2 survivors carry no advantage, "
            "and a step whose rollouts are all pruned is skipped (counted as skipped/no_survivors)",
            floor,
        )


def preflight(run: RunConfig, out_dir: Path | None = None) -> tuple[list, list, dict | None]:
    """Checks that need the data or the file system, before the output directory or any model exists: a GPU
    run's memory plan (:func:`~arrol_pl.train.memory.check.check_memory`), the checkpoint to resume, the output
    directory (``out_dir``, checked by :func:`check_output_dir`; None: not checked) and the data.

    Returns the training and held-out problems and the checkpoint to resume (memory-mapped, read with
    ``weights_only=True``) or None.
    """
    from arrol_pl.train.records.checkpoint import read_checkpoint
    from arrol_pl.train.run.data import check_fits, check_stream, stream_identity

    from arrol_pl.train.memory.check import check_memory

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
                    raise ConfigError(
                        f"trainer.resume: the checkpoint was trained with {section}.{key}={was!r}, "
                        f"this run sets {value!r}"
                    )
        check_resumed_reward(saved, run.reward.function, run.trainer.resume)
    train, heldout = load_splits(run)
    drawn = prompts_drawn_per_step(run)
    check_fits(len(train), drawn)
    if ckpt is not None:
        check_stream(ckpt["PromptDataModule"], stream_identity(train, drawn, run.trainer.seed), rows_to_skip=True)
    report_pruning_floor(run)
    return train, heldout, ckpt
