"""Hydra multirun support: one aggregated table per sweep (κ ablation, ARRoL vs random, GRPO vs ARRoL)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from arrol_pl.train.summary import RunSummary

logger = logging.getLogger(__name__)

COLUMNS = (
    ("run", "{}"),
    ("held-out acc before", "{:.3f}"),
    ("held-out acc after", "{:.3f}"),
    ("train acc (last 10)", "{:.3f}"),
    ("keep ratio", "{:.3f}"),
    ("head acc", "{:.3f}"),
    ("zero-adv groups", "{:.3f}"),
    ("s / step", "{:.2f}"),
    ("speedup", "{:.2f}×"),
)


def collect(sweep_dir: Path) -> list[RunSummary]:
    """The summaries of a sweep's jobs, in directory order."""
    return [RunSummary.read(path.parent) for path in sorted(sweep_dir.glob("*/summary.json"))]


def table(rows: list[RunSummary], baseline: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table plus the same numbers as records; speedup = baseline s/step ÷ run s/step."""
    base = next((s for s in rows if baseline and baseline in s.overrides), None)
    base_sps = base.seconds_per_step if base else None
    shared = set.intersection(*(set(s.overrides) for s in rows)) if rows else set()
    records = []
    for s in rows:
        sps = s.seconds_per_step
        records.append({
            "run": " ".join(o for o in s.overrides if o not in shared) or Path(s.run_dir).name,
            "held-out acc before": s.heldout_accuracy_before,
            "held-out acc after": s.heldout_accuracy_after,
            "train acc (last 10)": s.train_accuracy_last10,
            "keep ratio": s.keep_ratio_mean,
            "head acc": s.head_accuracy_after_cold_start,
            "zero-adv groups": s.zero_advantage_fraction,
            "s / step": sps,
            "speedup": base_sps / sps if base_sps and sps else None,
        })
    lines = ["| " + " | ".join(c for c, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for rec in records:
        cells = ["n/a" if rec[c] is None else fmt.format(rec[c]) for c, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    note = f"\nspeedup relative to `{baseline}`" if base else ""
    common = f"\nevery run: `{' '.join(sorted(shared))}`" if shared else ""
    return "\n".join(lines) + note + common + "\n", records


class AggregateSummaries(Callback):
    """At the end of a multirun, write ``summary_table.md`` / ``.json`` into the sweep directory."""

    def __init__(self, baseline: str | None = None) -> None:
        self.baseline = baseline

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect(sweep_dir)
        if not rows:
            logger.warning("no summary.json under %s: nothing to aggregate", sweep_dir)
            return
        markdown, records = table(rows, self.baseline)
        (sweep_dir / "summary_table.md").write_text(markdown)
        (sweep_dir / "summary_table.json").write_text(json.dumps(records, indent=2))
        print(f"\n{markdown}\n(written to {sweep_dir / 'summary_table.md'})")
