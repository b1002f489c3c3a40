"""Held-out accuracy or reward against wall-clock seconds for runs and sweeps (paper Fig. 4).

    python experiments/plot_wallclock.py outputs/runs/<grpo run> outputs/runs/<arrol run> -o wallclock.png
    python experiments/plot_wallclock.py outputs/multirun/<sweep> --by-arm --tag heldout/accuracy --smooth 0

Each argument is a run directory, a TensorBoard log directory or a sweep directory (all its jobs). The x axis is
training seconds (held-out evaluations excluded); the y axis a scalar tag (default ``reward/accuracy``;
``heldout/accuracy`` with ``trainer.eval_every``), smoothed with an exponential moving average (``--smooth 0``:
none). Curves are labelled by the overrides that tell their runs apart. With ``--by-arm`` the runs that differ
only in ``trainer.seed`` are one arm: its mean over the seeds with a ± sd band (arrol_pl/analysis/wallclock.py).
A sweep writes this figure itself, beside its table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from arrol_pl.analysis.wallclock import expand, group, plot_wallclock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="run directories (with tb/), TensorBoard log dirs, or sweep directories (all their jobs)",
    )
    parser.add_argument("-o", "--output", type=Path, default=Path("wallclock.png"))
    parser.add_argument("--tag", default="reward/accuracy")
    parser.add_argument("--smooth", type=float, default=0.8, help="EMA weight in [0, 1)")
    parser.add_argument(
        "--labels",
        nargs="*",
        help="legend labels (default: the overrides that tell the runs "
        "apart; with --by-arm, one per arm in order of first appearance)",
    )
    parser.add_argument("--by-arm", action="store_true", help="one mean curve per arm with a ± sd band over seeds")
    args = parser.parse_args()
    if not 0 <= args.smooth < 1:
        parser.error(f"--smooth must be in [0, 1), got {args.smooth}")
    missing = [str(r) for r in args.runs if not r.exists()]
    if missing:
        parser.error(f"no such run directory: {', '.join(missing)}")
    runs = expand(args.runs)
    if not runs:
        parser.error(f"no run directory among {', '.join(map(str, args.runs))}")
    arms = group(runs, by_arm=args.by_arm)
    if args.labels and len(args.labels) != len(arms):
        parser.error(f"{len(args.labels)} labels for {len(arms)} {'arms' if args.by_arm else 'runs'}")
    print(f"wrote {plot_wallclock(arms, args.output, args.tag, args.smooth, args.labels)}")


if __name__ == "__main__":
    main()
