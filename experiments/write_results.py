"""Write ``docs/results.md`` (and ``docs/figures/``) from a results directory of ``experiments/reproduce.py``.

    python experiments/write_results.py outputs/results/default -o docs/results.md

Every number and every "reproduced / not reproduced" on the page is computed from the outputs; a part
that was not run is listed as such.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", type=Path, help="a directory written by experiments/reproduce.py")
    p.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "results.md")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"results directory {args.results} does not exist: run experiments/reproduce.py first")
    from arrol_pl.analysis.results import build_page

    text = build_page(args.results, args.output)
    print(text.split("\n## 1.")[0])
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
