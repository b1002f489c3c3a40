"""The engine and the quality head compute in float32 whatever autocast the caller runs under: Lightning runs a whole
``training_step`` under ``torch.autocast`` with ``trainer.precision=bf16-mixed`` (``"cuda"`` on GPUs, ``"cpu"``
here), which would otherwise put vLLM's linear layers and the head's scoring and training in bfloat16."""

from __future__ import annotations

import pytest
import torch

from arrol_pl.core.head_training import FeatureReplay, head_update
from arrol_pl.core.pruning import PrunerParams
from arrol_pl.core.quality_head import QualityHead

pytestmark = pytest.mark.engine

PROMPTS = ["Question: What is 12 + 35? Answer:", "The quick brown fox"]


def generate(engine):
    engine.seed_sampling(11)
    return engine.generate(
        PROMPTS,
        3,
        dict(max_tokens=10, temperature=1.0, ignore_eos=True),
        detect_length=4,
        pruner=PrunerParams(policy="random", keep_ratio=0.5, min_keep_per_group=0, seed=2),
    )


def test_generate_under_bf16_autocast_gives_the_float32_rollouts_features_and_scores(engine):
    plain = generate(engine)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = generate(engine)
        prompt_rows = engine.prompt_features(PROMPTS)
    for a, b in zip(plain.rollouts, mixed.rollouts):
        assert a.response_token_ids == b.response_token_ids and a.pruned == b.pruned
        assert a.feature.dtype == b.feature.dtype == torch.float32
        assert torch.equal(a.feature, b.feature)
        assert a.score == b.score
    assert prompt_rows.dtype == torch.float32
    assert torch.equal(prompt_rows, engine.prompt_features(PROMPTS))


def test_the_head_trains_in_float32_under_bf16_autocast():
    def train(autocast: bool) -> tuple[float, dict]:
        torch.manual_seed(0)
        head = QualityHead(64, 32)
        replay = FeatureReplay(256)
        replay.add(torch.randn(128, 64), torch.randint(0, 2, (128,)).float(), torch.ones(128))
        opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = head_update(head, opt, replay, 4, 32, torch.Generator().manual_seed(0))
        return loss, head.state_dict()

    (loss32, state32), (loss_mixed, state_mixed) = train(False), train(True)
    assert loss_mixed == loss32
    for key in state32:
        assert torch.equal(state32[key], state_mixed[key]), key
