"""``arrol <command> [arguments]`` (also ``python -m arrol_pl``): the package's jobs from any directory, each the
function the checkout's script calls, with the same arguments and exit codes.

Decisions:
- **One command per job a user runs**, named as the script that runs it in a checkout: ``train``
  (``experiments/run.py``), ``evaluate``, ``advise``, ``head-quality``, ``grad-probe``, ``simulate``
  (``simulate_pruning.py``), ``plan``. The
  benchmarks, ``reproduce.py`` and the page writers stay scripts: they measure or rewrite this checkout.
- **A command's module is imported when it runs**, so ``arrol --help`` starts no torch.
"""

from __future__ import annotations

import importlib
import sys

from arrol_pl import __version__

COMMANDS = {
    "train": (
        "arrol_pl.cli.train",
        "train with ARRoL: Hydra overrides of its presets, listed by train --help (experiments/run.py)",
    ),
    "evaluate": (
        "arrol_pl.cli.evaluate",
        "test-time evaluation of a run's export or checkpoint: avg@k, pass@k, votes (experiments/evaluate.py)",
    ),
    "head-quality": (
        "arrol_pl.cli.head_quality",
        "the quality head against DeepConf at several detection lengths (experiments/head_quality.py)",
    ),
    "advise": (
        "arrol_pl.cli.advise",
        "will pruning pay on this policy and data? one verdict before training (experiments/advise.py)",
    ),
    "grad-probe": ("arrol_pl.cli.grad_probe", "what choosing survivors does to the update (experiments/grad_probe.py)"),
    "simulate": (
        "arrol_pl.cli.simulate",
        "the pruning loop on simulated rollouts, no model (experiments/simulate_pruning.py)",
    ),
    "plan": ("arrol_pl.cli.plan", "a run's GPU memory per rank before launch (experiments/plan.py)"),
}
"""Command → (its module, which has ``main(argv, prog)``; what it does)."""


def usage(prog: str) -> str:
    lines = [f"usage: {prog} <command> [arguments]   ({prog} <command> --help: its presets and keys)", "", "commands:"]
    lines += [f"  {name:<13} {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join([*lines, "", f"arrol-pl {__version__}: ARRoL, online rollout pruning for RLVR."])


def main(argv: list[str] | None = None, prog: str = "arrol") -> int:
    """Run the command ``argv[0]`` (default ``sys.argv[1:]``) on the rest; its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"arrol-pl {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(
            f"{prog}: no command {argv[0]!r}; the commands are {', '.join(COMMANDS)} ({prog} --help)", file=sys.stderr
        )
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:], prog=f"{prog} {argv[0]}")
