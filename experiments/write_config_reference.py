"""Write the reference part of ``docs/configuration.md`` from the typed configs and the presets in ``conf/``, and
the preset tables of ``docs/guide.md`` from the presets' opening comments.

    python experiments/write_config_reference.py          # rewrites both pages' generated parts
    python experiments/write_config_reference.py --check  # exit 1 if either page is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arrol_pl.analysis.eval_config import EvalConfig
from arrol_pl.analysis.head_probe.config import ProbeConfig
from arrol_pl.train.config.reference import guide, page

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = (
    (
        "`arrol evaluate` = `experiments/evaluate.py` (`EvalConfig`, `conf/evaluate.yaml`)",
        EvalConfig,
        {
            "engine": "the run's `engine` section (its `gpu_memory_utilization` defaults to 0.8 here: no training "
            "shares the GPU)"
        },
    ),
    (
        "`arrol head-quality` = `experiments/head_quality.py` (`ProbeConfig`, `conf/probe.yaml`)",
        ProbeConfig,
        {
            "data": "the run's `data` section, chosen the same way (`data=arithmetic_fewshot`); the probe reads the "
            "first `data.num_heldout` held-out problems (256 by default)",
            "head": "the run's `head` section: the probe heads' width and training (`head.steps` 300, `head.replay` "
            "null by default)",
        },
    ),
)
"""The scripts besides training whose typed configs the page lists: (title, schema, sections shared with the run)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "configuration.md")
    p.add_argument("--guide", type=Path, default=ROOT / "docs" / "guide.md", help="the page with the preset tables")
    p.add_argument("--check", action="store_true", help="exit 1 if a page differs from what would be written")
    args = p.parse_args(argv)
    configuration = args.output.read_text() if args.output.exists() else "# Configuration\n"
    presets = args.guide.read_text()
    pages = {
        args.output: (configuration, page(configuration, ROOT / "conf", SCRIPTS)),
        args.guide: (presets, guide(presets, ROOT / "conf")),
    }
    stale = [path for path, (existing, text) in pages.items() if text != existing]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python experiments/write_config_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path in pages:
        if path in stale:
            path.write_text(pages[path][1])
        print(f"{'wrote' if path in stale else 'current:'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
