"""The results page's section 14 (results_page.grad_probe) from what ``experiments/grad_probe.py`` wrote on the tiny
policy (tests/fixtures/grad_probe.json, a real run's JSON; tests/analysis/test_grad_probe.py checks that the command
still writes that shape): a table per policy in name order, the headline rows of the default rule against the
cost-matched control and random κG, and "Not run" where no probe ran."""

import json
import shutil
from pathlib import Path

from arrol_pl.analysis.grad_probe.subsets import compared_rules
from arrol_pl.analysis.grad_probe.tables import measures, subset_title

from results_page.grad_probe import HEADING, section_grad_probe

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "grad_probe.json"


def test_each_policys_probe_gets_a_table_and_the_headline_rows(tmp_path: Path):
    for policy in ("tiny", "a_first"):
        (tmp_path / "grad_probe" / policy).mkdir(parents=True)
        shutil.copyfile(PROBE, tmp_path / "grad_probe" / policy / "grad_probe.json")
    probe = json.loads(PROBE.read_text())
    lines, claims = section_grad_probe(tmp_path)
    text = "\n".join(lines)
    assert lines[0] == HEADING and claims == []
    assert text.index("### a_first") < text.index("### tiny")
    perfect = subset_title(probe, f"{compared_rules()[0]}/oracle_1")
    for policy in ("a_first", "tiny"):  # per baseline a row per measure for the default rule reading a perfect oracle
        assert text.count(f"| {policy} | {perfect} | G' unpruned (cost-matched) |") == len(measures(probe))
        assert text.count(f"| {policy} | {perfect} | random κG |") == len(measures(probe))
    assert "does not" not in text and ("not detectable at ±" in text or "beyond its interval" in text)
    assert f"`{probe['command']}`: 2 batches × 2 prompts" in text


def test_no_probe_is_listed_as_not_run_with_its_command(tmp_path: Path):
    (tmp_path / "grad_probe").mkdir()
    lines, claims = section_grad_probe(tmp_path)
    assert lines[0] == HEADING and claims == []
    assert lines[2].startswith(
        "Not run (`grad_probe/` holds no `grad_probe.json`): `python experiments/reproduce.py --only grad_probe page`"
    )
