"""``model.activation_checkpointing``: the same loss and gradients as without it (a tiny Qwen3 on CPU, float32), on
one process and sharded with FSDP2 over two (gloo), and the trainer's module turning it on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_qwen3 import tiny_qwen3
from transformers import Qwen3ForCausalLM

from arrol_pl.train.policy.logprobs import make_micro_batches, response_log_probs

ROOT = Path(__file__).resolve().parents[3]


def tiny_policy() -> Qwen3ForCausalLM:
    return tiny_qwen3(vocab_size=96, num_hidden_layers=3).train()


def rows():
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 96, (n,), generator=g).tolist() for n in (4, 6, 5)]
    responses = [torch.randint(1, 96, (n,), generator=g).tolist() for n in (7, 3, 9)]
    return prompts, responses


def loss_and_grads(policy, checkpointing: bool):
    """A policy-gradient-shaped loss on response log-probs (the trainer's forward), and every gradient."""
    if checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    prompts, responses = rows()
    total = 0.0
    for mb in make_micro_batches(prompts, responses, 24, pad_id=0):
        lp = response_log_probs(policy, mb, temperature=0.9)
        loss = -(lp * torch.linspace(-1, 1, lp.shape[1])).sum() / mb.num_tokens
        loss.backward()
        total += float(loss.detach())
    return total, {n: p.grad.clone() for n, p in policy.named_parameters()}


def forwards_of_a_block(policy) -> list[int]:
    calls = [0]
    # a pre-hook: the recompute stops as soon as the last saved tensor is back, before any forward hook
    policy.model.layers[1].mlp.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_checkpointing_gives_the_same_loss_and_gradients():
    policy = tiny_policy()
    plain_calls = forwards_of_a_block(policy)
    plain_loss, plain = loss_and_grads(policy, False)
    policy = tiny_policy()
    ckpt_calls = forwards_of_a_block(policy)
    ckpt_loss, ckpt = loss_and_grads(policy, True)
    assert policy.is_gradient_checkpointing
    assert ckpt_calls[0] == 2 * plain_calls[0] > 0, "each block runs again in the backward"
    assert ckpt_loss == pytest.approx(plain_loss, abs=1e-6)
    assert plain.keys() == ckpt.keys()
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)


def test_the_module_turns_it_on_per_decoder_block():
    from arrol_pl.train.config.model import ModelConfig
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.step.module import ArrolModule

    for flag in (False, True):
        policy = tiny_policy()
        ArrolModule(RunConfig(model=ModelConfig(activation_checkpointing=flag)), policy, None, None, 0)
        assert policy.is_gradient_checkpointing is flag
        assert all(layer.gradient_checkpointing is flag for layer in policy.model.layers)


RANK = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    sys.path.insert(0, sys.argv[2])
    from test_activation_checkpointing import loss_and_grads, tiny_policy
    from arrol_pl.train.policy.sharding import full_value, shard_policy
    dist.init_process_group("gloo")
    policy = shard_policy(tiny_policy(), init_device_mesh("cpu", (2,)))
    loss, grads = loss_and_grads(policy, True)
    full = {n: full_value(g) for n, g in grads.items()}  # every rank takes part in each gather
    if dist.get_rank() == 0:
        torch.save({"loss": loss, "grads": full}, sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.subprocess
def test_checkpointing_under_fsdp2_gives_the_one_process_gradients(tmp_path):
    """Two ranks on the same rows: FSDP2 averages their (equal) gradients, so each full gradient must be the
    one-process gradient without checkpointing; the recompute re-gathers each block's sharded weights."""
    import warm_python  # not at the top: the ranks' scripts import this module without tests/ on their path

    plain_loss, plain = loss_and_grads(tiny_policy(), False)
    (tmp_path / "rank.py").write_text(RANK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    out = tmp_path / "rank0.pt"
    procs = [
        warm_python.Popen(
            [sys.executable, str(tmp_path / "rank.py"), str(out), str(Path(__file__).parent)],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            runtime_env=warm_python.LAUNCHED_ENV,
        )
        for r in range(2)
    ]
    try:
        logs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    sharded = torch.load(out, weights_only=True)
    assert sharded["loss"] == pytest.approx(plain_loss, abs=1e-6)
    for name in plain:
        torch.testing.assert_close(sharded["grads"][name], plain[name], rtol=1e-5, atol=1e-7, msg=name)
