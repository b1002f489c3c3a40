"""What the policy sends the engine, and how several ranks load it.

- A weight sync casts and gathers each tensor once, in the engine's dtype, with the round-to-nearest-even vLLM's
  own load applies (a float32 engine gets the very tensors); a tied LM head, the embedding under a second name,
  follows it as the same tensor.
- Several ranks: rank 0 loads the checkpoint, the others build the model on the meta device, and after FSDP2
  every rank holds the one-rank weights, buffers and ties; the sharded bfloat16 sync gathers the one-rank cast.
- A real bfloat16 engine on a tied model computes bitwise the same after the bfloat16 sync as after a float32
  one (on CPU it serves the logits from a copy of the head it rebuilds only when ``lm_head.weight`` arrives).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_distributed import launch
from tiny_qwen3 import tiny_qwen3
from transformers import AutoModelForCausalLM, Qwen3ForCausalLM

from arrol_pl.train.policy.weights import engine_weights, freeze_lower_layers, policy_weights

REPO = Path(__file__).parents[3]


def tiny(tied: bool, seed: int = 0) -> Qwen3ForCausalLM:
    return tiny_qwen3(seed, tie_word_embeddings=tied)


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_head_follows_the_embedding_as_the_same_tensor(tied):
    model = tiny(tied)
    sent = list(policy_weights(model))
    names = [n for n, _ in sent]
    assert sorted(names) == sorted(model.state_dict())
    params = dict(model.named_parameters(remove_duplicate=False))
    assert all(t.data_ptr() == params[n].data_ptr() and not t.requires_grad for n, t in sent)
    embedding = names.index("model.embed_tokens.weight")
    assert (names[embedding + 1] == "lm_head.weight") is tied
    cast = list(engine_weights(model, torch.bfloat16))
    assert [n for n, _ in cast] == names
    assert (cast[embedding][1] is cast[names.index("lm_head.weight")][1]) is tied  # one cast (one gather)


def test_a_float32_engine_gets_the_very_tensors():
    model = tiny(tied=True)
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, tensor in engine_weights(model, torch.float32):
        assert tensor.dtype == torch.float32 and tensor.data_ptr() == params[name].data_ptr(), name


def test_the_bfloat16_cast_rounds_to_nearest_even_as_the_engine_would():
    model = tiny(tied=True)
    # exact halfway points between bfloat16 neighbours (7 mantissa bits): ties go to the even neighbour
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2 + 2**-7])
    with torch.no_grad():
        model.model.norm.weight[:4] = ties
    sent = dict(engine_weights(model, torch.bfloat16))
    assert sent["model.norm.weight"][:4].tolist() == [1.0, 1 + 2**-6, -1.0, 2.0]
    for name, param in model.named_parameters():
        # vLLM loads a float32 tensor into its bfloat16 parameter with copy_
        engine_side = torch.empty_like(param, dtype=torch.bfloat16).copy_(param.detach())
        assert sent[name].dtype == torch.bfloat16 and torch.equal(sent[name], engine_side), name


def test_a_partly_frozen_policy_sends_its_trained_tensors_only():
    model = tiny(tied=True)
    freeze_lower_layers(model, 1)
    names = [n for n, _ in engine_weights(model, torch.bfloat16)]
    assert names and all(n.startswith(("model.layers.1.", "model.norm.")) for n in names)


RANK = """
import sys
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from arrol_pl.train.policy.sharding import full_weights, load_on_rank0, shard_from_rank0
from arrol_pl.train.policy.weights import engine_weights

path, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2,))
saved = {}
for dtype in (torch.float32, torch.bfloat16):  # the policy, a reference in model.reference_dtype
    model = load_on_rank0(path, dtype)
    assert next(model.parameters()).is_meta == (rank != 0)
    shard_from_rank0(model, mesh)
    assert model.lm_head.weight is model.model.embed_tokens.weight, "the tie was lost"
    sent = dict(engine_weights(model, torch.bfloat16))
    assert sent["lm_head.weight"] is sent["model.embed_tokens.weight"], "the tied head was gathered twice"
    saved[str(dtype)] = {"full": {k: v.clone() for k, v in full_weights(iter(model.state_dict().items()))},
                         "buffers": {k: v.clone() for k, v in model.named_buffers()},
                         "sent": {k: v.clone() for k, v in sent.items()}}
torch.save(saved, f"{out}.rank{rank}")
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_ranks_load_on_rank_0_and_hold_the_one_rank_weights(tmp_path):
    tiny(tied=True).save_pretrained(tmp_path / "policy")
    launch(["-c", RANK, str(tmp_path / "policy"), str(tmp_path / "out")], 2, timeout=120)
    for dtype in (torch.float32, torch.bfloat16):
        one = AutoModelForCausalLM.from_pretrained(tmp_path / "policy", dtype=dtype)
        for rank in range(2):
            got = torch.load(tmp_path / f"out.rank{rank}", weights_only=True)[str(dtype)]
            assert got["full"].keys() == one.state_dict().keys()
            for name, tensor in one.state_dict().items():
                assert tensor.dtype == dtype and torch.equal(got["full"][name], tensor), (rank, name)
            for name, buffer in one.named_buffers():  # the rotary inv_freq: in no state dict
                assert torch.equal(got["buffers"][name], buffer), (rank, name)
            assert sorted(got["sent"]) == sorted(one.state_dict())
            for name, tensor in one.state_dict().items():
                assert torch.equal(got["sent"][name], tensor.to(torch.bfloat16)), (rank, name)


ENGINE = """
import sys
import torch
from transformers import AutoModelForCausalLM
from arrol_pl.engine import ArrolEngine, EngineConfig, adapter
from arrol_pl.train.policy.weights import engine_weights

start, updated_dir = sys.argv[1], sys.argv[2]
engine = ArrolEngine(start, EngineConfig(dtype="bfloat16", max_model_len=128))
assert engine.dtype == torch.bfloat16
vllm_model = adapter.model_runner(engine.llm).model
updated = AutoModelForCausalLM.from_pretrained(updated_dir, dtype=torch.float32)
vocab = updated.config.vocab_size


def held():
    # On CPU vLLM repacks its bfloat16 linear weights for oneDNN (the parameters left are empty), and pads the
    # vocabulary: compare the tensors it keeps readable, on the real vocabulary, and what the weights produce.
    params = {n: p.detach()[:vocab].clone() for n, p in vllm_model.named_parameters(remove_duplicate=False)
              if p.numel()}
    rollouts = engine.generate(["1 + 2 = 3. 4 + 5 =", "The quick brown fox"], 1,
                               {"max_tokens": 8, "temperature": 0.0, "ignore_eos": True}, logprobs_topk=5).rollouts
    return params, [(r.response_token_ids, r.logprobs, r.feature) for r in rollouts]


def same(a, b):
    return a[0].keys() == b[0].keys() and all(torch.equal(a[0][n], b[0][n]) for n in a[0]) and all(
        x[0] == y[0] and x[1] == y[1] and torch.equal(x[2], y[2]) for x, y in zip(a[1], b[1]))


before = held()
engine.sync_weights(updated.state_dict().items())  # float32, the tied head included: vLLM casts
cast_by_vllm = held()
assert not same(before, cast_by_vllm)
engine.sync_weights(AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32).state_dict().items())
assert same(held(), before)
engine.sync_weights(engine_weights(updated, engine.dtype), every_weight=True)  # bfloat16, each tensor cast once;
# every weight of a tied model, both names of the tied one included: the check of a full sync passes
sent_cast = held()
assert same(sent_cast, cast_by_vllm)
embedding = updated.model.embed_tokens.weight.detach().to(torch.bfloat16)
assert torch.equal(sent_cast[0]["model.embed_tokens.weight"], embedding)
assert all(torch.equal(p, embedding) for n, p in sent_cast[0].items() if n.startswith("lm_head"))
engine.close()
print("same weights")
"""


@pytest.mark.engine
def test_a_bfloat16_engine_computes_the_same_whichever_side_casts(tiny_model_dirs):
    from arrol_pl.models import build_tiny_model

    root = Path(tiny_model_dirs["policy"]).parent
    start, updated = (
        build_tiny_model(
            tiny_model_dirs["tokenizer"], root, max_position_embeddings=128, tie_word_embeddings=True, seed=seed
        )
        for seed in (0, 1)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # In its own process: this one may hold the shared engine, and vLLM starts one engine at a time.
    out = subprocess.run(
        [sys.executable, "-c", ENGINE, str(start), str(updated)], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0 and "same weights" in out.stdout, out.stderr[-4000:]
