"""The memory check before a GPU run starts: the policy's ``config.json`` (read without loading the model) and
its plan (:mod:`.plan`) against the GPU it will run on; a run that cannot fit is refused with the plan.

Decisions:
- **Only GPU runs are refused.** On CPU the plan is informational (``experiments/plan.py`` prints it); a GPU run
  where no GPU is visible is left to Lightning's own refusal.
- **This rank's GPU, by index**, read without creating a CUDA context: the ranks' world does not exist yet.
"""

from __future__ import annotations

import os
from typing import Any

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import RunConfig


def policy_config(run: RunConfig) -> tuple[str, dict[str, Any]] | None:
    """The policy's name and ``config.json`` contents, read without loading it (a hub id's file alone is fetched);
    the tiny policy's from its settings (its vocabulary at its upper bound); None for a ``model.pretrained``
    policy (converted on first use; 135M parameters)."""
    m = run.model
    if m.path is not None:
        from arrol_pl.models import hub

        try:
            return m.path, hub.config_json(m.path)
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from None
    if m.pretrained is not None:
        return None
    t = m.tiny
    return "tiny policy", {
        "model_type": "qwen3",
        "hidden_size": t.hidden_size,
        "intermediate_size": 3 * t.hidden_size,
        "num_hidden_layers": t.num_layers,
        "num_attention_heads": t.num_heads,
        "num_key_value_heads": t.num_kv_heads,
        "head_dim": t.head_dim,
        "vocab_size": t.vocab_size,
    }


def check_memory(run: RunConfig, gpu_bytes: int | None = None) -> None:
    """Refuse a GPU run whose memory plan (:mod:`arrol_pl.train.memory.plan`) does not fit its GPU: ConfigError
    with the plan, before anything loads. ``gpu_bytes``: the GPU's size (None: the visible device's). Runs on
    CPU, and a GPU run where no GPU is visible (Lightning refuses it), are not checked."""
    import torch

    from arrol_pl.train.memory.plan import plan_memory
    from arrol_pl.train.memory.shape import ModelShape

    if gpu_bytes is None:
        wants_gpu = run.trainer.accelerator in ("gpu", "cuda", "auto")
        if not (wants_gpu and torch.cuda.is_available()):
            return
        # this rank's GPU, by index: reading its properties creates no CUDA context (the world does not exist yet)
        gpu_bytes = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", 0))).total_memory
    found = policy_config(run)
    if found is None:
        return
    plan = plan_memory(ModelShape.from_config(found[1], found[0]), run, gpu_bytes)
    if not plan.fits:
        raise ConfigError(
            f"the run does not fit in GPU memory (experiments/plan.py prints this plan):\n{plan.render()}"
        )
