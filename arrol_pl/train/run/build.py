"""Building a run's parts from its config: the process group, the policy's directory (built, converted or fetched
on first use), the rollout engine, the reward, the held-out evaluation and the Lightning module with its
collaborators (:func:`build_parts`), and Lightning's strategy. Each part is a function of the
:class:`~arrol_pl.train.config.run.RunConfig`, so a script can build one alone (the benchmarks, the GPU smoke command,
the evaluation's context length)."""

from __future__ import annotations

import dataclasses
import json
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import RunConfig, prompts_drawn_per_step


def policy_directory(run: RunConfig) -> Path:
    """The policy's model directory: ``model.path`` (fetched when it names a hub model), else built (the tiny policy)
    or converted (``model.pretrained``) into the model cache; a cache that refuses the build is a :class:`ConfigError`
    naming it (:class:`~arrol_pl.models.cache.CacheNotWritable`)."""
    from arrol_pl.models.cache import CacheNotWritable

    try:
        if run.model.pretrained == "smollm2":
            from arrol_pl.models.smollm2 import prepare_smollm2

            return prepare_smollm2(run.model.cache_dir)
        if run.model.path is not None:
            from arrol_pl.models import hub

            path = hub.snapshot(run.model.path) if hub.is_hub_id(run.model.path) else Path(run.model.path)
            if not (path / "config.json").exists():
                raise FileNotFoundError(
                    f"model.path={run.model.path!r} is not a transformers model directory (no config.json)"
                )
            return path
        from arrol_pl.train.run.console import weight_bars_off
        from arrol_pl.train.run.warmstart import prepare_tiny_policy

        with weight_bars_off():
            return prepare_tiny_policy(run.model, run.data, run.algo.max_response_tokens, run.trainer.seed)
    except CacheNotWritable as exc:
        raise ConfigError(str(exc)) from None


def context_length(tokenizer, problems: list, max_response_tokens: int) -> int:
    longest = max(len(tokenizer.encode(p.prompt, add_special_tokens=False)) for p in problems)
    return int(math.ceil((longest + max_response_tokens + 1) / 64) * 64)


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
"""Where a model's config.json states how many positions it has (the names vLLM reads too)."""


def context_limit(max_model_len: int | None, policy_dir: Path) -> tuple[int | None, str]:
    """The context a prompt and its response must fit, and its name for messages: ``engine.max_model_len`` when set,
    else the policy's positions (its config.json); None when neither says."""
    if max_model_len is not None:
        return max_model_len, f"engine.max_model_len={max_model_len}"
    config = json.loads((Path(policy_dir) / "config.json").read_text())
    for key in POSITION_KEYS:
        if isinstance(config.get(key), int) and not isinstance(config[key], bool):
            return config[key], f"the policy's {key}={config[key]}"
    return None, "the policy's context (not stated)"


def check_room(max_model_len: int | None, policy_dir: Path, budget: int, budget_key: str) -> tuple[int | None, str]:
    """``(room, context)``: the tokens a prompt may take in the context (:func:`context_limit`; None when it is not
    stated) beside ``budget`` response tokens, and the context's name; ConfigError naming ``budget_key`` (the key that
    sets the budget) when none is left."""
    limit, name = context_limit(max_model_len, policy_dir)
    if limit is not None and limit - budget < 1:
        raise ConfigError(f"{budget_key}={budget} leaves no room for a prompt in {name}")
    return (None if limit is None else limit - budget), name


def fitting_problems(
    loaded, tokenizer, prompt_format, policy_dir: Path, max_model_len: int | None, budget: int, budget_key: str
) -> list:
    """``loaded`` (a ProblemSet) in ``prompt_format``, less the problems whose prompt leaves no room for ``budget``
    response tokens (``budget_key``: ``algo.max_response_tokens`` in training, ``max_tokens`` in evaluation) in the
    context (:func:`check_room`): those are skipped and counted as bad rows
    (:func:`~arrol_pl.tasks.rows.skip_overlong`), so the engine is never handed one."""
    from arrol_pl.tasks.prompts import render_problems
    from arrol_pl.tasks.rows import skip_overlong

    rendered = render_problems(loaded, tokenizer, prompt_format)
    room, name = check_room(max_model_len, policy_dir, budget, budget_key)
    if room is None:
        return rendered
    return skip_overlong(loaded, rendered, tokenizer, room, f"prompt + {budget_key}={budget} > {name}")


def engine_context(tokenizer, problems: list, max_response_tokens: int, policy_dir: Path) -> int:
    """The engine's context when none is set: the longest of ``problems`` and the response budget
    (:func:`context_length`), within the policy's positions."""
    length = context_length(tokenizer, problems, max_response_tokens)
    limit = context_limit(None, policy_dir)[0]
    return length if limit is None else min(length, limit)


def build_engine(run: RunConfig, policy_dir: Path, tokenizer, problems: list):
    """The rollout engine of ``run`` on ``policy_dir``; its context fits the longest of ``problems`` (within the
    policy's positions). With several ranks it joins their world (every rank builds its own, at the same point)."""
    from arrol_pl.engine import ArrolEngine

    e = run.engine
    length = e.max_model_len
    if length is None:
        length = engine_context(tokenizer, problems, run.algo.max_response_tokens, policy_dir)
    try:
        return ArrolEngine(
            str(policy_dir),
            dataclasses.replace(e, max_model_len=length),
            seed=run.trainer.seed,
            head_input=run.head.input,
            head_hidden_dim=run.head.hidden_dim,
            logprobs_mode="processed_logprobs",  # what the trainer compares its own against: T-scaled log-probs
            join_launcher_world=run.trainer.ranks > 1,
        )
    except Exception as exc:  # a compiled start (CUDA's default) needs a host compiler and Python's headers
        from arrol_pl.engine.adapter.startup import compile_failure

        failed = None if e.enforce_eager else compile_failure(exc)
        if failed is None:
            raise
        raise ConfigError(
            f"engine.enforce_eager: the engine's compiled start failed ({failed}): set "
            "engine.enforce_eager=true to start it without torch.compile and CUDA graphs"
        ) from exc


def lightning_strategy(t):
    """``trainer.strategy`` as Lightning's: with several ranks ``fsdp`` is FSDP2, ``ModelParallelStrategy`` (CPU
    and CUDA; ``FSDPStrategy`` refuses a CPU accelerator), checkpointing full state dicts from rank 0."""
    if t.ranks == 1:
        return t.strategy
    from lightning.pytorch.strategies import ModelParallelStrategy

    from arrol_pl.train.run.world import rank_timeout

    # The timeout counts where Lightning creates the group itself; it reuses the one init_launcher_world made.
    return ModelParallelStrategy(
        data_parallel_size=t.ranks, tensor_parallel_size=1, save_distributed_checkpoint=False, timeout=rank_timeout(t)
    )


def join_world(run: RunConfig) -> int:
    """This process's rank: several ranks initialise their process group here, before any engine joins it
    (docs/distributed.md); one rank is rank 0 without a group."""
    if run.trainer.ranks == 1:
        return 0
    from arrol_pl.train.run.world import init_launcher_world

    return init_launcher_world(run.trainer)


@dataclass
class RunParts:
    """What a run builds, filled in as it is built, so that a failure part-way closes what exists."""

    engine: Any = None
    owns_engine: bool = True
    """False when the caller passed the engine (a test's shared one): the caller closes it."""
    reward: Any = None
    tokenizer: Any = None
    module: Any = None
    evaluate: Callable[..., Any] = lambda label="held-out": None
    """The held-out evaluation on the engine's current weights (None without held-out problems)."""
    before: Any = None
    """The held-out result before training (the checkpoint's, on a resume)."""

    def close(self) -> None:
        """The reward workers, and the engine if the run started it (before a next multirun job starts its own)."""
        if self.reward is not None:
            self.reward.close()
        if self.owns_engine and self.engine is not None:
            self.engine.close()


def build_parts(
    parts: RunParts,
    run: RunConfig,
    train,
    heldout,
    resume: dict | None,
    history: list[dict[str, float]],
    stoppable: Callable[[str], ContextManager] = lambda phase: nullcontext(),
) -> tuple[list, list]:
    """Fill ``parts``: the policy's directory (rank 0 first), the tokenizer, the engine unless given, the reward,
    the held-out result before training, and the Lightning module with its collaborators. Returns the training and
    held-out problems rendered with the tokenizer's prompt format, less those the engine cannot take (skipped and
    counted in ``train`` and ``heldout``, the ProblemSets loaded: :func:`fitting_problems`). ``stoppable(phase)``
    marks the phases a signal stops at once (:meth:`~arrol_pl.train.run.callbacks.RunCheckpoints.stoppable`): the
    policy's preparation and every held-out evaluation."""
    import lightning as L
    import torch
    from transformers import AutoTokenizer

    from arrol_pl.core.online import OnlinePruning
    from arrol_pl.tasks.reward_function import make_reward
    from arrol_pl.train.policy.sharding import load_on_rank0
    from arrol_pl.train.run.console import weight_bars_off
    from arrol_pl.train.run.data import check_fits
    from arrol_pl.train.run.heldout import HeldoutResult, evaluate_heldout
    from arrol_pl.train.run.prelaunch import check_trainable_layers
    from arrol_pl.train.run.world import rank_zero_first
    from arrol_pl.train.step.groups import GroupChooser
    from arrol_pl.train.step.module import ArrolModule
    from arrol_pl.train.step.rank_sync import RankSync
    from arrol_pl.train.step.screening import PromptScorer

    t, a = run.trainer, run.algo
    tiny = run.model.path is None and run.model.pretrained is None
    with stoppable("the warm start" if tiny and run.model.warm_start.steps else "the policy's preparation"):
        policy_dir = rank_zero_first(lambda: policy_directory(run))  # several ranks: built once
    check_trainable_layers(run, policy_dir)
    parts.tokenizer = tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    fmt = run.data.prompt_format()
    train, heldout = (
        fitting_problems(
            loaded,
            tokenizer,
            fmt,
            policy_dir,
            run.engine.max_model_len,
            a.max_response_tokens,
            "algo.max_response_tokens",
        )
        for loaded in (train, heldout)
    )
    check_fits(len(train), prompts_drawn_per_step(run))
    if parts.engine is None:
        parts.engine = build_engine(run, policy_dir, tokenizer, train + heldout)
    engine = parts.engine
    # several ranks: rank 0 loads, the others start on the meta device (ArrolModule.configure_model)
    with weight_bars_off():
        policy = load_on_rank0(policy_dir, torch.float32)
        reference = load_on_rank0(policy_dir, getattr(torch, run.model.reference_dtype)) if a.kl_coef > 0 else None
    parts.reward = reward = make_reward(
        run.reward.function,
        run.reward.pool_config(
            overlong_max_length=a.max_response_tokens if a.overlong_cache_length else None,
            overlong_cache_length=a.overlong_cache_length,
        ),
    )
    # Preparing the policy (a warm start when its cache is cold) draws random numbers: reseed here so the run
    # itself does not depend on whether the cache existed. The evaluation samples from a stream of its own.
    L.seed_everything(t.seed, workers=True, verbose=False)
    if heldout:  # every rank's engine evaluates its chunks

        def evaluate(label: str = "held-out") -> HeldoutResult:  # label: its progress bars' (which evaluation)
            with stoppable("the held-out evaluation"):
                return evaluate_heldout(
                    engine,
                    reward,
                    heldout,
                    t.eval_samples,
                    a.temperature,
                    a.max_response_tokens,
                    fmt.stop,
                    seed=t.eval_seed,
                    ranks=RankSync(),
                    chunk=t.eval_chunk,
                    progress=label,
                )

        parts.evaluate = evaluate
    saved_before = resume["arrol"].get("heldout_before") if resume else None
    parts.before = HeldoutResult(**saved_before) if saved_before else parts.evaluate("held-out before training")
    # the quality head before the prompt head: both draw their initial weights from the seeded stream
    pruning = OnlinePruning(run.pruning, run.head, policy.config.hidden_size, t.seed)
    scorer = (
        PromptScorer(policy.config.hidden_size, run.head, run.pruning, t.seed)
        if run.pruning.screen.prompt_stage
        else None
    )
    chooser = GroupChooser(run, engine, reward, train if a.dynamic_sampling_refill else (), scorer)
    run_info = {
        "policy_dir": str(Path(policy_dir).resolve()),
        "heldout_before": dataclasses.asdict(parts.before) if parts.before else None,
    }
    parts.module = ArrolModule(
        run,
        policy,
        engine,
        chooser,
        tokenizer.pad_token_id,
        reference,
        pruning=pruning,
        history=history,
        run_info=run_info,
    )
    engine.sync_weights(None, parts.module.head.state_dict())
    return train, heldout
