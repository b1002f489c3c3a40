"""Write ``docs/results.md`` (and ``docs/figures/``) from a results directory of ``experiments/reproduce.py``.

    python experiments/write_results.py outputs/results/default -o docs/results.md
    python experiments/write_results.py outputs/results/default --sections seeds   # one section, the rest kept

Every number and every verdict on the page is computed from the outputs; a part that was not run is listed as
such. The page's claims are kept as data beside it (``docs/results.json``), and the README's results table is
rewritten from them when the page written is ``docs/results.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    from results_page.page import SECTION_KEYS, build_page

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", type=Path, help="a directory written by experiments/reproduce.py")
    p.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "results.md")
    p.add_argument("--sections", nargs="+", default=None, metavar="SECTION",
                   help=f"rebuild only these sections ({' '.join(SECTION_KEYS)}) and keep the others as the page "
                        "has them")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        p.error(f"results directory {args.results} does not exist: run experiments/reproduce.py first")

    if args.sections and set(args.sections) - set(SECTION_KEYS):
        p.error(f"--sections: unknown {sorted(set(args.sections) - set(SECTION_KEYS))}; choose from {list(SECTION_KEYS)}")
    if args.sections and not args.output.is_file():
        p.error(f"--sections keeps the other sections of {args.output}, which does not exist: build the whole page")
    text = build_page(args.results, args.output, only=args.sections)
    print(text.split("\n### Every claim")[0])
    print(f"wrote {args.output}")
    if args.output.resolve() == (ROOT / "docs" / "results.md").resolve():
        from results_page.headline import update_readme
        from results_page.page import page_headline

        if update_readme(ROOT / "README.md", page_headline(args.output)):
            print("wrote README.md's results table")


if __name__ == "__main__":
    main()
