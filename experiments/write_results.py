"""Write ``docs/results.md`` (and ``docs/figures/``) from its records, ``docs/results/records/``
(:mod:`results_page.records`): the small files each section reads, collected from a results directory of
``experiments/reproduce.py``.

    python experiments/write_results.py                                           # from the records alone
    python experiments/write_results.py outputs/results/default                   # collect every section's first
    python experiments/write_results.py outputs/results/default --sections seeds  # collect one section's first

Every number and every verdict on the page is computed from the records; a section whose records were never
collected is kept from the page as it stands and says so under its heading; one that has neither is listed as not
run. The page's claims are kept as data beside it (``docs/results.json``), and the README's results table is
rewritten from them when the page written is ``docs/results.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    from results_page.page import SECTION_KEYS, build_page
    from results_page.records import RECORDS, collect_records, rebuilt_sections, records_path, write_state

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "results",
        type=Path,
        nargs="?",
        default=None,
        help="a directory written by experiments/reproduce.py to collect records from first (default: "
        "none, the page is rebuilt from the records it has)",
    )
    p.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "results.md")
    p.add_argument(
        "--sections",
        nargs="+",
        default=None,
        metavar="SECTION",
        help=f"collect only these sections' records ({' '.join(SECTION_KEYS)}); the others stay as the "
        "records have them",
    )
    args = p.parse_args(argv)
    if args.results is not None and not args.results.is_dir():
        p.error(f"results directory {args.results} does not exist: run experiments/reproduce.py first")
    if args.sections and args.results is None:
        p.error("--sections names the sections to collect from a results directory: give one")
    if args.sections and set(args.sections) - set(SECTION_KEYS):
        p.error(
            f"--sections: unknown {sorted(set(args.sections) - set(SECTION_KEYS))}; choose from {list(SECTION_KEYS)}"
        )
    records = records_path(args.output)
    if args.results is not None:
        collected = collect_records(args.results, records, args.sections or SECTION_KEYS)
        print(f"collected the records of {', '.join(collected) or 'no section'} into {records}")
    elif not (records / RECORDS).is_file():
        if not args.output.is_file():
            p.error(f"{records} holds no records and there is no page to keep: give a results directory")
        write_state(records)
        print(f"{records} held no records: every section is kept from {args.output}")
    text = build_page(records, args.output, only=rebuilt_sections(records))
    print(text.split("\n### Every claim")[0])
    print(f"wrote {args.output}")
    if args.output.resolve() == (ROOT / "docs" / "results.md").resolve():
        from results_page.headline import update_readme
        from results_page.page import page_headline

        if update_readme(ROOT / "README.md", page_headline(args.output)):
            print("wrote README.md's results table")


if __name__ == "__main__":
    main()
