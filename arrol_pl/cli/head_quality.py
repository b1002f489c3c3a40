"""``arrol head-quality policy=<run>/export [overrides]`` (= ``python experiments/head_quality.py ...``): the quality
head vs DeepConf trace confidence at several detection lengths (paper Fig. 2(b–d), Table 4 and Table 3 by replay),
with Hydra (``conf/probe.yaml``).

    arrol head-quality policy=outputs/runs/<run>/export
    arrol head-quality policy=smollm2 data=arithmetic_fewshot max_tokens=32 temperature=0.8 \\
        data.num_heldout=160 hydra.run.dir=outputs/head_quality/smollm2

One fixed set of rollouts on held-out problems: ``samples`` per problem from the vLLM engine, no pruning, top-20
log-probs per token; final correctness from math-verify. ``data=`` is the trainer's data group (task options,
prompt template, chat-template switch, stop strings; ``data.num_heldout`` problems); ``policy`` is a model directory
or ``smollm2`` (the packaged SmolLM2-135M-Instruct, converted on first use). For each detection length
L = fraction · ``max_tokens`` and each head input of ``features`` (the paper's ``last`` hidden state, a ``mean`` over
the prefix, a ``middle`` layer, the prefix log-prob ``stats``, ``last+stats``), a fresh quality head is trained on
the features of some problems and tested on others, against DeepConf confidence over the same first L tokens of the
same test rollouts (see :mod:`arrol_pl.analysis.head_probe` for the decisions), within groups too; and the engine's
pruning rule is replayed on the test groups with that head (ARRoL vs random, κ = 0.5). When ``policy`` is a run's
``export/`` dir, the head that run trained online is also scored, at the run's own L_detect, on every eligible
rollout.

Writes ``head_quality.json`` (settings, one row per L for the paper's input, every input's rows, the online head)
and ``head_quality.png`` (score distributions of correct vs incorrect rollouts per L, and Spearman vs L) into the
run directory (``hydra.run.dir``, default ``outputs/head_quality/<time>``) and prints the tables. Every key and its
default is a field of ProbeConfig (arrol_pl/analysis/head_probe/config.py); a bad value fails in one line naming
its key (exit 2) before any model loads.
"""

from __future__ import annotations

import os
from pathlib import Path

import arrol_pl.engine  # noqa: E402,F401  (sets the environment the engine needs before vLLM loads)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# One torch thread (vLLM's CPU default): with more, OpenMP spin-waits make step times erratic.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from arrol_pl.analysis.head_probe.config import ProbeConfig, load_probe_config  # noqa: E402  (registers probe_schema)
from arrol_pl.cli import hydra_app  # noqa: E402
from arrol_pl.tasks.user_function import MATH_VERIFY  # noqa: E402
from arrol_pl.train.config.loader import ConfigError  # noqa: E402


def heldout_problems(cfg) -> list:
    """The probe's problems: the first ``data.num_heldout`` held-out ones of ``cfg.data``; ConfigError naming the
    data keys when there are none or fewer than two (the probe splits by problem)."""
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.registry import load_heldout

    try:
        problems = load_heldout(cfg.data).problems
    except (TypeError, ValueError, OSError, DatasetUnavailableError) as exc:
        raise ConfigError(f"data: {exc}") from None
    if len(problems) < 2:
        raise ConfigError(
            f"data: {len(problems)} held-out problems (data.heldout_path / data.heldout_name, "
            "data.num_heldout); the probe splits by problem (>= 2)"
        )
    return problems


def task(raw: DictConfig) -> None:
    """Hydra's task: check the config and read the problems, then probe into the run directory."""
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        cfg = load_probe_config(raw)
        problems = heldout_problems(cfg)
        prompt_format = cfg.data.prompt_format()
    except ConfigError as exc:
        hydra_app.refuse(exc, out_dir)

    from arrol_pl.analysis.head_probe.run import ProbeJob, run_probe

    run_probe(
        ProbeJob(
            policy=Path(cfg.policy),
            cache_dir=cfg.cache_dir,
            out=out_dir,
            command=" ".join([hydra_app.INVOCATION.prog, *hydra_cfg.overrides.task]),
            problems=problems,
            prompt_format=prompt_format,
            samples=cfg.samples,
            max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            lengths=cfg.lengths,
            fractions=cfg.fraction_values,
            features=list(cfg.features),
            settings=cfg.settings,
            dtype=cfg.dtype,
            votes=cfg.votes and cfg.reward.function == MATH_VERIFY,
            reward=cfg.reward,
            deepconf_mode=cfg.deepconf_mode,
            forward_batch_tokens=cfg.forward_batch_tokens,
            data=hydra_cfg.runtime.choices.get("data", cfg.data.name),
            dataset=cfg.data.heldout_name or cfg.data.name,
            data_options=dict(cfg.data.options),
        )
    )


JOB = hydra_app.HydraJob(
    config_name="probe",
    task=task,
    schema=ProbeConfig,
    check=load_probe_config,
    about=__doc__.split("\n\n", 1)[1],
    groups=("data",),
    engine=True,
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Probe on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
