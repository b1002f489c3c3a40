"""A weight sync that sends every weight (the trainer's, after which a level-2 sleep discards the engine's copy) cannot
leave one behind: a name the engine's model does not take and a weight, or a part of a fused one, that received nothing
are errors naming them (arrol_pl/engine/adapter/sync.py). The accounting on a small stand-in for vLLM's models first,
then on the session's real engine, whose weights every test puts back."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from arrol_pl.engine.adapter.sync import FullSync, WeightSyncError, checkpoint_names

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv_proj = nn.Linear(4, 12, bias=False)
        self.o_proj = nn.Linear(4, 4, bias=False)


class Fused(nn.Module):
    """vLLM's shape of a tied causal LM: fused ``qkv_proj``, an LM head that is the embedding under a second name."""

    packed_modules_mapping = PACKED

    def __init__(self, returns: set[str] | None = None) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(10, 4)
        self.model.attn = Attention()
        self.lm_head = nn.Module()
        self.lm_head.weight = self.model.embed_tokens.weight
        self.returns = returns

    def load_weights(self, weights):
        names = [name for name, _ in weights]
        return self.returns if self.returns is not None else {n for n in names if n != "lm_head.weight"}


EVERY = [
    "model.embed_tokens.weight",
    "model.attn.q_proj.weight",
    "model.attn.k_proj.weight",
    "model.attn.v_proj.weight",
    "model.attn.o_proj.weight",
]
VLLM_NAMES = {"model.embed_tokens.weight", "model.attn.qkv_proj.weight", "model.attn.o_proj.weight"}


def synced(model: Fused, names: list[str]) -> FullSync:
    sync = FullSync(model)
    with sync.loading(model):
        model.load_weights(sync.filter((name, torch.zeros(1)) for name in names))
    assert "load_weights" not in vars(model), "the model's own load_weights again after the sync"
    return sync


def test_a_fused_parameter_is_loaded_from_its_parts_names():
    assert checkpoint_names("model.layers.3.self_attn.qkv_proj.weight", PACKED) == [
        "model.layers.3.self_attn.q_proj.weight",
        "model.layers.3.self_attn.k_proj.weight",
        "model.layers.3.self_attn.v_proj.weight",
    ]
    assert checkpoint_names("model.layers.3.mlp.down_proj.weight", PACKED) == ["model.layers.3.mlp.down_proj.weight"]
    assert checkpoint_names("qkv_proj.bias", PACKED) == ["q_proj.bias", "k_proj.bias", "v_proj.bias"]


def test_every_name_once_passes_and_a_tied_weight_takes_either_name():
    synced(Fused(VLLM_NAMES), EVERY).check()
    synced(Fused(VLLM_NAMES), [*EVERY, "lm_head.weight"]).check()  # vLLM skips the alias: nothing is missing
    with_head = [n if n != "model.embed_tokens.weight" else "lm_head.weight" for n in EVERY]
    assert synced(Fused(VLLM_NAMES), with_head).problems() == []


def test_a_missing_part_of_a_fused_weight_is_named():
    sync = synced(Fused(VLLM_NAMES), [n for n in EVERY if "v_proj" not in n])
    with pytest.raises(WeightSyncError, match=r"sent nothing for 1 engine weight: model\.attn\.v_proj\.weight\."):
        sync.check()


def test_a_name_the_model_does_not_take_is_held_back_and_named_with_the_nearest():
    sync = synced(Fused(VLLM_NAMES), [*EVERY, "model.attn.o_proj.bias", "rotary.inv_freq"])
    assert sync.unknown == ["model.attn.o_proj.bias", "rotary.inv_freq"]
    problems = sync.problems()
    assert problems == [
        "sent 2 names that Fused has no weight for, held back: model.attn.o_proj.bias (nearest: "
        "model.attn.o_proj.weight), rotary.inv_freq"
    ]


def test_a_weight_vllm_did_not_load_though_it_was_sent_is_named():
    sync = synced(Fused({"model.embed_tokens.weight", "model.attn.qkv_proj.weight"}), EVERY)
    assert sync.problems() == ["vLLM did not load 1 engine weight the sync sent: model.attn.o_proj.weight"]
    assert synced(Fused(set()), ["model.attn.q_proj.weight"]).problems()[0].startswith("sent nothing for 4 ")


class Silent(Fused):
    def load_weights(self, weights):
        for _ in weights:
            pass


def test_a_model_that_reports_nothing_is_checked_by_the_names_alone():
    assert synced(Silent(), EVERY).problems() == []
    assert synced(Silent(), EVERY[1:]).problems() == ["sent nothing for 1 engine weight: model.embed_tokens.weight"]


# ---------------------------------------------------------------- the real engine (the session's)
PROMPTS = ["Question: What is 12 + 35? Answer:", "The quick brown fox"]


def greedy(engine) -> list[list[int]]:
    return [
        r.response_token_ids
        for r in engine.generate(PROMPTS, 1, dict(max_tokens=8, temperature=0.0, ignore_eos=True)).rollouts
    ]


@pytest.mark.engine
def test_a_full_sync_of_every_weight_passes_and_one_without_a_weight_or_with_a_stranger_is_named(
    engine, hf_policy, tiny_model_dirs
):
    from transformers import AutoModelForCausalLM

    state = hf_policy.state_dict()
    before = greedy(engine)
    updated = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["updated"], dtype=torch.float32).eval()
    try:
        engine.sync_weights(updated.state_dict().items(), every_weight=True)
        assert greedy(engine) != before
        engine.sync_weights(state.items(), every_weight=True)
        assert greedy(engine) == before

        dropped = "model.layers.0.self_attn.v_proj.weight"  # one part of the engine's fused qkv_proj
        with pytest.raises(WeightSyncError, match=rf"sent nothing for 1 engine weight: {dropped}\."):
            engine.sync_weights(((n, t) for n, t in state.items() if n != dropped), every_weight=True)
        with pytest.raises(WeightSyncError, match=r"sent nothing for 1 engine weight: model\.norm\.weight\."):
            engine.sync_weights(((n, t) for n, t in state.items() if n != "model.norm.weight"), every_weight=True)

        stranger = "model.layers.1.mlp.down_proj.bias"  # vLLM itself would skip an unexpected bias without a word
        with pytest.raises(WeightSyncError) as error:
            engine.sync_weights([*state.items(), (stranger, torch.zeros(engine.hidden_size))], every_weight=True)
        assert str(error.value).startswith(
            f"full weight sync into Qwen3ForCausalLM: sent 1 name that Qwen3ForCausalLM has no weight for, held back: "
            f"{stranger} (nearest: model.layers.1.mlp.down_proj.weight). The engine now holds weights"
        )
        assert greedy(engine) == before, "the stranger was held back: the others loaded"
        engine.sync_weights(((n, t) for n, t in state.items() if n != "model.norm.weight"))  # a partial sync: as before
    finally:
        engine.sync_weights(state.items(), every_weight=True)
    assert greedy(engine) == before
    assert not engine.llm.has_unfinished_requests()
