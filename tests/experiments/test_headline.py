"""The results page's opening table and the README's copy of it: one row per claim of the paper and policy, the
paper's verdict apart from the project's own targets, and the README's table what the page's claims give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from results_page.common import Claim
from results_page.headline import HEADLINE, headline_table, readme_block, row_targets, row_verdict, update_readme
from results_page.page import build_page, page_headline, read_claims
from results_page.paper import PAPER_FIG4_GAIN

ROOT = Path(__file__).resolve().parents[2]


def test_a_row_verdict_is_computed_from_its_claims():
    c = lambda paper=None, *targets: Claim("speed", "x", paper=paper, targets=targets)  # noqa: E731
    assert row_verdict([]) == "not run"
    assert row_verdict([c(None, ("t", True))]) == "—"  # a question of the project's own
    assert row_verdict([c("reproduced"), c("reproduced")]) == "reproduced"
    assert row_verdict([c("reproduced"), c("not reproduced")]) == "partly reproduced"
    assert row_verdict([c("partly reproduced"), c("not reproduced")]) == "partly reproduced"
    assert row_verdict([c("not distinguishable"), c("not distinguishable")]) == "not distinguishable"
    assert row_verdict([c("not distinguishable"), c("not reproduced")]) == "not reproduced"
    # targets are counted apart from the verdict; per-variant targets (`name` first) are counted together
    claims = [
        c("reproduced", ("1.80× end to end", False)),
        c(None, ("`mean` head ahead", True)),
        c(None, ("`stats` head ahead", False), ("seed learns", True)),
        c(None, ("seed learns", True)),
    ]
    assert row_targets(claims) == "1.80× end to end: missed; head ahead: met on 1 of 2; seed learns: met"
    assert row_verdict(claims) == "reproduced"


def test_a_claim_reads_its_verdicts_apart_and_survives_json():
    claim = Claim("speed", "end to end 1.78×", paper="reproduced", targets=(("1.80×", False),), detail=" (why)")
    assert claim.line() == "end to end 1.78× — **reproduced**; project target (1.80×): **missed** (why)."
    assert Claim.from_json(claim.to_json()) == claim
    assert Claim("screen", "a baseline").line() == "a baseline."
    with pytest.raises(ValueError, match="paper verdict 'met'"):
        Claim("speed", "x", paper="met")
    # no comparison is called tied any more: a page's claims written with that verdict read as not distinguishable
    assert Claim.from_json({"row": "speed", "text": "x", "paper": "tied within noise"}).paper == "not distinguishable"
    with pytest.raises(ValueError, match="paper verdict 'tied within noise'"):
        Claim("speed", "x", paper="tied within noise")


def test_the_table_has_a_row_per_claim_and_policy_and_refuses_unknown_rows():
    lines = headline_table([Claim("kappa", "t", paper="reproduced", here="2.67×")])
    assert len(lines) == 2 + len(HEADLINE) and len(HEADLINE) <= 12
    kappa = next(line for line in lines if "(Table 6)" in line)
    assert "| 2.67× | **reproduced** | — |" in kappa
    assert all("| not run | not run | — |" in line for line in lines[2:] if line is not kappa)
    with pytest.raises(ValueError, match="unknown headline rows \\['nope'\\]"):
        headline_table([Claim("nope", "t")])


def test_keeping_sections_needs_the_claims_file(tmp_path: Path):
    page = tmp_path / "results.md"
    build_page(tmp_path / "no-results", page)
    assert page.with_suffix(".json").is_file()
    page.with_suffix(".json").unlink()
    with pytest.raises(ValueError, match="results.json .*is missing"):
        build_page(tmp_path / "no-results", page, only=["seeds"])


def test_the_readme_table_is_the_one_the_page_claims_give(tmp_path: Path):
    """The README's copy of the opening table is generated, never typed: it equals what docs/results.json and the
    page's headings give, with links into the page."""
    table = page_headline(ROOT / "docs" / "results.md")
    expected = [re.sub(r"\]\(#", "](docs/results.md#", line) for line in table]
    assert readme_block(ROOT / "README.md") == expected, (
        "README.md's results table differs from docs/results.json: run experiments/write_results.py"
    )
    # and update_readme writes exactly that block
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- results-table:start -->\nold\n<!-- results-table:end -->\nafter\n")
    assert update_readme(readme, table) and readme_block(readme) == expected
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("-->\nafter\n")


def test_the_readme_is_a_short_front_door():
    """Within its limits, and every docs/ page it links exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200 and len(text.split()) <= 2000
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"


def test_the_readmes_table_is_brief_and_the_pages_keeps_the_targets():
    claims = [
        Claim("kappa", "t", paper="reproduced", here="2.67×", targets=(("≥ 2×", True),)),
        Claim("kappa", "u", paper="reproduced", here="2.39× on long answers"),
    ]
    brief, full = headline_table(claims, brief=True), headline_table(claims)
    assert brief[0] == "| claim | policy | paper | here | verdict |"
    row = next(line for line in brief if "2.67×" in line)
    assert "2.67× (+1 more on the page)" in row and "2.39×" not in row and "≥ 2×" not in row
    assert full[0].endswith("| project's own target |") and "2.67×; 2.39× on long answers" in "\n".join(full)


def test_the_readmes_word_on_section_13_is_what_the_pages_claims_support():
    """The README says that no scorer is distinguishable from GRPO with G = 4 at equal time, in comparisons that could
    detect only effects larger than the paper's whole gain: each such claim of section 13 lies inside its 95 % t
    interval, and the effect it could detect at 80 % power is above the paper's largest gain over GRPO."""
    text = (ROOT / "README.md").read_text()
    assert "is distinguishable from GRPO with G = 4" in text and "beats GRPO with G = 4" not in text
    claims = [
        c.line()
        for c in read_claims(ROOT / "docs" / "results.md")[13]
        if "against GRPO G = 4, the cost-matched control" in c.text
    ]
    assert claims
    for line in claims:
        detectable = re.search(
            r"not distinguishable from 0 \(.*\); the comparison could detect ±(\d+\.\d+) at 80 % "
            r"power",
            line,
        )
        assert detectable and float(detectable.group(1)) > PAPER_FIG4_GAIN[1] / 100, line
