"""The memory plan (arrol_pl/train/memory/plan.py) against what PyTorch allocates and autograd keeps on CPU, on the
paper's models' real shapes (tests/fixtures/model_configs), and the refusal of a GPU run that cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config
from arrol_pl.train.memory.plan import GIB, GRAPH_POOL_BYTES, plan_memory
from arrol_pl.train.memory.shape import ModelShape, layer_activation_bytes, precision_bytes

ROOT = Path(__file__).resolve().parents[3]
CONF = str(ROOT / "conf")
FIXTURES = ROOT / "tests" / "fixtures" / "model_configs"
SMOLLM2 = sorted((ROOT / "outputs" / "cache").glob("smollm2-135m-instruct-*/done"))


def compose_run(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_run_config(compose("config", overrides=list(overrides)))


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def item(plan, label: str) -> int:
    return next(i.bytes for i in (*plan.resident, *plan.update.items) if i.label.startswith(label))


# ---------------------------------------------------------------- weights and AdamW state, counted by PyTorch
@pytest.mark.slow  # builds SmolLM2's weights and AdamW state (about 2 s): outside the quick tier
def test_weights_and_adamw_state_are_what_pytorch_allocates_for_smollm2():
    """SmolLM2-135M (its converted directory in outputs/cache when there, else built from the same config): the
    plan's weight and AdamW figures for one float32 rank are the bytes of its parameters and, after one optimizer
    step, of AdamW's two moments (the per-tensor step counters aside)."""
    if SMOLLM2:
        config = json.loads((SMOLLM2[0].parent / "config.json").read_text())
        policy = AutoModelForCausalLM.from_pretrained(SMOLLM2[0].parent, dtype=torch.float32)
    else:
        config = {
            "model_type": "llama",
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "head_dim": 64,
            "vocab_size": 49152,
            "tie_word_embeddings": True,
        }
        policy = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=torch.float32)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    policy(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    optimizer.step()
    weights = sum(p.numel() * p.element_size() for p in policy.parameters())
    moments = sum(
        s[k].numel() * s[k].element_size() for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")
    )
    plan = plan_memory(ModelShape.from_config(config), compose_run("trainer.precision=32-true"), 80 * GIB)
    assert item(plan, "policy weights") == weights
    assert item(plan, "AdamW moments") == moments == 2 * weights
    assert item(plan, "gradients") == sum(p.grad.numel() * p.grad.element_size() for p in policy.parameters())


@pytest.mark.parametrize(
    "cls,extra",
    [
        (Qwen3Config, {}),
        (Qwen3Config, {"tie_word_embeddings": True}),
        (LlamaConfig, {"attention_bias": True}),
        (Qwen2Config, {}),  # q/k/v biases, not named in its config
    ],
)
def test_parameter_counts_follow_the_architecture(cls, extra):
    config = cls(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        **extra,
    )
    model = AutoModelForCausalLM.from_config(config)
    shape = ModelShape.from_config(config.to_dict())
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.block_params == sum(p.numel() for p in model.model.layers[0].parameters())


@pytest.mark.parametrize(
    "name,billions,kv_kib",
    [
        ("qwen3-1.7b", 1.72, 112),
        ("qwen3-4b", 4.02, 144),
        ("qwen3-8b", 8.19, 144),
        ("llama-3.2-1b", 1.24, 32),
        ("llama-3.2-3b", 3.21, 112),
    ],
)
def test_the_paper_models_have_their_published_sizes(name, billions, kv_kib):
    """Parameter counts as the model cards give them (Qwen3: 1.7B, 4.0B, 8.2B; Llama 3.2: 1.23B, 3.21B) and the
    KV cache per token in bf16: 2 × layers × kv heads × head_dim × 2 bytes."""
    shape = ModelShape.from_config(fixture(name))
    assert shape.params / 1e9 == pytest.approx(billions, abs=0.01)
    assert shape.kv_bytes_per_token(2) == kv_kib * 1024


# ---------------------------------------------------------------- activations, counted by autograd
def saved_bytes(config, tokens: int, precision: str, checkpointing: bool) -> int:
    """Bytes of the tensors autograd keeps for one forward (storages counted once; parameters excluded)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            storages[ptr] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            model.model(input_ids=ids, use_cache=False)  # the blocks; the LM head is planned apart
    return sum(storages.values())


def small(cls, layers: int):
    return cls(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    )


@pytest.mark.parametrize("cls", [Qwen3Config, LlamaConfig])
@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_activation_bytes_per_token_and_layer_match_what_autograd_keeps(cls, precision):
    """Per token and decoder block (the slope over tokens of one more layer's saved bytes), the formula is within
    10 % of autograd's; under autocast each block also keeps a 16-bit copy of its weights (the constant term); with
    checkpointing a block keeps its input alone, r·h bytes per token."""
    p = precision_bytes(precision)
    shape = ModelShape.from_config(small(cls, 1).to_dict())

    def per_layer(tokens: int, checkpointing: bool = False) -> int:
        return saved_bytes(small(cls, 2), tokens, precision, checkpointing) - saved_bytes(
            small(cls, 1), tokens, precision, checkpointing
        )

    short, long = per_layer(64), per_layer(128)
    slope = (long - short) / 64
    assert slope == pytest.approx(layer_activation_bytes(shape, p.residual, p.compute), rel=0.10)
    copies = short - 64 * slope
    assert copies == pytest.approx(shape.block_params * p.compute if p.autocast else 0, abs=0.05 * shape.block_params)
    assert per_layer(64, True) == 64 * p.residual * shape.hidden_size


# ---------------------------------------------------------------- the paper's runs, and the refusal
@pytest.mark.parametrize(
    "model,fixture_name",
    [
        ("qwen3_1_7b", "qwen3-1.7b"),
        ("qwen3_4b", "qwen3-4b"),
        ("llama3_2_1b", "llama-3.2-1b"),
        ("qwen3_8b", "qwen3-8b"),
    ],
)
def test_the_paper_grpo_run_on_80_gib(model, fixture_name):
    run = compose_run("+exp=paper_grpo", f"model={model}")
    plan = plan_memory(ModelShape.from_config(fixture(fixture_name)), run, 80 * GIB)
    assert plan.fits, plan.render()
    # kl_coef 0.001: a reference in bf16, sharded over the 8 ranks like the policy
    assert item(plan, "reference policy") == 2 * plan.shape.params // 8
    assert item(plan, "policy weights") == 4 * plan.shape.params // 8
    assert plan.activations[True] < plan.activations[False] / 5
    assert "model.activation_checkpointing=true" in plan.render()


def test_the_8b_update_peaks_in_the_log_prob_step_and_fsdp2_holds_the_root_gradients_unsharded():
    """The update's three moments for Qwen3-8B on 8 ranks: the log-prob step's backward (the bf16 logits and their
    gradient, one float32 chunk) is the peak; a block's backward holds the LM head's unsharded float32 gradient,
    the root's reduce-scatter its gradients twice over. One rank has neither; with the root frozen
    (model.trainable_layers) neither does FSDP2."""
    shape = ModelShape.from_config(fixture("qwen3-8b"))
    plan = plan_memory(shape, compose_run("+exp=paper_grpo", "model=qwen3_8b"), 80 * GIB)
    tokens, v, h = 20480, shape.vocab_size, shape.hidden_size
    assert plan.update.name == "update (engine asleep), at the log-prob step's backward"
    assert item(plan, "logits and their gradient") == 2 * 2 * tokens * v
    assert item(plan, "log-softmax chunk") == (2**25 // v) * v * 6
    assert item(plan, "activations: block inputs") == tokens * 4 * h * shape.num_layers
    block, root = plan.other_moments
    assert block.name.endswith("a block's backward") and root.name.endswith("the root's reduce-scatter")
    assert next(i.bytes for i in block.items if i.label.startswith("FSDP2 LM head")) == 4 * v * h
    assert next(i.bytes for i in root.items if i.label.startswith("FSDP2 root")) == 2 * 4 * shape.root_params
    assert plan.update.bytes > block.bytes > root.bytes
    assert "at a block's backward: " in plan.render() and "FSDP2 LM head gradient (unsharded)" in plan.render()
    one = plan_memory(
        shape, compose_run("+exp=paper_grpo", "model=qwen3_8b", "trainer.devices=1", "trainer.strategy=auto"), 80 * GIB
    )
    frozen_root = plan_memory(
        shape, compose_run("+exp=paper_grpo", "model=qwen3_8b", "model.trainable_layers=4"), 80 * GIB
    )
    for other in (one, frozen_root):
        assert len(other.other_moments) == 1
        assert not any(i.label.startswith("FSDP2 LM head") for i in other.other_moments[0].items)


def test_without_kl_the_8b_dapo_run_fits_and_one_rank_shards_nothing():
    run = compose_run("+exp=paper_dapo", "model=qwen3_8b")
    plan = plan_memory(ModelShape.from_config(fixture("qwen3-8b")), run, 80 * GIB)
    assert plan.fits, plan.render()
    assert not any(i.label.startswith("reference") for i in plan.resident)
    one = plan_memory(
        plan.shape,
        compose_run("+exp=paper_dapo", "model=qwen3_8b", "trainer.devices=1", "trainer.strategy=auto"),
        80 * GIB,
    )
    assert item(one, "policy weights") == 4 * plan.shape.params and not one.fits
    assert not any(i.label.startswith("FSDP2") for i in one.update.items)


def test_a_gpu_run_that_cannot_fit_is_refused_before_anything_loads(tmp_path, monkeypatch):
    from arrol_pl.train.memory import check as memory_check
    from arrol_pl.train.run import prelaunch

    model_dir = tmp_path / "Qwen3-8B-Base"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(fixture("qwen3-8b")))
    # the 8B run without activation checkpointing: its activations at 20k tokens a micro-batch do not fit
    run = compose_run(
        "+exp=paper_grpo", "model=qwen3_8b", f"model.path={model_dir}", "model.activation_checkpointing=false"
    )
    with pytest.raises(ConfigError, match="does not fit in GPU memory") as err:
        memory_check.check_memory(run, 80 * GIB)
    assert "model.activation_checkpointing=true" in str(err.value) and "algo.kl_coef=0" in str(err.value)
    memory_check.check_memory(compose_run("+exp=paper_grpo", "model=qwen3_8b", f"model.path={model_dir}"), 80 * GIB)
    # a float32 reference is named as one way to fit
    one = plan_memory(
        ModelShape.from_config(fixture("qwen3-8b")),
        compose_run(
            "+exp=paper_grpo",
            "model=qwen3_8b",
            "model.reference_dtype=float32",
            "trainer.devices=1",
            "trainer.strategy=auto",
        ),
        80 * GIB,
    )
    assert not one.fits and "model.reference_dtype=bfloat16" in one.render()
    # through preflight, as experiments/run.py calls it: with a GPU "visible", refused before the data is read
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: type("P", (), {"total_memory": 80 * GIB}))
    monkeypatch.setattr(prelaunch, "load_splits", lambda _: pytest.fail("the data was read first"))
    with pytest.raises(ConfigError, match="does not fit in GPU memory"):
        prelaunch.preflight(run, tmp_path / "out")
    # a hub id whose config.json is neither cached nor reachable (offline) is refused naming the ways on
    with pytest.raises(ConfigError, match="hf download Qwen/Qwen3-8B-Base"):
        memory_check.check_memory(compose_run("+exp=paper_grpo", "model=qwen3_8b"), 80 * GIB)
    # a CPU run is never refused: its plan is informational
    monkeypatch.undo()
    memory_check.check_memory(
        compose_run("+exp=paper_grpo", "model=qwen3_8b", f"model.path={model_dir}", "trainer.accelerator=cpu")
    )


def test_plan_cli_prints_the_plan_and_exits_by_the_verdict(capsys, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("plan_cli", ROOT / "experiments" / "plan.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert cli.main(["+exp=paper_grpo", "--config-json", str(FIXTURES / "qwen3-1.7b.json")]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-1.7B-Base (1.72 B parameters" in out and "verdict: fits in 80.0 GiB" in out
    assert (
        cli.main(
            [
                "+exp=paper_grpo",
                "model=qwen3_8b",
                "model.activation_checkpointing=false",
                "--gpu-gib",
                "80",
                "--config-json",
                str(FIXTURES / "qwen3-8b.json"),
            ]
        )
        == 1
    )
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert cli.main(["+exp=paper_grpo", "--gpu-gib", "141", "--config-json", str(FIXTURES / "qwen3-8b.json")]) == 0
    assert cli.main(["algo.group_size=1"]) == 2
    assert "algo.group_size must be >= 2" in capsys.readouterr().err
    # the default experiment's tiny policy needs no file
    assert cli.main([]) == 0 and "tiny policy" in capsys.readouterr().out


@pytest.mark.subprocess
def test_the_plan_needs_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, arrol_pl.train.memory.plan; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'vllm'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_sync_and_the_sleeping_engine_are_counted():
    """The weight sync is a phase of its own: the engine's weights woken without the KV cache, the CUDA-graph pool
    that sleep does not free, and the embedding twice (the sync's cast copy and vLLM's layerwise reload of its
    layer; with several ranks also this rank's cast shard). The pool stays through the update too; an eager
    engine has none, and an engine that never sleeps keeps its whole share through the sync."""
    shape = ModelShape.from_config(fixture("qwen3-8b"))
    plan = plan_memory(shape, compose_run("+exp=paper_grpo", "model=qwen3_8b"), 80 * GIB)
    embedding = shape.vocab_size * shape.hidden_size * 2
    labels = {i.label: i.bytes for i in plan.sync.items}
    assert labels["engine weights (woken before the sync)"] == shape.params * 2
    assert labels["sync: the embedding, cast and gathered"] == embedding + embedding // 8
    assert labels["sync: vLLM's reload of that layer"] == embedding
    assert labels["engine CUDA-graph pool"] == GRAPH_POOL_BYTES
    assert any(i.label == "engine CUDA-graph pool" for i in plan.update.items)
    assert plan.peak == max(plan.generation.bytes, plan.update.bytes, plan.sync.bytes)
    assert "weight sync: resident +" in plan.render()
    eager_awake = plan_memory(
        shape,
        compose_run(
            "+exp=paper_grpo",
            "model=qwen3_8b",
            "engine.enforce_eager=true",
            "engine.enable_sleep_mode=false",
            "trainer.devices=1",
            "trainer.strategy=auto",
        ),
        141 * GIB,
    )
    assert not any("graph" in i.label for phase in eager_awake.phases for i in phase.items)
    labels = {i.label: i.bytes for i in eager_awake.sync.items}
    assert labels["engine share"] == eager_awake.engine_budget and labels["sync: the embedding, cast"] == embedding
    # a sync that alone does not fit is a problem named by its phase
    tight = plan_memory(
        shape,
        compose_run(
            "+exp=paper_grpo", "model=qwen3_8b", "engine.gpu_memory_utilization=0.9", "engine.enable_sleep_mode=false"
        ),
        80 * GIB,
    )
    assert any(p.startswith("weight sync needs") for p in tight.problems), tight.problems


def test_the_plans_in_the_docs_are_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location("write_plan_docs", ROOT / "experiments" / "write_plan_docs.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0, "run: python experiments/write_plan_docs.py"
    assert "| weight sync | peak | fits |" in script.PAGE.read_text()
