"""The model runner's hooks: the hidden-state tap on ``execute_model`` and the sampler switch
(:class:`LogprobsOnDemand`); part of the adapter (see :mod:`arrol_pl.engine.adapter` for the contract)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from arrol_pl.engine.vllm_api import RUNNER, TAP_RUNNER_ATTRS


def check_runner(runner: Any) -> None:
    """Refuse, in one line, a model runner the tap cannot read (vLLM's Model Runner V2, or a later rewrite): it
    must carry every name of :data:`~arrol_pl.engine.vllm_api.TAP_RUNNER_ATTRS` (and be vLLM's V1 runner when
    vLLM is importable)."""
    kind = f"{type(runner).__module__}.{type(runner).__qualname__}"
    missing = [name for name in TAP_RUNNER_ATTRS if not hasattr(runner, name)]
    if missing:
        raise RuntimeError(
            f"vLLM built the model runner {kind}, which the hidden-state tap cannot read (it has no "
            f"{', '.join(missing)}): arrol_pl.engine needs vLLM's V1 runner ({RUNNER}), selected by "
            "VLLM_USE_V2_MODEL_RUNNER=0 (see arrol_pl/engine/vllm_api.py, REQUIRED_ENV)"
        )


@dataclass
class TappedRow:
    """One captured hidden row: ``rows[index]`` is the state that sampled response token ``num_output + 1``."""

    rows: torch.Tensor
    index: int
    num_output: int

    def feature(self) -> torch.Tensor:
        return self.rows[self.index]


class HiddenStateTap:
    """Capture final-layer hidden rows of registered requests inside the engine's own forward pass.

    ``register(internal_id, target)``: keep, for that request, the latest row whose forward pass samples one
    of the response tokens ``1..target`` (the row sampling token ``k`` is the hidden state of the input
    token at 0-based sequence position ``prompt_len + k - 2``). ``latest[internal_id]`` then holds a
    :class:`TappedRow`; rows are gathered in one ``index_select`` per step, only for registered requests
    still below their target. Not only at the target step: a rollout that stops early (EOS, stop token)
    needs the row that sampled its last token, and whether a token is the last is known only after the
    step. Past the target nothing is copied.
    """

    def __init__(self, runner: Any) -> None:
        check_runner(runner)
        self.runner = runner
        self.targets: dict[str, int] = {}
        self.latest: dict[str, TappedRow] = {}
        self.scheduled = 0
        """Requests the last forward pass sampled for (0 when a step ran none): the requests the step advanced."""
        self.tokens = 0
        """Tokens the last step computed: one per request decoded, and the prompt tokens it prefilled."""
        self._inner = runner.execute_model
        self._wrapped = "execute_model" in vars(runner)
        """Whether ``execute_model`` was already the runner's own attribute (else: its class's method)."""
        self.install()

    def install(self) -> None:
        self.runner.execute_model = self._execute_model

    def uninstall(self) -> None:
        """Restore the stock ``execute_model`` (the benchmark's no-hook baseline; a closed engine), leaving no
        attribute on the runner that refers back to it."""
        if self._wrapped:
            self.runner.execute_model = self._inner
        else:
            del self.runner.execute_model

    def register(self, internal_id: str, target: int) -> None:
        self.targets[internal_id] = target

    def release(self, internal_id: str) -> TappedRow | None:
        self.targets.pop(internal_id, None)
        return self.latest.pop(internal_id, None)

    def clear(self) -> None:
        self.targets.clear()
        self.latest.clear()

    def _execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None) -> Any:
        out = self._inner(scheduler_output, intermediate_tensors)
        state = self.runner.execute_model_state if out is None else None
        self.scheduled = 0 if state is None else int(state.sample_hidden_states.shape[0])
        self.tokens = int(scheduler_output.total_num_scheduled_tokens)
        if self.targets and state is not None:
            self._capture(state.sample_hidden_states)
        return out

    def _capture(self, sample_hidden_states: torch.Tensor) -> None:
        runner = self.runner
        req_ids = runner.input_batch.req_ids
        requests = runner.requests
        if sample_hidden_states.shape[0] != len(req_ids):
            raise RuntimeError(
                f"HiddenStateTap: {sample_hidden_states.shape[0]} sampled rows for {len(req_ids)} requests "
                "(speculative decoding is not supported)"
            )
        picked: list[int] = []
        owners: list[tuple[str, int]] = []
        passed: list[str] = []
        targets = self.targets
        for i, rid in enumerate(req_ids):
            target = targets.get(rid)
            if target is None:
                continue
            n = len(requests[rid].output_token_ids)
            if n < target:
                picked.append(i)
                owners.append((rid, n))
            else:
                passed.append(rid)
        for rid in passed:  # its latest row is final: nothing more to copy for it
            del targets[rid]
        if not picked:
            return
        rows = copy_rows(sample_hidden_states, picked)
        for j, (rid, n) in enumerate(owners):
            self.latest[rid] = TappedRow(rows, j, n)


def copy_rows(states: torch.Tensor, picked: list[int]) -> torch.Tensor:
    """A copy of ``states[picked]`` (``picked`` ascending) that never waits for the device: a contiguous run of rows
    (every row, in the common step) is one slice copied on the device; otherwise the index goes up from pinned host
    memory without blocking (a pageable ``torch.tensor(..., device=cuda)`` would wait for the forward pass just
    queued)."""
    first, last = picked[0], picked[-1]
    if last - first + 1 == len(picked):
        return states[first : last + 1].clone()
    index = torch.tensor(picked, dtype=torch.long)
    if states.device.type == "cuda":
        index = index.pin_memory().to(states.device, non_blocking=True)
    return states.index_select(0, index)


PROCESSED_MODES = ("processed_logprobs", "processed_logits")


class LogprobsOnDemand:
    """The processed log-prob path only for the steps that return log-probs.

    With ``logprobs_mode`` set to a processed mode, vLLM builds one top-k/top-p sampler for every step: on CUDA the
    native one instead of FlashInfer's, and on every platform it computes a full-vocabulary float32 log-softmax per
    row whether any request asked for log-probs or not. This keeps that sampler for the steps whose batch asks for
    log-probs (``max_num_logprobs`` or ``logprob_token_ids`` set) and gives the others one built for raw log-probs,
    the sampler vLLM would pick without the mode. On CPU both draw the same tokens (the same noise, no extra draw),
    so a step's samples do not depend on which one ran. ``used`` counts the steps each served."""

    def __init__(self, sampler: Any) -> None:
        from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

        self.sampler = sampler
        self.processed = sampler.topk_topp_sampler
        self.plain = TopKTopPSampler("raw_logprobs", self.processed.use_fp64_gumbel)
        self.used = {"processed": 0, "plain": 0}
        self._inner = sampler.forward
        sampler.forward = self._forward

    @classmethod
    def install(cls, runner: Any) -> "LogprobsOnDemand | None":
        """On ``runner``'s sampler when its mode is a processed one (else None: nothing to save)."""
        sampler = runner.sampler
        return cls(sampler) if sampler.logprobs_mode in PROCESSED_MODES else None

    def uninstall(self) -> None:
        """The sampler as vLLM built it."""
        self.sampler.topk_topp_sampler = self.processed
        del self.sampler.forward

    def _forward(self, logits: torch.Tensor, sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        wants = sampling_metadata.max_num_logprobs is not None or bool(sampling_metadata.logprob_token_ids)
        kind = "processed" if wants else "plain"
        self.used[kind] += 1
        self.sampler.topk_topp_sampler = self.processed if wants else self.plain
        return self._inner(logits, sampling_metadata, *args, **kwargs)
