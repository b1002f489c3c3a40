"""Reward against wall-clock seconds for several runs (paper Fig. 4), read from their TensorBoard events.

    python experiments/plot_wallclock.py outputs/runs/<grpo run> outputs/runs/<arrol run> -o wallclock.png

Each argument is a run directory or a TensorBoard log directory. The x axis is training seconds: the
run's ``time/wall`` per step (held-out evaluations excluded) when it has ``history.jsonl``, else the
events' own wall times; the y axis a scalar tag (default ``reward/accuracy``; ``heldout/accuracy`` with
``trainer.eval_every``), smoothed with an exponential moving average (``--smooth 0``: none).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_curve(run: Path, tag: str) -> tuple[list[float], list[float]]:
    """``(seconds, values)`` of ``tag``: from the run's ``history.jsonl`` when it has one (x = ``time/wall``,
    training time without the held-out evaluations), else from TensorBoard events' wall times."""
    if (run / "history.jsonl").exists():
        from arrol_pl.analysis.history import history_curve

        points = history_curve(run, tag)
        return [p[0] for p in points], [p[1] for p in points]
    return load_events(run, tag)


def load_events(run: Path, tag: str) -> tuple[list[float], list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = run / "tb" if (run / "tb").is_dir() else run
    if not list(logdir.glob("events.out.tfevents.*")):
        raise FileNotFoundError(f"no TensorBoard event file under {logdir}")
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0}).Reload()
    if tag not in acc.Tags()["scalars"]:
        raise KeyError(f"{logdir} has no scalar {tag!r}; it has {sorted(acc.Tags()['scalars'])}")
    events = acc.Scalars(tag)
    t0 = events[0].wall_time
    return [e.wall_time - t0 for e in events], [e.value for e in events]


def smooth(values: list[float], weight: float) -> list[float]:
    out, last = [], values[0] if values else 0.0
    for v in values:
        last = weight * last + (1 - weight) * v
        out.append(last)
    return out


def label_of(run: Path) -> str:
    summary = run / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        return " ".join(s.get("overrides", [])) or s.get("name", run.name)
    return run.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (with tb/) or TensorBoard log dirs")
    parser.add_argument("-o", "--output", type=Path, default=Path("wallclock.png"))
    parser.add_argument("--tag", default="reward/accuracy")
    parser.add_argument("--smooth", type=float, default=0.8, help="EMA weight in [0, 1)")
    parser.add_argument("--labels", nargs="*", help="legend labels (default: the runs' overrides)")
    args = parser.parse_args()
    if not 0 <= args.smooth < 1:
        parser.error(f"--smooth must be in [0, 1), got {args.smooth}")
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(f"{len(args.labels)} labels for {len(args.runs)} runs")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, run in enumerate(args.runs):
        seconds, values = load_curve(run, args.tag)
        label = args.labels[i] if args.labels else label_of(run)
        ax.plot(seconds, smooth(values, args.smooth), label=f"{label} ({seconds[-1]:.0f} s)")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel(args.tag)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
