"""``arrol evaluate checkpoint=<run>/export [overrides]`` (= ``python experiments/evaluate.py ...``): test-time
evaluation, with Hydra (``conf/evaluate.yaml``).

Samples k completions per problem with the vLLM engine (no pruning; the quality head scores each completion at its
end) and writes, under the run directory: metrics.json, results.md (the layout of the paper's Tables 1 and 3) and
records.jsonl (per problem: answers, classes, correctness, head scores, DeepConf confidences, votes), from which
every metric can be recomputed. ``checkpoint`` is a run's ``export/`` or any training checkpoint (``.ckpt``). It
scores the data the run held out (else its training problems) unless ``datasets`` names others, and says which in
its first line. A problem whose prompt leaves no room for ``max_tokens`` in the context is skipped and counted with
the bad rows, as training skips it (metrics.json's ``data_rows``).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from arrol_pl.analysis.eval_config import EvalConfig, load_eval_config  # registers eval_schema (conf/evaluate.yaml)
from arrol_pl.analysis.trained_data import trained_data
from arrol_pl.cli import hydra_app
from arrol_pl.train.config.loader import ConfigError

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def check(cfg) -> None:
    """What the typed config cannot check alone, before any model loads: a checkpoint file's policy directory, room for
    a prompt beside ``max_tokens`` in the context and each dataset's prompt format; raises ConfigError naming the
    key."""
    from arrol_pl.train.run.build import check_room

    checkpoint = Path(cfg.checkpoint)
    try:
        for name, spec in cfg.datasets.items():
            dataset_format(name, spec, None)
        policy_dir = checkpoint_policy_dir(checkpoint) if checkpoint.is_file() else checkpoint
        if not (policy_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"checkpoint={cfg.checkpoint!r} holds no config.json (the policy's): pass a run's "
                "export/ directory or one of its checkpoints/*.ckpt"
            )
        check_room(cfg.engine.max_model_len, policy_dir, cfg.max_tokens, "max_tokens")
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(str(exc)) from None
    cfg.reward.fill_in(checkpoint, "checkpoint")


def dataset_format(name: str, spec, trained):
    """``datasets.<name>``'s prompt format: its own ``prompt_template`` / ``chat_template`` / ``stop`` where
    set (not null), else the format the checkpoint was trained in (an export's ``prompt_format.json``), else
    the bare prompt through the tokenizer's chat template."""
    from arrol_pl.tasks.prompts import PromptFormat

    base = trained or PromptFormat()
    own = {key: getattr(spec, key) for key in ("prompt_template", "chat_template", "stop")}
    try:
        return PromptFormat(
            base.template if own["prompt_template"] is None else own["prompt_template"],
            base.chat if own["chat_template"] is None else bool(own["chat_template"]),
            base.stop if own["stop"] is None else tuple(own["stop"]),
        )
    except ValueError as exc:
        raise ValueError(f"datasets.{name}: {exc}") from None


def checkpoint_policy_dir(path: Path) -> Path:
    """The policy directory (architecture and tokenizer) a training checkpoint's weights belong to.

    Every checkpoint records it (``arrol.policy_dir``), so a checkpoint of an unfinished run evaluates too.
    """
    from arrol_pl.train.records.checkpoint import read_checkpoint

    state = read_checkpoint(path, "checkpoint", {"state_dict": "the weights", "arrol": "the run's records"})["arrol"]
    if "policy_dir" not in state:
        raise FileNotFoundError(
            f"checkpoint={str(path)!r} does not record the policy directory its weights belong to "
            "(arrol.policy_dir; written before this was recorded): pass the run's export/ directory"
        )
    base = Path(state["policy_dir"])
    if not (base / "config.json").is_file():
        raise FileNotFoundError(
            f"checkpoint={str(path)!r} was trained from policy directory {str(base)!r}, which has no config.json: it "
            "holds the model config and tokenizer the weights need (the tiny policy is rebuilt there by "
            "experiments/run.py with the run's model.* settings), or pass the run's export/ directory"
        )
    return base


def resolve_checkpoint(path: Path, scratch: Path):
    """``(policy_dir, QualityHead)`` from an export dir, or from a training checkpoint (read with ``weights_only``)."""
    import torch

    from arrol_pl.core.quality_head import QualityHead
    from arrol_pl.models.head import load_head

    if path.is_dir():
        return path, load_head(path)[0]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = checkpoint_policy_dir(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = checkpoint["state_dict"]
    policy = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    policy.load_state_dict({k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")})
    head_state = {k[len("head.") :]: v for k, v in state.items() if k.startswith("head.")}
    input_kind = checkpoint.get("arrol", {}).get("config", {}).get("head", {}).get("input", "last")
    head = QualityHead.from_state_dict(head_state, input_kind)
    policy.save_pretrained(scratch)
    AutoTokenizer.from_pretrained(base).save_pretrained(scratch)
    return scratch, head


def evaluated_problems(name: str, loaded, tokenizer, prompt_format, policy_dir: Path, cfg) -> list:
    """``datasets.<name>``'s problems (``loaded``, a ProblemSet) in ``prompt_format``, less those whose prompt leaves
    no room for ``max_tokens`` in the context: skipped and counted with the bad rows, as training skips them
    (:func:`~arrol_pl.train.run.build.fitting_problems`). ConfigError when none is left."""
    from arrol_pl.train.run.build import fitting_problems

    problems = fitting_problems(
        loaded, tokenizer, prompt_format, policy_dir, cfg.engine.max_model_len, cfg.max_tokens, "max_tokens"
    )
    if not problems:
        counts = ", ".join(f"{k} {v}" for k, v in loaded.skip_counts().items())
        raise ConfigError(f"datasets.{name}: no problem to evaluate in {loaded.source} (skipped: {counts})")
    return problems


def task(raw: DictConfig) -> None:
    """Hydra's task: check the config, say what it scores and load it, then evaluate into the run directory."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = load_eval_config(raw)
        check(cfg)
        sets = scored_sets(cfg)
        evaluate(cfg, out_dir, sets)
    except ConfigError as exc:
        hydra_app.refuse(exc, out_dir)


@dataclasses.dataclass
class ScoredSets:
    """What an evaluation scores: its problems per dataset (a ProblemSet, with its bad rows), each dataset's prompt
    format where the checkpoint's run gives it (None: :func:`dataset_format`), and the line that says which."""

    problems: dict
    formats: dict
    described: str


def scored_sets(cfg) -> ScoredSets:
    """The problems ``cfg`` scores: its ``datasets``, or none named, the data of the checkpoint's run
    (:mod:`arrol_pl.analysis.trained_data`), each cut to ``limit``. Prints which first; a source that gives no
    problem is a ConfigError naming its key and file."""
    from arrol_pl.tasks.problem import DatasetUnavailableError
    from arrol_pl.tasks.registry import load_problems

    run_data = None if cfg.datasets else trained_data(Path(cfg.checkpoint))
    described = run_data.describe() if run_data else f"datasets {', '.join(cfg.datasets)}"
    each = f"the first {cfg.limit} problems" if cfg.limit else "every problem"
    print(
        f"evaluating {cfg.checkpoint} on {described}: {each}{' of each' if len(cfg.datasets) > 1 else ''}, k = {cfg.k}",
        flush=True,
    )
    try:
        if run_data is not None:  # the run's own, in its own prompt format
            sets = ScoredSets(
                {run_data.name: run_data.load(cfg.limit)}, {run_data.name: run_data.data.prompt_format()}, described
            )
        else:
            loaded = {
                name: load_problems(name, path=spec.path, split=spec.split, **spec.options)
                for name, spec in cfg.datasets.items()
            }
            sets = ScoredSets(
                {
                    name: dataclasses.replace(ps, problems=ps.problems[: cfg.limit or None])
                    for name, ps in loaded.items()
                },
                dict.fromkeys(loaded),
                described,
            )
    except DatasetUnavailableError as exc:
        raise ConfigError(str(exc)) from None
    empty = [name for name, loaded in sets.problems.items() if not loaded.problems]
    if empty:
        raise ConfigError(f"datasets.{empty[0]}: no problems loaded")
    return sets


def evaluate(cfg, out_dir: Path, sets: ScoredSets) -> None:
    """Sample, score and write ``metrics.json``, ``results.md`` and ``records.jsonl`` into ``out_dir``."""
    from arrol_pl.train.run.console import quiet_console

    quiet_console()  # before vLLM is imported: its notes on Triton, and each message once
    from transformers import AutoTokenizer

    from arrol_pl.analysis.evaluation import evaluate_dataset, write_report
    from arrol_pl.engine import ArrolEngine
    from arrol_pl.tasks.prompts import PromptFormat
    from arrol_pl.tasks.reward_function import make_reward
    from arrol_pl.train.run.build import engine_context

    with tempfile.TemporaryDirectory(prefix="arrol-eval-") as scratch:
        policy_dir, head = resolve_checkpoint(Path(cfg.checkpoint), Path(scratch))
        tokenizer = AutoTokenizer.from_pretrained(policy_dir)
        trained = PromptFormat.load(policy_dir) if Path(cfg.checkpoint).is_dir() else None
        formats = {name: fmt or dataset_format(name, cfg.datasets[name], trained) for name, fmt in sets.formats.items()}
        problems = {
            name: evaluated_problems(name, ps, tokenizer, formats[name], policy_dir, cfg)
            for name, ps in sets.problems.items()
        }
        all_problems = [p for ps in problems.values() for p in ps]
        length = cfg.engine.max_model_len or engine_context(tokenizer, all_problems, cfg.max_tokens, policy_dir)
        engine = ArrolEngine(str(policy_dir), dataclasses.replace(cfg.engine, max_model_len=length), head=head)
        sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
        deepconf = cfg.deepconf
        try:
            with make_reward(cfg.reward.function, cfg.reward.pool_config()) as reward:
                records = {
                    name: evaluate_dataset(
                        engine, reward, ps, cfg.k, {**sampling, **formats[name].sampling()}, deepconf, progress=name
                    )
                    for name, ps in problems.items()
                }
        finally:
            engine.close()
    meta = {
        "checkpoint": str(cfg.checkpoint),
        "k": cfg.k,
        "temperature": cfg.temperature,
        "reward": cfg.reward.function,
        "data": sets.described,
        "data_rows": {name: ps.report() for name, ps in sets.problems.items()},
        "prompt_formats": {name: dataclasses.asdict(f) for name, f in formats.items()},
        "config": dataclasses.asdict(cfg),
    }
    write_report(out_dir, records, meta)
    print((out_dir / "results.md").read_text())
    print(f"outputs: {out_dir} (metrics.json, results.md, records.jsonl)")


JOB = hydra_app.HydraJob(
    config_name="evaluate",
    task=task,
    schema=EvalConfig,
    check=load_eval_config,
    about=__doc__.split("\n\n", 1)[1],
    groups=(),
    engine=True,
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Evaluate on the command line ``argv`` (default ``sys.argv[1:]``); ``prog`` names the command in ``--help``."""
    return hydra_app.run(JOB, argv, prog)
