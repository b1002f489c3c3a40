"""Write the reference part of ``docs/configuration.md`` from the typed configs and the presets in ``conf/``.

    python experiments/write_config_reference.py          # rewrites docs/configuration.md below its marker
    python experiments/write_config_reference.py --check  # exit 1 if the page is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arrol_pl.train.config_reference import page

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "configuration.md")
    p.add_argument("--check", action="store_true", help="exit 1 if the page differs from what would be written")
    args = p.parse_args(argv)
    existing = args.output.read_text() if args.output.exists() else "# Configuration\n"
    text = page(existing, ROOT / "conf")
    if args.check:
        if text != existing:
            print(f"{args.output} is stale: run python experiments/write_config_reference.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
