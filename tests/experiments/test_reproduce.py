"""The measurement set end to end in its quick mode, as ``make results`` runs it: the parts no other test runs
for real (bench_phases.py, head_quality.py on a trained export and on SmolLM2, plot_wallclock.py on two runs,
the κ sweep the later parts read) run as subprocesses of reproduce.py with ``--only``, and the results page is
built from what they wrote. The parts left out run the scripts other tests run end to end (``balance``: run.py
with random pruning, as tests/train/run/test_faults.py's signal runs; ``voting``: evaluate.py, as
tests/train/run/test_run_smoke.py's test_evaluate_writes_consistent_tables); their
sections' readers are tested on made-up runs in tests/analysis/test_results.py, and here they say how to run them."""

import json
import os
import sys
from pathlib import Path

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.engine]


def test_reproduce_quick_builds_every_section(tmp_path: Path, policy_cache: Path):
    out, page = tmp_path / "results", tmp_path / "docs" / "results.md"
    # the training parts take the session's model cache: the warm start is built once for every test that trains;
    # SmolLM2 (the pretrained part's policy, from $ARROL_CACHE) is converted once per checkout into its cache, which
    # tests/models/test_smollm2.py converts into and reads too
    parts = ["phases", "kappa", "head", "wallclock", "pretrained", "page"]
    proc = warm_python.run(
        [
            sys.executable,
            "experiments/reproduce.py",
            "--quick",
            "--only",
            *parts,
            "--out",
            str(out),
            "--page",
            str(page),
            "--",
            f"model.cache_dir={policy_cache}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "ARROL_CACHE": str(ROOT / "outputs" / "cache")},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["parts"]) == set(parts)
    assert all(p["returncode"] == 0 for p in manifest["parts"].values())

    phases = json.loads((out / "phases" / "phases.json").read_text())
    assert set(phases["arms"]) == {"1", "0.5", "0.25"}
    for arm in phases["arms"].values():  # real steps were timed and counted
        assert arm["medians"]["step"] > 0 and arm["medians"]["generated_tokens"] > 0
    grpo, half = phases["arms"]["1"]["medians"], phases["arms"]["0.5"]["medians"]
    assert grpo["keep_ratio"] == 1.0 and half["trained_tokens"] < grpo["trained_tokens"]

    assert len(list((out / "kappa").glob("*/summary.json"))) == 2  # quick: κ = 0.5 and 1, what later parts read
    assert (out / "wallclock.png").stat().st_size > 1000
    pretrained = json.loads((out / "pretrained" / "head_quality.json").read_text())
    assert pretrained["settings"]["prompt_format"]["stop"] == ["\n"] and pretrained["rollouts"] == 12
    assert set(pretrained["inputs"]) == {"last", "mean", "middle", "stats", "last+stats"}
    parity = pretrained["feature_parity"]  # the engine computed both of its inputs, the probe matched them
    assert parity["head_input"] == "last+stats" and parity["stats_max_abs_diff"] < 1e-6
    assert pretrained["votes"]["problems"]["k"] == 2

    from results_page.page import SECTION_KEYS, split_page

    text = page.read_text()
    sections = split_page(text)
    assert sorted(sections) == list(range(1, len(SECTION_KEYS) + 1))
    # the parts left out and the opt-in ones were not asked for: their sections say so, and how to run them
    unrun = {SECTION_KEYS[n - 1] for n, body in sections.items() if "Not run" in body}
    opt_in = {"online", "seeds", "online_balance", "online_spread", "screen", "grad_probe", "peers"}
    assert unrun == {"balance", "voting"} | opt_in
    assert all(f"--only {part} page" in sections[SECTION_KEYS.index(part) + 1] for part in opt_in)
    # the opening table: a row per claim and policy, the rows of the parts not run say so
    assert "not run" not in text.split("### Every claim")[1].split("## 1.")[0]
    unrun_rows = [
        line.split(" | ")[:2] for line in text.split("### Every claim")[0].splitlines() if "| not run |" in line
    ]
    assert unrun_rows == [
        ["| Pruned groups better balanced than random pruning (Table 4)", "tiny"],
        ["| Head-weighted votes beat majority and DeepConf (Table 3)", "tiny"],
        ["| ARRoL's accuracy ≥ GRPO's in less training time (Fig. 4)", "SmolLM2-135M"],
        ["| The default experiment learns on every seed (project)", "tiny"],
        ["| Choosing the groups beats GRPO and DAPO at equal time (project, beyond the paper)", "SmolLM2-135M"],
    ]
    assert json.loads(page.with_suffix(".json").read_text())["claims"]  # the claims, as data beside the page
    assert "Quick smoke run" in text
    assert "Table 3 by replay on SmolLM2-135M" in text
    assert (page.parent / "figures" / "wallclock.png").exists()
    assert (page.parent / "figures" / "head_quality.png").exists()
