"""The whole measurement set end to end in its quick mode: every part's script runs for real (a few steps
each on the default task) and the results page is built from what they wrote."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.engine]


def test_reproduce_quick_builds_every_section(tmp_path: Path, policy_cache: Path):
    out, page = tmp_path / "results", tmp_path / "docs" / "results.md"
    # the training parts take the session's model cache: the warm start is built once for every test that trains
    proc = subprocess.run([sys.executable, "experiments/reproduce.py", "--quick", "--out", str(out), "--page", str(page),
                           "--", f"model.cache_dir={policy_cache}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["parts"]) == {"phases", "kappa", "balance", "head", "voting", "wallclock", "pretrained",
                                         "page"}
    assert all(p["returncode"] == 0 for p in manifest["parts"].values())

    phases = json.loads((out / "phases" / "phases.json").read_text())
    assert set(phases["arms"]) == {"1", "0.5", "0.25"}
    for arm in phases["arms"].values():  # real steps were timed and counted
        assert arm["medians"]["step"] > 0 and arm["medians"]["generated_tokens"] > 0
    grpo, half = phases["arms"]["1"]["medians"], phases["arms"]["0.5"]["medians"]
    assert grpo["keep_ratio"] == 1.0 and half["trained_tokens"] < grpo["trained_tokens"]

    assert len(list((out / "kappa").glob("*/summary.json"))) == 2  # quick: κ = 0.5 and 1, what later parts read
    assert len(list((out / "balance").glob("*/summary.json"))) == 1  # quick: random only (κ = 0.5 global is kappa's)
    assert json.loads((out / "voting" / "metrics.json").read_text())["k"] == 32
    assert (out / "wallclock.png").stat().st_size > 1000
    pretrained = json.loads((out / "pretrained" / "head_quality.json").read_text())
    assert pretrained["settings"]["prompt_format"]["stop"] == ["\n"] and pretrained["rollouts"] == 12
    assert set(pretrained["inputs"]) == {"last", "mean", "middle", "stats", "last+stats"}
    parity = pretrained["feature_parity"]  # the engine computed both of its inputs, the probe matched them
    assert parity["head_input"] == "last+stats" and parity["stats_max_abs_diff"] < 1e-6
    assert pretrained["votes"]["problems"]["k"] == 2

    text = page.read_text()
    for n in range(1, 13):
        assert f"## {n}." in text
    measured, opt_in = text.split("## 8.")
    assert "Not run" not in measured and "not run" not in text.split("### Every claim")[1].split("## 1.")[0]
    # the opening table: a row per claim and policy, the opt-in parts' rows not run
    unrun = [line.split(" | ")[:2] for line in text.split("### Every claim")[0].splitlines() if "| not run |" in line]
    assert unrun == [["| ARRoL's accuracy ≥ GRPO's in less training time (Fig. 4)", "SmolLM2-135M"],
                     ["| The default experiment learns on every seed (project)", "tiny"],
                     ["| Choosing the groups beats GRPO and DAPO at equal time (project, beyond the paper)",
                      "SmolLM2-135M"]]
    assert json.loads(page.with_suffix(".json").read_text())["claims"]  # the claims, as data beside the page
    # the opt-in parts (online SmolLM2, seeds, online balance, online spread, screen) were not asked for: their sections say how to run them
    assert opt_in.count("Not run") == 5 and all(f"--only {part} page" in opt_in
                                                for part in ("online", "seeds", "online_balance", "online_spread",
                                                             "screen"))
    assert "Quick smoke run" in text
    assert "Table 3 by replay on SmolLM2-135M" in text
    assert (page.parent / "figures" / "wallclock.png").exists()
    assert (page.parent / "figures" / "head_quality.png").exists()
