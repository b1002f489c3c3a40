"""The paper's runs as presets (+exp=paper_grpo, +exp=paper_dapo, model=qwen3_*, the evaluation presets and the
SLURM script): each composes and validates on CPU, config only, and holds every value the paper states (§5.1,
App. A.2, A.4) and the verl recipe values its comments name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from arrol_pl.analysis.eval_config import load_eval_config
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config

ROOT = Path(__file__).resolve().parents[3]
CONF = str(ROOT / "conf")
MODELS = {
    "qwen3_1_7b": "Qwen/Qwen3-1.7B-Base",
    "qwen3_4b": "Qwen/Qwen3-4B-Base",
    "qwen3_8b": "Qwen/Qwen3-8B-Base",
    "llama3_2_1b": "meta-llama/Llama-3.2-1B-Instruct",
}


def compose_run(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_run_config(compose("config", overrides=list(overrides)))


def assert_the_papers_values(run) -> None:
    """§5.1 and App. A.4, whatever the algorithm."""
    assert (run.data.name, run.data.heldout_name) == ("dapo_math", "math500")
    assert run.algo.group_size == 16 and run.algo.lr == 1e-6 and run.algo.max_response_tokens == 8192
    assert run.algo.clip_low == 0.2
    p = run.pruning
    assert (p.policy, p.keep_ratio, p.target_positive_ratio, p.balance_strength, p.num_bins) == (
        "arrol",
        0.5,
        0.5,
        0.5,
        128,
    )
    assert p.cold_start_steps == 20 and p.balance_target == "anchored" and p.screen.stages == "none"
    assert run.engine.detect_length == 512
    # how it runs: bf16, FSDP2 over one node's 8 GPUs, sleep mode, activation checkpointing
    assert run.engine.dtype == "bfloat16" and run.trainer.precision == "bf16-mixed"
    assert (run.trainer.accelerator, run.trainer.devices, run.trainer.strategy) == ("gpu", 8, "fsdp")
    assert run.engine.enable_sleep_mode and run.model.activation_checkpointing
    assert run.model.path == "Qwen/Qwen3-1.7B-Base" and run.head.hidden_dim == 1024  # model=hf's head


def test_paper_grpo_holds_the_papers_values_and_verls_grpo_example():
    run = compose_run("+exp=paper_grpo")
    assert_the_papers_values(run)
    a = run.algo
    assert a.name == "grpo" and a.clip_high == 0.2 and a.loss_agg_mode == "seq-mean-token-mean"
    # examples/grpo_trainer/run_qwen3-8b.sh
    assert (a.prompts_per_step, a.ppo_mini_batch_size, a.ppo_epochs) == (1024, 256, 1) and a.num_mini_batches == 4
    assert (a.kl_coef, a.kl_estimator, a.weight_decay) == (0.001, "k3", 0.01)
    assert run.engine.gpu_memory_utilization == 0.6 and a.micro_batch_tokens == 20480


def test_paper_dapo_holds_the_papers_values_and_verls_dapo_recipe():
    run = compose_run("+exp=paper_dapo")
    assert_the_papers_values(run)
    a = run.algo
    assert a.name == "dapo" and a.clip_high == 0.28 and a.loss_agg_mode == "token-mean"
    # recipe/dapo/test_dapo_7b_math.sh
    assert (a.prompts_per_step, a.ppo_mini_batch_size, a.num_mini_batches) == (512, 32, 16)
    assert (a.kl_coef, a.clip_ratio_c, a.weight_decay, a.overlong_cache_length) == (0.0, 10.0, 0.1, 4096)
    assert a.dynamic_sampling and not a.dynamic_sampling_refill  # refill picks groups on one rank only


@pytest.mark.slow  # a Hydra composition per row: outside the quick tier
@pytest.mark.parametrize("exp", ["paper_grpo", "paper_dapo"])
def test_the_baseline_rows_other_models_and_four_nodes_compose(exp, tmp_path):
    assert compose_run(f"+exp={exp}", "pruning=none").pruning.policy == "none"
    for model, hub_id in MODELS.items():
        run = compose_run(f"+exp={exp}", f"model={model}")
        assert run.model.path == hub_id and run.algo.group_size == 16  # the model preset changes the model only
    local = compose_run(f"+exp={exp}", "model=qwen3_8b", f"model.path={tmp_path}")
    assert local.model.path == str(tmp_path) and local.model.name == "qwen3-8b-base"
    assert compose_run(f"+exp={exp}", "trainer.num_nodes=4").trainer.ranks == 32


def test_model_hf_still_requires_its_path():
    with pytest.raises(ConfigError, match="model.path must be set"):
        compose_run("model=hf")


def test_a_hub_id_is_a_hub_id_and_a_local_directory_wins(tmp_path):
    from arrol_pl.models import hub

    assert all(hub.is_hub_id(h) for h in MODELS.values())
    assert not hub.is_hub_id(str(tmp_path)) and not hub.is_hub_id("/models/Qwen3-1.7B-Base")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        hub.config_json(str(tmp_path))
    # offline (the test session), a hub id whose files are not cached fails naming both ways on
    with pytest.raises(FileNotFoundError, match="hf download Qwen/Qwen3-8B-Base"):
        hub.config_json("Qwen/Qwen3-8B-Base")


# ---------------------------------------------------------------- evaluation (experiments/evaluate.py)


def compose_eval(name: str, *overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_eval_config(compose(name, overrides=list(overrides)))


@pytest.mark.slow  # a Hydra composition per table: outside the quick tier
def test_the_evaluation_presets_are_the_papers_tables(head_export):
    """Tables 1-2: avg@16 (MATH500, Minerva, OlympiadBench) and pass@16 (AMC, AIME) from k = 16 samples; Table 3:
    maj@32 from k = 32 on AMC and AIME; responses of at most 8,192 tokens, every problem, bf16."""
    cfg = compose_eval("evaluate_paper", f"checkpoint={head_export}", "datasets.math500.path=/data/math500.jsonl")
    assert list(cfg.datasets) == ["math500", "minerva", "olympiadbench", "amc23", "aime24", "aime25"]
    assert (cfg.k, cfg.max_tokens, cfg.limit, cfg.engine.dtype) == (16, 8192, None, "bfloat16")
    assert cfg.datasets["math500"].path == "/data/math500.jsonl" and cfg.datasets["aime25"].path is None
    tts = compose_eval("evaluate_paper_tts", f"checkpoint={head_export}")
    assert list(tts.datasets) == ["amc23", "aime24", "aime25"] and (tts.k, tts.max_tokens, tts.limit) == (
        32,
        8192,
        None,
    )
    with initialize_config_dir(config_dir=CONF, version_base=None):  # evaluate.yaml's run directory and chdir
        hydra = compose("evaluate_paper", overrides=[f"checkpoint={head_export}"], return_hydra_config=True).hydra
    assert hydra.run.dir.startswith("outputs/eval/") and hydra.job.chdir is False
    with pytest.raises(ConfigError, match="does not exist"):
        compose_eval("evaluate_paper", "checkpoint=/no/such/export")


# ---------------------------------------------------------------- the SLURM script
def test_the_slurm_script_launches_a_run_that_composes():
    """scripts/slurm/paper_grpo.sbatch: its overrides (shell defaults filled in) make a valid 4-node run, and it
    starts one torchrun per node with 8 ranks each."""
    text = (ROOT / "scripts" / "slurm" / "paper_grpo.sbatch").read_text()
    defaults = dict(re.findall(r"^(\w+)=\$\{\1:-([^}]*)\}", text, re.M))
    block = re.search(r"^OVERRIDES=\(\n(.*?)^\)", text, re.M | re.S).group(1)
    overrides = [
        re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), "x"), line.strip()) for line in block.splitlines()
    ]
    run = compose_run(*[o for o in overrides if not o.startswith("hydra.")])
    assert run.name == "paper-grpo" and run.trainer.ranks == 32 and run.algo.prompts_per_step % 32 == 0
    assert "#SBATCH --nodes=4" in text and "--nnodes 4 --nproc-per-node 8" in text
    assert "experiments/plan.py" in text and "experiments/run.py" in text
