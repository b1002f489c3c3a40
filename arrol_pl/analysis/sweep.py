"""Hydra multirun support: one aggregated table per sweep (κ ablation, ARRoL vs random, GRPO vs ARRoL)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.runs import sweep_runs
from arrol_pl.analysis.significance import gain_estimate
from arrol_pl.core.metrics import mean_sd_se
from arrol_pl.train.records.summary import RunSummary

logger = logging.getLogger(__name__)

COLUMNS = (
    ("run", "", ""),
    ("held-out acc before", ".3f", ""),
    ("held-out acc after", ".3f", ""),
    ("train acc (last 10)", ".3f", ""),
    ("keep ratio", ".3f", ""),
    ("head acc", ".3f", ""),
    ("zero-adv groups", ".3f", ""),
    ("s / step", ".2f", ""),
    ("speedup", ".2f", "×"),
)
"""Column title, format spec and unit of :func:`table`."""


def table(rows: list[RunSummary], baseline: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table plus the same numbers as records; speedup = baseline s/step ÷ run s/step."""
    base = next((s for s in rows if baseline and baseline in s.overrides), None)
    base_sps = base.seconds_per_step if base else None
    shared = set.intersection(*(set(s.overrides) for s in rows)) if rows else set()
    records = []
    for s in rows:
        sps = s.seconds_per_step
        records.append(
            {
                "run": " ".join(o for o in s.overrides if o not in shared) or Path(s.run_dir).name,
                "held-out acc before": s.heldout_accuracy_before,
                "held-out acc after": s.heldout_accuracy_after,
                "train acc (last 10)": s.train_accuracy_last10,
                "keep ratio": s.keep_ratio_mean,
                "head acc": s.head_accuracy_after_cold_start,
                "zero-adv groups": s.zero_advantage_fraction,
                "s / step": sps,
                "speedup": base_sps / sps if base_sps and sps else None,
            }
        )
    lines = table_lines(
        [c for c, _, _ in COLUMNS],
        [[fmt(rec[c], spec, unit=unit, nan=None) for c, spec, unit in COLUMNS] for rec in records],
    )
    note = f"\n\nspeedup relative to `{baseline}`" if base else ""  # a blank line ends the Markdown table
    common = f"\n\nevery run: `{' '.join(sorted(shared))}`" if shared else ""
    return "\n".join(lines) + note + common + "\n", records


SEED_OVERRIDE = "trainer.seed="


def seed_table(rows: list[RunSummary], baseline: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Per arm (the overrides other than ``trainer.seed``) over its seeds: held-out accuracy after training and
    its gain over the before figure, as mean ± sd with the standard error of the mean, each seed's gain (with its
    standard error and degrees of freedom, :func:`~arrol_pl.analysis.significance.gain_estimate`), and
    the difference to the ``baseline`` arm paired by seed (each seed starts from the same policy in every arm).
    Empty when no arm ran more than one seed. A run without both held-out figures (still running, stopped, or run
    with ``data.num_heldout=0``) is left out, and the table says how many were."""
    shared = set.intersection(*(set(r.overrides) for r in rows)) if rows else set()
    unfinished = [r for r in rows if r.heldout_accuracy_before is None or r.heldout_accuracy_after is None]
    rows = [r for r in rows if r not in unfinished]
    arms: dict[str, dict[str, RunSummary]] = {}
    for r in rows:
        seed = next((o[len(SEED_OVERRIDE) :] for o in r.overrides if o.startswith(SEED_OVERRIDE)), None)
        if seed is None:
            continue
        arm = " ".join(o for o in r.overrides if o not in shared and not o.startswith(SEED_OVERRIDE)) or "all"
        arms.setdefault(arm, {})[seed] = r
    if not any(len(runs) > 1 for runs in arms.values()):
        return "", []
    base = next((runs for arm, runs in arms.items() if baseline and baseline in arm.split()), None)
    cells, records = [], []
    for arm, runs in arms.items():
        seeds = sorted(runs, key=lambda x: int(x) if x.lstrip("-").isdigit() else x)
        after = [runs[x].heldout_accuracy_after for x in seeds]
        gain = [runs[x].heldout_accuracy_after - runs[x].heldout_accuracy_before for x in seeds]
        paired = [
            runs[x].heldout_accuracy_after - base[x].heldout_accuracy_after
            for x in seeds
            if base is not None and x in base
        ]
        estimates = [gain_estimate(runs[x]) for x in seeds]  # never None: both figures are there
        rec = {
            "arm": arm,
            "seeds": seeds,
            "after": mean_sd_se(after),
            "gain": mean_sd_se(gain),
            "gain_per_seed": gain,
            "gain_se_per_seed": [e.se for e in estimates],
            "gain_df_per_seed": [e.df for e in estimates],
            "vs_baseline": mean_sd_se(paired) if paired and base is not runs else None,
            "seconds_per_step": sum(runs[x].seconds_per_step for x in seeds) / len(seeds),
        }
        records.append(rec)
        cells.append(
            [
                arm,
                len(seeds),
                fmt(rec["after"], nan=None),
                fmt(rec["gain"], nan=None),
                " ".join(f"{g:+.3f}" for g in gain),
                fmt(rec["vs_baseline"], nan=None) if rec["vs_baseline"] else "",
                f"{rec['seconds_per_step']:.2f}",
            ]
        )
    lines = table_lines(
        ["arm", "seeds", "held-out after", "gain", "gain per seed", "vs baseline (paired)", "s / step"], cells
    )
    note = (
        f"\n\nmean ± sd over seeds (SE: standard error of the mean); paired differences to `{baseline}`" if base else ""
    )
    if unfinished:
        note += (
            f"\n\n{len(unfinished)} run(s) without held-out figures before and after (still running, stopped, or "
            "no held-out set) left out"
        )
    return "\n".join(lines) + note + "\n", records


class AggregateSummaries(Callback):
    """At the end of a multirun, write ``summary_table.md`` / ``.json`` into the sweep directory."""

    def __init__(self, baseline: str | None = None) -> None:
        self.baseline = baseline

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = sweep_runs(sweep_dir)
        if not rows:
            logger.warning("no summary.json under %s: nothing to aggregate", sweep_dir)
            return
        markdown, records = table(rows, self.baseline)
        seeds_markdown, seed_records = seed_table(rows, self.baseline)
        if seeds_markdown:
            markdown += "\nOver seeds:\n\n" + seeds_markdown
            (sweep_dir / "seed_table.json").write_text(json.dumps(seed_records, indent=2))
        (sweep_dir / "summary_table.md").write_text(markdown)
        (sweep_dir / "summary_table.json").write_text(json.dumps(records, indent=2))
        print(f"\n{markdown}\n(written to {sweep_dir / 'summary_table.md'})")
        figure = write_wallclock(sweep_dir)
        if figure:
            print(f"wall-clock figure: {figure}")


def write_wallclock(sweep_dir: Path) -> Path | None:
    """The sweep's wall-clock figure beside its table (``wallclock.png``): held-out accuracy when every job evaluated
    during training, else training reward (smoothed); one curve per arm, a band over its seeds. None (with a
    warning) when the jobs have no curves to draw."""
    from arrol_pl.analysis.wallclock import default_tag, expand, group, plot_wallclock

    runs = expand([sweep_dir])
    if not runs:
        logger.warning("no wall-clock figure for %s: no job directories", sweep_dir)
        return None
    tag = default_tag(runs)
    try:
        return plot_wallclock(
            group(runs, by_arm=True),
            sweep_dir / "wallclock.png",
            tag,
            smoothing=0.0 if tag == "heldout/accuracy" else 0.8,
        )
    except (KeyError, FileNotFoundError, ValueError) as exc:
        logger.warning("no wall-clock figure for %s: %s", sweep_dir, exc)
        return None
