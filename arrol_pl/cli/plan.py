"""``arrol plan [overrides] [--gpu-gib 80] [--config-json FILE]`` (= ``python experiments/plan.py ...``): the run's
GPU memory per rank before launch, from the policy's config.json alone (arrol_pl/train/memory/plan.py states how
each figure is counted).

The overrides are ``arrol train``'s (Hydra, conf/config.yaml): e.g. ``+exp=paper_grpo model=qwen3_8b``. The
config.json is model.path's (a local directory, or a hub id's file from the Hugging Face cache or the hub);
--config-json reads another file instead (a model not downloaded here). Exit 0 when the run fits, 1 when it does
not (``arrol train`` refuses such a GPU run with the same plan), 2 on a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from arrol_pl.cli.hydra_app import compose
from arrol_pl.train.config.loader import ConfigError
from arrol_pl.train.config.run import load_run_config
from arrol_pl.train.memory.plan import GIB, PROMPT_TOKENS, plan_memory
from arrol_pl.train.memory.shape import ModelShape


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Print the plan of the run the command line ``argv`` (default ``sys.argv[1:]``) configures; the exit code."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="the run's GPU memory per rank before launch, from the policy's config.json alone",
        epilog="other arguments: Hydra overrides of arrol train",
    )
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
    parser.add_argument("--config-json", type=Path, help="the policy's config.json (default: model.path's)")
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=PROMPT_TOKENS,
        help=f"longest prompt when engine.max_model_len is unset (default {PROMPT_TOKENS})",
    )
    args, overrides = parser.parse_known_args(argv)
    from arrol_pl.train.memory.check import policy_config

    try:
        run = load_run_config(compose("config", overrides))
        if args.config_json is not None:
            found = (run.model.path or args.config_json.stem, json.loads(args.config_json.read_text()))
        else:
            found = policy_config(run)
        if found is None:
            raise ConfigError(
                f"model.pretrained={run.model.pretrained} is converted on first use: pass its "
                "config.json with --config-json"
            )
        shape = ModelShape.from_config(found[1], found[0])
    except (ConfigError, ValueError, OSError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    plan = plan_memory(shape, run, int(args.gpu_gib * GIB), args.prompt_tokens)
    print(plan.render())
    return 0 if plan.fits else 1
