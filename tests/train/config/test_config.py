import copy
import dataclasses
import functools
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf

from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import RunConfig, load_run_config

CONF = str(Path(__file__).resolve().parents[3] / "conf")
EXPERIMENTS = sorted(p.stem for p in (Path(CONF) / "exp").glob("*.yaml"))


@functools.cache
def _composed(overrides: tuple[str, ...], with_hydra: bool) -> DictConfig:
    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=with_hydra)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def composed(*overrides: str) -> DictConfig:
    """conf/config.yaml composed with ``overrides`` and Hydra's own node (``cfg.hydra.sweeper.params``, ...), read-only:
    composed once per command line in this module (a composition takes a tenth of a second; the tests here share
    many)."""
    return _composed(overrides, True)


@functools.cache
def _loaded(overrides: tuple[str, ...]) -> RunConfig:
    return load_run_config(_composed(overrides, False))


def compose_run(*overrides: str) -> RunConfig:
    """The typed run config of the command line ``overrides``, composed and validated once per command line in this
    module (a refusal is raised each time); each call gets its own copy."""
    return copy.deepcopy(_loaded(overrides))


def test_default_config_composes_and_validates():
    run = compose_run()
    assert run.algo.name == "grpo" and run.pruning.policy == "arrol" and run.pruning.gate_auc == 0.6
    assert run.pruning.gate_metric == "within"
    assert run.engine.detect_length < run.algo.max_response_tokens


SINGLE_RUN = {"bench_phases", "smollm2_setting", "paper_grpo", "paper_dapo"}
"""Presets that configure one run (read by a benchmark script, or the setting sweeps build on) rather than a sweep."""


@pytest.mark.slow  # two Hydra compositions per experiment: outside the quick tier
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes_and_validates(exp):
    cfg = composed(f"+exp={exp}")
    compose_run(f"+exp={exp}")
    sweep = dict(cfg.hydra.sweeper.params or {})
    assert bool(sweep) != (exp in SINGLE_RUN), f"exp={exp}: sweep {sweep}"
    for callback in (cfg.hydra.callbacks or {}).values():  # Hydra imports these only when the sweep ends
        module, _, name = callback._target_.rpartition(".")
        assert hasattr(importlib.import_module(module), name), f"exp={exp}: {callback._target_}"
    assert EXPERIMENTS == [
        "ablation_kappa",
        "bench_phases",
        "dapo_vs_arrol",
        "grpo_vs_arrol",
        "paper_dapo",
        "paper_grpo",
        "pruning_pays",
        "random_pruning",
        "seeds",
        "smollm2_balance",
        "smollm2_online",
        "smollm2_online_spread",
        "smollm2_screen",
        "smollm2_setting",
    ]


@pytest.mark.slow  # a Hydra composition per point (0.3 s each, 80 in all): outside the quick tier
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_point_of_an_experiments_sweep_is_a_valid_run(exp):
    sweep = dict(composed(f"+exp={exp}").hydra.sweeper.params or {})
    for key, values in sweep.items():
        for value in str(values).split(","):
            compose_run(f"+exp={exp}", f"{key}={value}")


def test_bench_preset_is_the_long_response_setting():
    run = compose_run("+exp=bench_phases")
    assert run.data.options["min_operands"] >= 8 and run.algo.max_response_tokens == 128
    assert run.engine.detect_length * 16 == run.algo.max_response_tokens  # the paper's 512 of 8192
    assert run.engine.max_num_seqs < run.algo.prompts_per_step * run.algo.group_size
    assert run.algo.kl_coef > 0  # a reference log-prob phase, as in Table 5


def test_balance_presets():
    """pruning=arrol (and the default's gate preset) balance with the anchored rule; the paper's Eq. 2 as written and
    the per-group rule are presets of their own, with the same κ."""
    for preset, target in (
        ("arrol", "anchored"),
        ("arrol_gated", "anchored"),
        ("arrol_eq2", "global"),
        ("arrol_group", "group"),
        ("arrol_spread", "spread"),
    ):
        run = compose_run(f"pruning={preset}")
        assert run.pruning.policy == "arrol" and run.pruning.balance_target == target, preset
        assert run.pruning.keep_ratio == compose_run().pruning.keep_ratio


def test_algo_presets():
    dapo = compose_run("algo=dapo")
    assert (dapo.algo.clip_low, dapo.algo.clip_high) == (0.2, 0.28)
    assert dapo.algo.loss_agg_mode == "token-mean" and dapo.algo.dynamic_sampling
    for run in (dapo, compose_run()):
        assert run.algo.clip_ratio_c == 3.0 and run.algo.rollout_is_cap is None
        assert run.algo.num_mini_batches == 1 and run.algo.ppo_epochs == 1
    run = compose_run(
        "algo.prompts_per_step=16",
        "algo.ppo_mini_batch_size=4",
        "algo.clip_ratio_c=null",
        "algo.kl_estimator=low_var_kl",
    )
    assert run.algo.num_mini_batches == 4 and run.algo.clip_ratio_c is None


@pytest.mark.parametrize(
    "override,key",
    [
        ("pruning.keep_ratio=0", "pruning.keep_ratio"),
        ("pruning.keep_ratio=1.2", "pruning.keep_ratio"),
        ("pruning.target_positive_ratio=1.5", "pruning.target_positive_ratio"),
        ("pruning.p_min=0.9", "pruning.keep_ratio"),  # κ must lie in [p_min, p_max]
        ("engine.detect_length=48", "engine.detect_length"),
        ("engine.detect_length=100", "engine.detect_length"),
        ("+pruning.kappa=0.5", "pruning.kappa"),
        ("pruning.policy=greedy", "pruning.policy"),
        ("algo.advantage=gae", "algo.advantage"),
        ("algo.group_size=1", "algo.group_size"),
        ("algo.loss_agg_mode=sum", "algo.loss_agg_mode"),
        ("algo.ppo_mini_batch_size=5", "algo.ppo_mini_batch_size"),  # does not divide prompts_per_step=16
        ("algo.ppo_mini_batch_size=0", "algo.ppo_mini_batch_size"),
        ("algo.ppo_epochs=0", "algo.ppo_epochs"),
        ("algo.clip_ratio_c=1.0", "algo.clip_ratio_c"),
        ("algo.rollout_is_cap=0", "algo.rollout_is_cap"),
        ("algo.kl_estimator=k4", "algo.kl_estimator"),
        ("trainer.precision=16-mixed algo.ppo_epochs=2", "trainer.precision"),
        ("trainer.strategy=deepspeed", "trainer.strategy"),
        ("trainer.eval_every=-1", "trainer.eval_every"),
        ("engine.max_num_seqs=0", "engine.max_num_seqs"),
        ("engine.block_size=0", "engine.block_size"),
        ("model=hf", "model.path"),  # the hf preset has no default path: never fall back to the tiny policy
        ("model.pretrained=gpt5", "model.pretrained"),
        ("model.trainable_layers=0", "model.trainable_layers"),
        ("model.reference_dtype=int8", "model.reference_dtype='int8'; choose one of"),
        ("pruning.gate_auc=0.3", "pruning.gate_auc"),
        ("head.steps=0", "head.steps must be >= 1"),
        ("head.replay=0", "head.replay must be >= 1"),
        ("trainer.eval_samples=0", "trainer.eval_samples"),
        ("data.prompt_template=no-placeholder", "data.prompt_template"),
        ("data.stop=['']", "data.stop"),
        ("reward.function=no_such_module_here:score", "reward.function=no_such_module_here:score: cannot import"),
        ("reward.function=exact_match", "reward.function=exact_match: 'exact_match' is not an import path"),
        ("reward.workers=-1", "reward.workers"),
        ("reward.timeout=0", "reward.timeout"),
        ("+trainer.reward_workers=2", "trainer.reward_workers: no such key"),  # moved to reward.workers
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        with_values(*override.split())


@functools.cache
def _default_values() -> dict:
    return OmegaConf.to_container(_composed((), False), resolve=True)


def with_values(*overrides: str) -> RunConfig:
    """The default composition with ``overrides`` set as Hydra reads them (its override grammar: ``key=value``,
    ``+key=value``), through the loader, without a composition of its own (a tenth of a second each): the refusals
    under test are the loader's. An override that selects a preset (``model=hf``) is composed."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    if any(Path(CONF, o.key_or_group).is_dir() for o in parsed):
        return compose_run(*overrides)
    values = copy.deepcopy(_default_values())
    for o in parsed:
        *sections, name = o.key_or_group.split(".")
        functools.reduce(dict.__getitem__, sections, values)[name] = o.value()
    return load_run_config(values)


def test_the_loaders_values_are_what_hydra_composes():
    """:func:`with_values` stands for a composition: the same run config for values of each kind."""
    overrides = (
        "trainer.precision=bf16-mixed",
        "data.stop=['\\n']",
        "algo.clip_ratio_c=null",
        "pruning.keep_ratio=0.5",
    )
    assert with_values(*overrides) == compose_run(*overrides)


def test_a_wrong_type_is_refused_while_hydra_composes_naming_the_key():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=r"algo\.group_size=many"):
        compose_run("algo.group_size=many")


def test_a_pretrained_policy_and_a_path_are_exclusive():
    with pytest.raises(ConfigError, match=r"model\.pretrained='smollm2' and model\.path"):
        compose_run("model=smollm2", "model.path=/models/x")


def test_smollm2_preset_pairs_a_pretrained_policy_with_a_raw_few_shot_task():
    run = compose_run("model=smollm2", "data=arithmetic_fewshot")
    assert run.model.pretrained == "smollm2" and run.model.path is None and run.model.warm_start.steps == 0
    fmt = run.data.prompt_format()
    assert not fmt.chat and fmt.stop == ("\n",)
    text = fmt.text("Compute 7 + 4.")
    assert text.startswith("Q: Compute 3 + 5.\nA: 3 + 5 = 8. The answer is \\boxed{8}.\n")
    assert text.endswith("Q: Compute 7 + 4.\nA:")
    assert fmt.sampling() == {"stop": ["\n"]}


def test_smollm2_online_preset_compares_at_equal_training_time_in_bf16():
    run = compose_run("+exp=smollm2_online")
    assert run.model.pretrained == "smollm2" and run.model.trainable_layers == 2
    assert run.trainer.max_minutes > 0 and run.trainer.max_steps * 10 > 60 * run.trainer.max_minutes  # time decides
    assert run.trainer.precision == "bf16-mixed" and run.engine.dtype == "bfloat16"  # float32 master weights
    assert run.algo.reuses_old_logprobs and run.engine.detect_length < run.algo.max_response_tokens


def test_the_spread_equal_time_preset_changes_only_the_pruning_and_runs_seed_major():
    base, run = compose_run("+exp=smollm2_online"), compose_run("+exp=smollm2_online_spread", "pruning=arrol_spread")
    assert (run.engine.detect_length, run.head.input, run.pruning.balance_target) == (12, "stats", "spread")
    assert run.trainer == base.trainer and run.algo == base.algo and run.model == base.model
    for exp, arms in (("smollm2_online", "none,arrol"), ("smollm2_online_spread", "none,arrol_spread")):
        params = composed(f"+exp={exp}").hydra.sweeper.params
        # each seed's two arms run back to back: a machine that drifts over the sweep slows a pair alike
        assert list(params) == ["trainer.seed", "pruning"] and params["pruning"] == arms


def test_the_engine_group_is_the_engines_own_config():
    from arrol_pl.engine.config import EngineConfig

    run = compose_run("engine.max_num_batched_tokens=512")
    assert type(run.engine) is EngineConfig and run.engine.max_num_batched_tokens == 512
    # the engine group holds engine settings only: the model, seed and head are the run's (model.*, trainer.seed,
    # head.*), handed to the engine when it starts; setting them here is an unknown key, which Hydra names
    from hydra.errors import ConfigCompositionException

    for key in ("engine.model=/models/x", "engine.seed=3", "engine.head_input=stats", "engine.logprobs_mode=final"):
        with pytest.raises(ConfigCompositionException, match=rf"Could not override '{key.split('=')[0]}'"):
            compose_run(key)


def test_the_heads_input_is_named_when_bad():
    assert compose_run().head.input == "last"  # the paper's
    with pytest.raises(ConfigError, match=r"^head\.input='hidden'; choose one of \['last', 'stats', 'last\+stats'\]"):
        compose_run("head.input=hidden")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["trainer.devices=2"], "trainer.strategy='auto' with trainer.devices × trainer.num_nodes = 2 ranks"),
        (["trainer.devices=2", "trainer.strategy=ddp"], "several ranks train with trainer.strategy=fsdp"),
        (
            ["trainer.devices=3", "trainer.strategy=fsdp", "algo.prompts_per_step=16", "pruning=arrol"],
            "algo.prompts_per_step=16 must be a multiple of the 3 ranks",
        ),
        (["trainer.num_nodes=0"], "trainer.num_nodes must be >= 1"),
    ],
)
def test_several_ranks_are_checked_before_any_model_loads(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        compose_run(*overrides)


def test_two_ranks_compose():
    run = compose_run("trainer.devices=2", "trainer.strategy=fsdp", "trainer.accelerator=cpu", "pruning=arrol")
    assert run.trainer.ranks == 2


def test_several_ranks_need_their_launcher(monkeypatch):
    """The ranks come from torchrun (experiments/run.py starts it on one node): a mismatch is named."""
    from arrol_pl.train.run.world import init_launcher_world

    run = compose_run("trainer.devices=2", "trainer.strategy=fsdp", "trainer.accelerator=cpu", "pruning=arrol")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="2 ranks, but the launcher started none"):
        init_launcher_world(run.trainer)


@pytest.mark.slow  # a Hydra composition per arm and order: outside the quick tier
def test_the_screen_preset_changes_only_the_arm_and_names_each_job_by_it():
    base = compose_run("+exp=smollm2_online")
    arms = {
        "grpo": ("grpo", "none", "none"),
        "dapo": ("dapo", "none", "none"),
        "arrol": ("grpo", "arrol", "none"),
        "arrol_screen_prompt": ("grpo", "arrol", "prompt"),
    }
    pilots = {"arrol_screen": ("grpo", "arrol", "detect"), "grpo_screen": ("grpo", "none", "prompt")}
    for arm, (algo, policy, stages) in {**arms, **pilots}.items():
        # in either order: a sweep's job lists its swept overrides (the seed, the arm) before the preset
        for overrides in (
            ("+exp=smollm2_screen", f"arm={arm}"),
            ("trainer.seed=1", f"arm={arm}", "+exp=smollm2_screen"),
        ):
            run = compose_run(*overrides)
            assert (run.algo.name, run.pruning.policy, run.pruning.screen.stages) == (algo, policy, stages), overrides
        assert run.trainer == dataclasses.replace(base.trainer, seed=run.trainer.seed) and run.engine == base.engine
        assert run.model == base.model
        # the preset's batch shape and sampling hold whatever the arm's algorithm preset says
        assert (run.algo.prompts_per_step, run.algo.temperature, run.algo.lr) == (8, 0.8, 1e-4)
    assert compose_run("+exp=smollm2_screen", "arm=dapo").algo.dynamic_sampling_refill
    assert compose_run("+exp=smollm2_screen").pruning.policy == "none"  # the preset's own arm: GRPO
    cfg = composed("+exp=smollm2_screen")
    assert list(cfg.hydra.sweeper.params) == ["trainer.seed", "arm"]  # seed-major
    assert cfg.hydra.sweeper.params["arm"] == ",".join(arms)  # the pilot arms run when named
    # a job's directory is named by its overrides: seeds run in different sessions never overwrite each other
    assert OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["subdir"] == "${hydra.job.override_dirname}"


@pytest.mark.slow  # a Hydra composition per arm and order: outside the quick tier
def test_the_pruning_pays_arms_differ_only_in_what_they_name():
    base = compose_run("+exp=pruning_pays")
    arms = {
        "grpo": (8, "none", "head", None),
        "grpo_g4": (4, "none", "head", None),
        "random": (8, "random", "head", None),
        "arrol": (8, "arrol", "head", None),
        "arrol_confidence": (8, "arrol", "confidence", None),
        "arrol_checker": (8, "arrol", "checker", None),
        "oracle": (8, "arrol", "oracle", 1.0),
    }
    for arm, expected in arms.items():
        orders = [("+exp=pruning_pays", f"arm={arm}")]
        if arm in ("grpo_g4", "oracle"):  # the arms that change a key the preset sets: in any order of overrides
            orders.append(("trainer.seed=2", f"arm={arm}", "+exp=pruning_pays"))
        for overrides in orders:
            run = compose_run(*overrides)
            p = run.pruning
            assert (run.algo.group_size, p.policy, p.scorer, p.oracle_auc) == expected, overrides
            assert run.study == "pruning_pays" and run.data.options["min_operands"] == 8, "the long-chain task"
            assert run.engine == base.engine and run.model == base.model
            assert run.trainer == dataclasses.replace(base.trainer, seed=run.trainer.seed)
    ladder = compose_run("+exp=pruning_pays", "arm=oracle", "pruning.oracle_auc=0.7")
    assert ladder.pruning.oracle_auc == 0.7 and ladder.trainer.max_minutes == 4
    assert base.engine.detect_length * 8 == base.algo.max_response_tokens, "L_detect = 1/8 of the response budget"
    with pytest.raises(ConfigError, match="it is a study arm only"):
        compose_run("+arm=oracle")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["pruning.screen.stages=both"], "pruning.screen.stages='both'"),
        (["pruning.screen.audit=2"], "pruning.screen.audit must be in [0, 1]"),
        (["algo=dapo", "pruning.screen.stages=prompt"], "are two ways of choosing the step's groups"),
        (["algo.dynamic_sampling_refill=true"], "but algo.dynamic_sampling=false"),
    ],
)
def test_screen_and_refill_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_run(*overrides)
    assert message in str(err.value)


PRESETS = sorted(str(p.relative_to(CONF)) for p in Path(CONF).glob("*/*.yaml"))


def _leaves(node: dict, prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.slow  # a copy of conf/ and a Hydra composition per preset: outside the quick tier
@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_states_only_what_it_changes(preset, tmp_path):
    """The typed configs hold every default: a preset line that repeats what the preset builds on (the typed
    defaults and what its own defaults list selects) is a second copy of a default, and fails here. What it builds
    on is composed from a copy of conf/ where the preset keeps its defaults list only."""
    group, name = preset.split("/")[0], Path(preset).stem
    text = (Path(CONF) / preset).read_text()
    body = yaml.safe_load(text) or {}
    bare = {"defaults": body.pop("defaults")} if "defaults" in body else {}
    body.pop("hydra", None)
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    header = "# @package _global_\n" if "@package _global_" in text else ""
    (conf / preset).write_text(header + yaml.safe_dump(bare))
    is_global = bool(header)
    defaults = yaml.safe_load((Path(CONF) / "config.yaml").read_text())["defaults"]
    selected = any(isinstance(d, dict) and group in d for d in defaults)  # model=, data=, ...; else +exp=, +arm=
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        base = compose("config", overrides=[f"{group}={name}" if selected else f"+{group}={name}"])
    base = base if is_global else base[group]
    restated = []
    for key, value in _leaves(body):
        before = OmegaConf.select(base, key, default="<absent>")
        if isinstance(before, (DictConfig, ListConfig)):
            before = OmegaConf.to_container(before)
        if before == value:
            restated.append(f"{key}: {value!r}")
    assert not restated, f"conf/{preset} restates what it builds on: {restated}"


def test_the_default_experiment_is_the_typed_defaults_and_the_gate():
    """conf/config.yaml selects presets that state nothing but the discrimination gate: ``make run`` runs RunConfig()
    as the dataclasses define it with ``pruning.gate_auc=0.6``, and a key the presets never mention is still
    overridable without a ``+``; ``pruning=arrol`` is the typed defaults to the last key (the paper's rule)."""
    from arrol_pl.tasks.arithmetic import ArithmeticConfig

    typed = dataclasses.asdict(load_run_config(OmegaConf.structured(RunConfig)))
    typed["data"]["options"] = dataclasses.asdict(ArithmeticConfig())  # data=arithmetic selects the task's own
    assert dataclasses.asdict(compose_run("pruning=arrol")) == typed
    typed["pruning"]["gate_auc"] = 0.6
    assert dataclasses.asdict(compose_run()) == typed
    run = compose_run("trainer.max_minutes=5", "engine.enable_prefix_caching=false")
    assert run.trainer.max_minutes == 5 and not run.engine.enable_prefix_caching


@pytest.mark.subprocess
def test_the_loader_imports_without_torch():
    code = (
        "import sys, arrol_pl.train.config.loader\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning', 'vllm'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"the loader pulled in heavy modules: {out.stdout}"


def test_the_scripts_shared_defaults_are_the_run_configs():
    """The evaluation's and the probe's sampling, and the probe's cache, are the run config's defaults (taken from its
    fields, so a training default changed changes theirs)."""
    from arrol_pl.analysis.eval_config import EvalConfig
    from arrol_pl.analysis.head_probe.config import ProbeConfig

    run = RunConfig()
    evaluation = EvalConfig(checkpoint="x")
    assert (evaluation.temperature, evaluation.top_p, evaluation.max_tokens, evaluation.limit) == (
        run.algo.temperature,
        run.algo.top_p,
        run.algo.max_response_tokens,
        run.data.num_heldout,
    )
    probe = ProbeConfig(policy="x")
    assert (probe.samples, probe.temperature, probe.max_tokens, probe.cache_dir) == (
        run.algo.group_size,
        run.algo.temperature,
        run.algo.max_response_tokens,
        run.model.cache_dir,
    )
