"""Held-out accuracy (or reward) against training wall-clock seconds, the paper's Fig. 4, for runs and sweeps.

The x axis is training seconds: a run's ``time/wall`` per step (held-out evaluations excluded) from its
``history.jsonl``, else its TensorBoard events' own wall times. A sweep directory stands for its jobs; each curve is
labelled by the overrides that tell its run apart (what every run shares, such as ``+exp=...``, is left out). By
arm, the runs that differ only in ``trainer.seed`` make one curve: their mean on a common time grid up to the
shortest seed's end, with a band of ± one standard deviation over the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from arrol_pl.analysis.history import curve_band, history_curve, read_history


def load_curve(run: Path, tag: str) -> tuple[list[float], list[float]]:
    """``(seconds, values)`` of ``tag``: from the run's ``history.jsonl`` when it has one, else from its
    TensorBoard events."""
    if (run / "history.jsonl").exists():
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


def smooth(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with ``weight`` on the past (0: none)."""
    out, last = [], values[0] if values else 0.0
    for v in values:
        last = weight * last + (1 - weight) * v
        out.append(last)
    return out


def overrides_of(run: Path, drop_seed: bool) -> list[str]:
    """The run's command-line overrides (``summary.json``), without ``trainer.seed`` when ``drop_seed``."""
    summary = run / "summary.json"
    if not summary.exists():
        return []
    overrides = json.loads(summary.read_text()).get("overrides", [])
    return [o for o in overrides if not (drop_seed and o.startswith("trainer.seed="))]


def labels(runs: Sequence[Path], drop_seed: bool) -> list[str]:
    """Each run's label: the overrides that tell it apart from the others, else its directory's name. With
    ``drop_seed`` the seeds of one arm share it."""
    per_run = [overrides_of(run, drop_seed) for run in runs]
    shared = set.intersection(*map(set, per_run)) if len(runs) > 1 else set()
    return [" ".join(o for o in overrides if o not in shared) or run.name for run, overrides in zip(runs, per_run)]


def is_run(path: Path) -> bool:
    return any((path / name).exists() for name in ("history.jsonl", "summary.json", "tb")) or bool(
        list(path.glob("events.out.tfevents.*"))
    )


def expand(paths: Sequence[Path]) -> list[Path]:
    """Run directories: a path that is a run as it is, a sweep directory as its jobs (the folders below it that are
    runs); files (a sweep's ``multirun.yaml``, its tables) are passed over."""
    runs: list[Path] = []
    for path in paths:
        if path.is_dir():
            runs += [path] if is_run(path) else sorted(p for p in path.iterdir() if p.is_dir() and is_run(p))
    return runs


def group(runs: Sequence[Path], by_arm: bool) -> dict[str, list[Path]]:
    """Label → runs: one run per label, or with ``by_arm`` the seeds of each arm together (in order of first
    appearance)."""
    out: dict[str, list[Path]] = {}
    for run, label in zip(runs, labels(runs, drop_seed=by_arm)):
        out.setdefault(label, []).append(run)
    return out


def default_tag(runs: Sequence[Path]) -> str:
    """``heldout/accuracy`` when every run evaluated during training (``trainer.eval_every``), else
    ``reward/accuracy``."""

    def evaluated(run: Path) -> bool:
        return (run / "history.jsonl").exists() and any("heldout/accuracy" in row for row in read_history(run))

    return "heldout/accuracy" if runs and all(evaluated(r) for r in runs) else "reward/accuracy"


def plot_wallclock(
    arms: dict[str, list[Path]], out: Path, tag: str, smoothing: float = 0.0, names: Sequence[str] | None = None
) -> Path:
    """Draw one curve per label of ``arms`` (a band over its runs when it has several) into ``out`` (a PNG)."""
    fig, ax = new_figure()
    for i, (arm, members) in enumerate(arms.items()):
        label = names[i] if names else arm
        curves = [load_curve(run, tag) for run in members]
        if len(curves) == 1:
            seconds, values = curves[0]
            ax.plot(seconds, smooth(values, smoothing), label=f"{label} ({seconds[-1]:.0f} s)")
            continue
        grid, mean, sd = curve_band([list(zip(t, smooth(v, smoothing))) for t, v in curves])
        (line,) = ax.plot(grid, mean, label=f"{label} ({len(members)} seeds, {grid[-1]:.0f} s)")
        ax.fill_between(
            grid,
            [m - d for m, d in zip(mean, sd)],
            [m + d for m, d in zip(mean, sd)],
            color=line.get_color(),
            alpha=0.2,
        )
    return save_figure(fig, ax, out, "training wall-clock seconds", tag)


def new_figure():
    """A figure and its axes in the size of the page's figures, drawn without a display (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4))


def save_figure(fig, ax, out: Path, xlabel: str, ylabel: str) -> Path:
    """Label ``ax``, give it a grid and a legend, write ``fig`` to ``out`` (a PNG) and close it."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
