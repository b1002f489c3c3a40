"""arrol_pl.analysis.wallclock: a sweep folder stands for its jobs, labels say what tells runs apart, and a sweep
writes its own figure beside its table."""

import json
from pathlib import Path

from arrol_pl.analysis import sweep, wallclock


def fake_run(root: Path, arm: str, seed: int, slope: float, heldout: bool = True) -> Path:
    run = root / f"{arm},trainer.seed={seed}"
    run.mkdir(parents=True)
    rows = [
        {
            "time/wall": 10.0 * (i + 1) + seed,
            "reward/accuracy": 0.3,
            **({"heldout/accuracy": 0.2 + slope * (i + 1)} if heldout else {}),
        }
        for i in range(5)
    ]
    (run / "history.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "summary.json").write_text(
        json.dumps({"overrides": [arm, f"trainer.seed={seed}", "+exp=demo"], "heldout_accuracy_before": 0.2})
    )
    return run


def test_a_sweep_folder_stands_for_its_jobs_labelled_by_what_tells_them_apart(tmp_path):
    sweep_dir = tmp_path / "sweep"
    runs = [fake_run(sweep_dir, arm, seed, 0.02) for arm in ("pruning=none", "pruning=arrol") for seed in (0, 1)]
    (sweep_dir / "multirun.yaml").write_text("{}")
    assert wallclock.expand([sweep_dir]) == sorted(runs) and wallclock.expand([runs[0]]) == [runs[0]]
    # the sweep's shared +exp=demo is left out; by arm, the seed too
    assert wallclock.labels(runs, drop_seed=True) == ["pruning=none"] * 2 + ["pruning=arrol"] * 2
    assert wallclock.labels(runs[:2], drop_seed=False) == ["trainer.seed=0", "trainer.seed=1"]
    assert {k: len(v) for k, v in wallclock.group(runs, by_arm=True).items()} == {"pruning=none": 2, "pruning=arrol": 2}
    assert wallclock.default_tag(runs) == "heldout/accuracy"


def test_a_sweep_writes_its_wall_clock_figure_beside_its_table(tmp_path):
    evaluated, not_evaluated = tmp_path / "a", tmp_path / "b"
    for seed in (0, 1):
        fake_run(evaluated, "pruning.keep_ratio=0.5", seed, 0.03)
        fake_run(not_evaluated, "pruning.keep_ratio=0.5", seed, 0.03, heldout=False)
    figure = sweep.write_wallclock(evaluated)
    assert figure == evaluated / "wallclock.png" and figure.stat().st_size > 1000
    assert wallclock.default_tag(wallclock.expand([not_evaluated])) == "reward/accuracy"
    assert sweep.write_wallclock(not_evaluated).exists()  # training reward instead of held-out accuracy
    empty = tmp_path / "c"
    empty.mkdir()
    assert sweep.write_wallclock(empty) is None and not (empty / "wallclock.png").exists()  # no jobs, no figure
