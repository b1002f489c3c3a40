"""``experiments/reproduce.py``'s bookkeeping without running any measurement: a part of several commands."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reproduce():
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "experiments" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_replicate_probes_are_one_opt_in_part_of_two_seeded_commands(reproduce, tmp_path: Path):
    assert "pretrained_seeds" in reproduce.OPT_IN
    argvs = reproduce.commands(reproduce.parse_args(["--out", str(tmp_path)]))["pretrained_seeds"]
    assert len(argvs) == len(reproduce.PROBE_SEEDS) == 2
    for argv, seed in zip(argvs, reproduce.PROBE_SEEDS):
        assert argv[1] == "experiments/head_quality.py" and argv[2:] == [
            *reproduce.PRETRAINED_PROBE,
            f"seed={seed}",  # section 7's probe, another seed
            f"hydra.run.dir={tmp_path / 'pretrained_seeds' / str(seed)}",
        ]


@pytest.mark.subprocess
def test_a_part_of_several_commands_runs_them_in_order_into_one_log(reproduce, tmp_path: Path):
    py = sys.executable
    manifest = {"parts": {}}
    reproduce.run_part("two", [[py, "-c", "print('first')"], [py, "-c", "print('second')"]], tmp_path, manifest)
    assert (tmp_path / "logs" / "two.log").read_text().split() == ["first", "second"]
    recorded = json.loads((tmp_path / "manifest.json").read_text())["parts"]["two"]
    assert recorded["returncode"] == 0 and recorded["command"] == "-c print('first') && -c print('second')"
    # the first failure stops the part (the later command does not run) and names the part
    with pytest.raises(SystemExit, match="part 'bad' failed \\(exit 3\\)"):
        reproduce.run_part("bad", [[py, "-c", "raise SystemExit(3)"], [py, "-c", "print('never')"]], tmp_path, manifest)
    assert "never" not in (tmp_path / "logs" / "bad.log").read_text()
    reproduce.run_part("one", [py, "-c", "print('alone')"], tmp_path, manifest)  # a single argv as before
    assert (tmp_path / "logs" / "one.log").read_text().strip() == "alone"


def test_a_page_after_some_parts_rebuilds_only_their_sections(reproduce, tmp_path: Path):
    from results_page.page import SECTION_KEYS

    page = tmp_path / "results.md"
    args = reproduce.parse_args(["--out", str(tmp_path), "--page", str(page), "--only", "seeds", "kappa", "page"])
    assert reproduce.page_sections(args) == []  # no page yet: the whole page is built
    page.write_text("# Results\n")
    assert reproduce.page_sections(args) == ["--sections", "balance", "head", "kappa", "seeds", "wallclock"]
    assert (
        reproduce.page_sections(reproduce.parse_args(["--out", str(tmp_path), "--page", str(page), "--only", "page"]))
        == []
    )
    assert set(reproduce.PART_SECTIONS) == set(reproduce.PARTS) - {"page"}
    assert {s for sections in reproduce.PART_SECTIONS.values() for s in sections} == set(SECTION_KEYS)


def test_the_gradient_probe_is_one_opt_in_part_of_a_command_per_policy(reproduce, tmp_path: Path):
    assert "grad_probe" in reproduce.OPT_IN and reproduce.PART_SECTIONS["grad_probe"] == ("grad_probe",)
    argvs = reproduce.commands(reproduce.parse_args(["--out", str(tmp_path)]))["grad_probe"]
    assert [argv[1] for argv in argvs] == ["experiments/grad_probe.py"] * 2
    # one directory per policy under grad_probe/, where section 14 reads each probe's grad_probe.json
    assert [argv[-1] for argv in argvs] == [
        f"hydra.run.dir={tmp_path / 'grad_probe' / policy}" for policy in ("tiny", "smollm2")
    ]
    assert [argv[2] for argv in argvs] == ["policy=tiny", "policy=smollm2"]
    page = tmp_path / "results.md"
    page.write_text("# Results\n")
    args = reproduce.parse_args(["--out", str(tmp_path), "--page", str(page), "--only", "grad_probe", "page"])
    assert reproduce.page_sections(args) == ["--sections", "grad_probe"]


def test_the_peer_benchmark_is_one_opt_in_part_of_a_command_per_task(reproduce, tmp_path: Path):
    assert "peers" in reproduce.OPT_IN and reproduce.PART_SECTIONS["peers"] == ("peers",)
    argvs = reproduce.commands(reproduce.parse_args(["--out", str(tmp_path)]))["peers"]
    assert [argv[1] for argv in argvs] == ["experiments/bench_peers.py"] * 3
    # section 15 reads peers/<task>/peers.json
    assert [argv[-2:] for argv in argvs] == [
        ["--out", str(tmp_path / "peers" / task)] for task in ("default", "long", "long_all_slots")
    ]
    assert argvs[1][2:4] == ["--preset", "bench_phases"]
    assert argvs[2][2:5] == ["--preset", "bench_phases", "engine.max_num_seqs=128"]
