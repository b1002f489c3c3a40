"""The run configuration's own sections, each checking its fields as it is built: ``data`` (:class:`DataConfig`),
``algo`` (:class:`AlgoConfig`) and ``trainer`` (:class:`TrainerConfig`).

Their defaults are the default experiment's (``make run``: the tiny policy on the arithmetic task on CPU);
:class:`~arrol_pl.train.config.run.RunConfig` puts them together with the other sections and checks the
combinations across them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arrol_pl.core.advantages import ADVANTAGE_ESTIMATORS
from arrol_pl.core.losses import KL_ESTIMATORS, LOSS_AGG_MODES
from arrol_pl.tasks import registry
from arrol_pl.tasks.prompts import PromptFormat
from arrol_pl.train.config.loader import ConfigError, register_schema
from arrol_pl.train.config.loggers import WandbConfig, check_logger


ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
STRATEGIES = ("auto", "fsdp", "ddp")
OLD_LOGPROBS = ("auto", "recompute", "reuse")
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")


@dataclass
class DataConfig:
    """Training and held-out problems. Each ``conf/data`` preset names its adapter and its own ``options``;
    everything is checked here, before any model loads."""

    name: str = "arithmetic"
    """Task adapter: arithmetic | gsm8k | dapo_math | math500 | minerva | olympiadbench | amc23 | aime24 | aime25 |
    jsonl."""
    path: str | None = None
    """Local copy (a json, jsonl or parquet file, a saved dataset dir, or a folder of data files); required
    offline for public datasets."""
    split: str | None = None
    """Split of the training source (None: the adapter's, e.g. ``train``)."""
    prompt_field: str | None = None
    """Row field holding the question (dotted for nested records; chat messages allowed); None: the adapter's."""
    answer_field: str | None = None
    """Row field holding the gold answer; None: the adapter's."""
    id_field: str | None = None
    """Row field holding the problem id; None: the adapter's (rows without one get ``{name}-{index}``)."""
    solution_field: str | None = None
    """Row field holding a worked solution (the tiny policy's warm start); None: the adapter's, if any."""
    answer_pattern: str | None = None
    """Regex with one group taking the gold out of the answer field (GSM8K: ``'#### (.+)$'``); None: the adapter's."""
    heldout_name: str | None = None
    """Adapter of the held-out set; None: the held-out split of ``name`` (arithmetic), or ``name`` when
    ``heldout_path`` is set."""
    heldout_path: str | None = None
    """Local copy of the held-out set."""
    heldout_split: str | None = None
    """Split of the held-out source (None: ``test`` for the training adapter, else the adapter's)."""
    heldout_fields: dict[str, Any] = field(default_factory=dict)
    """The held-out rows' own ``prompt_field`` / ``answer_field`` / ``id_field`` / ``solution_field`` /
    ``answer_pattern`` where they differ (None or absent: the training ones when read by the same adapter)."""
    num_heldout: int = 128
    """Held-out problems evaluated before and after training (0 disables)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The adapter's own options (its ``OPTIONS`` dataclass: arithmetic difficulty, jsonl hub id)."""
    prompt_template: str | None = None
    """Text the problem prompt is placed into at ``{question}`` (e.g. a few-shot prefix); None: the prompt as is."""
    chat_template: bool = True
    """Apply the policy tokenizer's chat template (when it has one); false feeds the raw text (base-style prompts)."""
    stop: list[str] = field(default_factory=list)
    """Stop strings of every generation (training, held-out, evaluation), e.g. ``["\\n"]`` for one-line answers."""

    def __post_init__(self) -> None:
        try:
            registry.check_data_config(self)
            self.prompt_format()
        except ValueError as e:
            raise ConfigError(str(e) if str(e).startswith("data.") else f"data.{e}") from None

    def prompt_format(self) -> PromptFormat:
        """How problems become the policy's input text, and where generation stops."""
        return PromptFormat(self.prompt_template, self.chat_template, tuple(self.stop))


@dataclass
class AlgoConfig:
    """The RLVR algorithm (GRPO or DAPO settings) and its batch shapes."""

    name: str = "grpo"
    """Label of the preset (grpo | dapo)."""
    advantage: str = "grpo"
    """Advantage estimator: grpo | drgrpo."""
    clip_low: float = 0.2
    """ε_low of PPO-clip."""
    clip_high: float = 0.2
    """ε_high of PPO-clip (DAPO clip-higher: 0.28)."""
    clip_ratio_c: float | None = 3.0
    """Dual-clip bound c (> 1) for negative advantages, verl's default 3.0; null turns dual-clip off."""
    loss_agg_mode: str = "seq-mean-token-mean"
    """token-mean (DAPO) | seq-mean-token-mean (GRPO) | seq-mean-token-sum | seq-mean-token-sum-norm (Dr.GRPO)."""
    loss_scale_factor: float | None = None
    """The constant L that seq-mean-token-sum-norm divides by, as verl names it. None: ``max_response_tokens``
    (Dr.GRPO's constant, the same for every micro-batch); with ``verl_parity``, verl's own None: each
    micro-batch's padded width."""
    verl_parity: bool = False
    """Do as verl does where this project chose otherwise (docs/algorithm.md, "verl parity"): seq-mean-token-sum-norm
    sums the sequences (no division by their number) over the padded width, the seq-mean modes divide by every row
    of the mini-batch rather than the non-empty ones, and a group of one survivor gets ``r / (1 + eps)`` instead
    of 0."""
    kl_coef: float = 0.0
    """β of the KL penalty to the frozen reference (0: no reference forward)."""
    kl_estimator: str = "k3"
    """k1 (kl) | k2 (mse) | k3 (low_var_kl), verl's names."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose survivors share one reward."""
    dynamic_sampling_refill: bool = False
    """DAPO as verl runs it (``algorithm.filter_groups``): generate further batches of B prompts until B groups
    whose survivors' rewards differ are in hand, then train on those (:mod:`arrol_pl.train.step.refill`)."""
    max_num_gen_batches: int = 4
    """Refill: at most this many generated batches per step (the first included), as verl's
    ``max_num_gen_batches``; a step still short trains on what it found."""
    overlong_cache_length: int = 0
    """DAPO soft overlong penalty window in tokens (0 disables)."""
    prompts_per_step: int = 16
    """B: prompts per training step."""
    group_size: int = 8
    """G: rollouts per prompt."""
    ppo_mini_batch_size: int | None = None
    """Prompts per optimizer step (their survivors; a group is never split), as verl's; must divide
    prompts_per_step. None: prompts_per_step (one mini-batch, one optimizer step per epoch)."""
    ppo_epochs: int = 1
    """Passes over the step's survivors; every mini-batch after the first is off-policy, so the clip acts."""
    old_logprobs: str = "auto"
    """π_old of the PPO ratio. ``recompute``: a no-grad forward over the training rows in the log-prob
    phase, as verl. ``reuse``: the update's own log-probs, detached, as TRL with one iteration; they are the
    same numbers when the step makes one optimizer step (all micro-batches are taken before it), and it
    saves that forward. ``auto``: reuse exactly then (``ppo_epochs`` = 1 and one mini-batch), else
    recompute."""
    rollout_is_cap: float | None = None
    """Truncated importance sampling: weight each token's policy loss by min(π_old / π_engine, cap) to
    correct for the engine's sampling numerics (verl's TIS; e.g. 2.0). None: off."""
    max_response_tokens: int = 48
    """Longest response (the paper: 8192)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (log-probs use the same)."""
    top_p: float = 1.0
    """Nucleus sampling."""
    lr: float = 3e-4
    """Policy learning rate (AdamW); the tiny policy's. A pretrained policy takes less (``+exp=smollm2_setting``:
    1e-4)."""
    weight_decay: float = 0.0
    """AdamW weight decay of the policy."""
    grad_clip: float = 1.0
    """Max gradient norm of the policy (0 disables)."""
    micro_batch_tokens: int = 4096
    """Token budget of a re-batched micro-batch (rows × longest sequence)."""

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGE_ESTIMATORS:
            raise ConfigError(f"algo.advantage={self.advantage!r}; choose one of {ADVANTAGE_ESTIMATORS.names()}")
        if self.loss_scale_factor is not None and not self.loss_scale_factor > 0:
            raise ConfigError(f"algo.loss_scale_factor must be > 0 or null, got {self.loss_scale_factor}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ConfigError(f"algo.loss_agg_mode={self.loss_agg_mode!r}; choose one of {list(LOSS_AGG_MODES)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ConfigError(f"algo.kl_estimator={self.kl_estimator!r}; choose one of {list(KL_ESTIMATORS)}")
        for key in ("clip_low", "clip_high"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"algo.{key} must be in [0, 1), got {getattr(self, key)}")
        for key in ("prompts_per_step", "group_size", "max_response_tokens", "micro_batch_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"algo.{key} must be >= 1, got {getattr(self, key)}")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1:
            raise ConfigError(f"algo.clip_ratio_c must be > 1 (or null: no dual-clip), got {self.clip_ratio_c}")
        if self.max_num_gen_batches < 1:
            raise ConfigError(f"algo.max_num_gen_batches must be >= 1, got {self.max_num_gen_batches}")
        if self.dynamic_sampling_refill and not self.dynamic_sampling:
            raise ConfigError(
                "algo.dynamic_sampling_refill=true refills the groups that algo.dynamic_sampling drops, "
                "but algo.dynamic_sampling=false: set both true (algo=dapo does), or "
                "algo.dynamic_sampling_refill=false for no filtering at all"
            )
        if self.ppo_epochs < 1:
            raise ConfigError(f"algo.ppo_epochs must be >= 1, got {self.ppo_epochs}")
        mbs = self.ppo_mini_batch_size
        if mbs is not None and not (1 <= mbs <= self.prompts_per_step and self.prompts_per_step % mbs == 0):
            raise ConfigError(
                f"algo.ppo_mini_batch_size must divide algo.prompts_per_step={self.prompts_per_step} "
                f"(prompts per optimizer step), got {mbs}"
            )
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ConfigError(f"algo.old_logprobs={self.old_logprobs!r}; choose one of {list(OLD_LOGPROBS)}")
        if self.old_logprobs == "reuse" and self.optimizer_steps > 1:
            raise ConfigError(
                f"algo.old_logprobs='reuse' needs one optimizer step per training step, but algo.ppo_epochs="
                f"{self.ppo_epochs} with {self.num_mini_batches} mini-batches makes {self.optimizer_steps}: "
                "later mini-batches are off-policy, so π_old must be recomputed ('recompute' or 'auto')"
            )
        if self.rollout_is_cap is not None and self.rollout_is_cap <= 0:
            raise ConfigError(f"algo.rollout_is_cap must be > 0 (or null: off), got {self.rollout_is_cap}")
        if self.group_size < 2:
            raise ConfigError(f"algo.group_size must be >= 2 (group-relative advantages), got {self.group_size}")
        if self.temperature <= 0:
            raise ConfigError(f"algo.temperature must be > 0 for RL sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"algo.top_p must be in (0, 1], got {self.top_p}")
        if self.lr <= 0:
            raise ConfigError(f"algo.lr must be > 0, got {self.lr}")
        if not 0 <= self.overlong_cache_length <= self.max_response_tokens:
            raise ConfigError(
                f"algo.overlong_cache_length must be in [0, algo.max_response_tokens={self.max_response_tokens}], "
                f"got {self.overlong_cache_length}"
            )

    @property
    def num_mini_batches(self) -> int:
        """PPO mini-batches (optimizer steps) per epoch."""
        return self.prompts_per_step // (self.ppo_mini_batch_size or self.prompts_per_step)

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per training step: mini-batches × epochs."""
        return self.num_mini_batches * self.ppo_epochs

    @property
    def reuses_old_logprobs(self) -> bool:
        """Whether π_old is the update's own detached log-probs (no separate forward; ``old_logprobs``)."""
        return self.old_logprobs == "reuse" or (self.old_logprobs == "auto" and self.optimizer_steps == 1)


@dataclass
class TrainerConfig:
    """Lightning trainer and run bookkeeping."""

    max_steps: int = 300
    """Training steps."""
    max_minutes: float | None = None
    """Training wall-time budget (``time/wall``: held-out evaluations excluded; the oracle scorer's credited clock,
    ``time/wall_credited``): the run stops after the step that reaches it, saves a checkpoint and evaluates as at
    ``max_steps``. None: steps alone decide. Equal budgets compare methods at equal training time (paper Fig. 4)."""
    accelerator: str = "auto"
    """cpu | gpu | auto."""
    devices: int = 1
    """Devices (ranks) per node; each rank holds an engine and generates its share of the prompts
    (docs/distributed.md)."""
    num_nodes: int = 1
    """Nodes; ranks = ``devices × num_nodes``, launched by torchrun or srun on each node."""
    strategy: str = "auto"
    """auto | fsdp | ddp; with several ranks ``fsdp`` is FSDP2 (Lightning's ``ModelParallelStrategy``), on CPU and
    CUDA."""
    rank_timeout_minutes: float = 60.0
    """How long a rank waits in a collective for the others before the run fails (the process group's timeout, in
    minutes, a fraction allowed; NCCL's own default is 10): the other ranks wait while rank 0 alone downloads or
    builds the policy, loads it and writes checkpoints."""
    precision: str = "32-true"
    """Lightning precision of the policy update (bf16-mixed on GPU)."""
    seed: int = 0
    """Global seed."""
    logger: Any = "tensorboard"
    """Where the metrics are logged for watching a run: tensorboard | csv | wandb | mlflow (Lightning's loggers;
    wandb and mlflow are extras to install), or a list of them (``[tensorboard,csv]``), each given the whole config as
    its hyperparameters. ``history.jsonl`` and ``summary.json`` are written whatever it is."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """The W&B project, entity and tags (``trainer.logger=wandb``)."""
    log_every: int = 1
    """Steps between scalar logs."""
    sample_texts: int = 2
    """Completions logged as text every ``text_every`` steps."""
    text_every: int = 20
    """Steps between text samples."""
    logprob_check_every: int = 10
    """Steps between the engine-vs-trainer log-prob checks (``policy/engine_logprob_diff_*``, from step 0), the steps
    the engine also returns each sampled token's log-prob: vLLM then takes a log-softmax over the vocabulary per
    token (a quarter of the tiny policy's generation on CPU). 0: never; ``algo.rollout_is_cap`` needs every step."""
    eval_every: int = 0
    """Steps between held-out evaluations during training (0: before and after only); their seconds are
    left out of ``time/wall``, the x axis of the wall-clock plots."""
    eval_samples: int = 4
    """Samples per held-out problem (avg@k); the summary gives the standard error over problems beside it."""
    eval_seed: int = 1234
    """Seed of the held-out sampling (a stream of its own: evaluations neither see nor move training's)."""
    eval_chunk: int | None = None
    """Held-out problems per generation call, each chunk sampled from a seed of its own (null: the whole set in one
    call on one rank, chunks of 16 on several); rank ``r`` of ``W`` evaluates chunks ``r, r + W, …`` and the ranks
    gather the results, so a set chunk gives the same figure on any number of ranks."""
    checkpoint_every: int = 100
    """Steps between checkpoints; the last step and a stop on SIGINT / SIGTERM save one too."""
    keep_checkpoints: int | None = 3
    """Step checkpoints (``checkpoints/step<k>.ckpt``) kept beside ``last.ckpt``, the newest ones: an older one is
    deleted once a newer one is written. ``last.ckpt`` (the newest, what ``trainer.resume`` takes) is always kept;
    0 keeps ``last.ckpt`` alone (no step files are written); None keeps every one."""
    resume: str | None = None
    """What to continue: ``auto`` (this run's directory, else the newest run of this name), a run directory, a .ckpt."""
    output_dir: str | None = None
    """Run directory, Hydra's record (``.hydra/``) and log included; None uses Hydra's (``hydra.run.dir``)."""
    push_to_hub: str | None = None
    """A hub model repository id (``user/name``) the run's ``export/`` (policy, tokenizer, card, ``quality_head/``) is
    pushed to after the run; needs the network (``HF_HUB_OFFLINE=0``) and a token. None: nothing leaves the machine."""

    @property
    def ranks(self) -> int:
        """Training processes: ``devices × num_nodes``."""
        return self.devices * self.num_nodes

    def __post_init__(self) -> None:
        for key in ("max_steps", "devices", "num_nodes", "log_every", "text_every", "checkpoint_every", "eval_samples"):
            if getattr(self, key) < 1:
                raise ConfigError(f"trainer.{key} must be >= 1, got {getattr(self, key)}")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 0:
            raise ConfigError(
                f"trainer.keep_checkpoints must be >= 0 (0: last.ckpt alone; null: keep every one), "
                f"got {self.keep_checkpoints}"
            )
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"trainer.max_minutes must be > 0 (or null: no budget), got {self.max_minutes}")
        if not self.rank_timeout_minutes > 0:
            raise ConfigError(f"trainer.rank_timeout_minutes must be > 0, got {self.rank_timeout_minutes}")
        if self.eval_chunk is not None and self.eval_chunk < 1:
            raise ConfigError(f"trainer.eval_chunk must be >= 1 (or null), got {self.eval_chunk}")
        for key in ("eval_every", "sample_texts", "logprob_check_every"):
            if getattr(self, key) < 0:
                raise ConfigError(f"trainer.{key} must be >= 0, got {getattr(self, key)}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"trainer.seed must be in [0, 2**32), got {self.seed}")
        try:
            check_logger(self.logger)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.accelerator not in ACCELERATORS:
            raise ConfigError(f"trainer.accelerator={self.accelerator!r}; choose one of {list(ACCELERATORS)}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"trainer.strategy={self.strategy!r}; choose one of {list(STRATEGIES)}")
        if self.ranks > 1 and self.strategy != "fsdp":
            raise ConfigError(
                f"trainer.strategy={self.strategy!r} with trainer.devices × trainer.num_nodes = {self.ranks} "
                "ranks: several ranks train with trainer.strategy=fsdp"
            )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision={self.precision!r}; choose one of {list(PRECISIONS)}")
        # Only whether it exists: a checkpoint is read (weights_only) in arrol_pl.train.run.prelaunch.preflight
        # once the data is known, still before any model loads; arrol_pl.train.records.rundir.resolve_resume finds it.
        if self.resume not in (None, "auto") and not Path(self.resume).exists():
            raise ConfigError(f"trainer.resume={self.resume!r}: no such file or directory (a run's, a .ckpt, or auto)")
        if self.push_to_hub is not None:
            from arrol_pl.models.head import check_push_target

            try:
                check_push_target(self.push_to_hub)
            except ValueError as exc:
                raise ConfigError(f"trainer.push_to_hub={self.push_to_hub}: {exc}") from None


OPTION_SCHEMAS = ("arithmetic", "jsonl")
"""Adapters whose ``data.options`` dataclass (their ``OPTIONS``) is registered with Hydra as
``data_options/<adapter>``, beside the data section, so every script that reads a ``data`` preset has them: a preset
selects one (``defaults: [/data_options/arithmetic@options]``), so the options' defaults stay in the adapter and
each of them can be overridden without a ``+``."""

for _name in OPTION_SCHEMAS:
    register_schema(_name, registry.adapter_options(_name), group="data_options")
