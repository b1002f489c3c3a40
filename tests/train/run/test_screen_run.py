"""experiments/run.py with the group screen and with DAPO's refill: the real entry point, the real engine,
real rewards; what each step records and what a checkpoint keeps."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_run_smoke import refused_before_hydra_starts, run_script  # noqa: E402

from arrol_pl.core.screen_audit import AuditCounts  # noqa: E402
from arrol_pl.core.screen_audit import audit_totals  # noqa: E402

pytestmark = pytest.mark.slow


def history_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def test_dapo_refill_generates_until_b_informative_groups(tmp_path, policy_cache):
    """The only run of DAPO's dynamic sampling through the real entry point: refill batches are generated until B
    informative groups are found or ``algo.max_num_gen_batches`` is spent."""
    out = run_script(
        tmp_path,
        "trainer.max_steps=3",
        "algo=dapo",
        "pruning=none",
        "data.num_heldout=0",
        "algo.max_num_gen_batches=3",
        f"hydra.run.dir={tmp_path / 'run'}",
        warm=True,
        cache=policy_cache,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    history = history_of(tmp_path / "run")
    for h in history:
        assert 1 <= h["refill/rounds"] <= 3
        assert h["refill/rollouts_generated"] == 16 * h["refill/rounds"]  # B = 4 prompts × G = 4 a round
        if not h["refill/short"]:  # B informative groups reached the update
            assert h["balance/zero_advantage_fraction"] == 0.0
    assert any(h["refill/rounds"] > 1 for h in history), "the warm policy leaves some groups all-correct or all-wrong"


def test_screen_and_refill_together_fail_before_any_model_loads(tmp_path, command_main):
    out = refused_before_hydra_starts(
        command_main, tmp_path, "algo=dapo", "pruning.screen.stages=detect", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert out.returncode == 2 and "are two ways of choosing the step's groups" in out.stderr
    assert not (tmp_path / "cache").exists()


SCREEN = (
    "pruning.screen.stages=prompt+detect",
    "pruning.screen.audit=0.5",
    "pruning.screen.oversample=0.5",
    "pruning.screen.prompt_oversample=1.0",
    "trainer.max_steps=4",
    "data.num_heldout=0",
)


def test_a_screened_run_trains_b_groups_audits_and_resumes_exactly(tmp_path, policy_cache):
    """Both stages on the real engine. The prompt head, its calibrator and replay window live in the checkpoint and
    the screen's draws are a function of the step, so a run resumed from step 2 repeats the uninterrupted history."""
    ref = run_script(tmp_path, *SCREEN, f"hydra.run.dir={tmp_path / 'ref'}", warm=True, cache=policy_cache)
    assert ref.returncode == 0, ref.stderr[-4000:]
    history = history_of(tmp_path / "ref")
    assert len(history) == 4
    for h in history:
        # 4 trained groups: 6 reach L_detect (oversample 0.5), of 12 prompts scored (prompt_oversample 1.0);
        # the shadow groups (prompts dropped but audited) generate on top.
        assert 6 <= h["screen/groups_generated"] <= 12
        assert h["screen/tokens_dropped_groups"] > 0
        assert "time/screen" in h and "screen/prompt_head_loss" in h
        for stage in ("prompt", "detect"):
            assert h[f"screen/{stage}_audit_screened"] <= h[f"screen/{stage}_audit_audited"]
    assert history[0]["screen/prompt_audit_audited"] == 0, "the cold start's random screen is not audited"
    for stage, dropped_share in (("prompt", 0.5), ("detect", 2 / 6)):
        totals = audit_totals(history, stage)
        assert isinstance(totals, AuditCounts) and totals.audited > 0
        assert totals.dropped_share_sum == pytest.approx(dropped_share * totals.audited)
    ckpt = torch.load(tmp_path / "ref" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["PromptDataModule"]["prompts_per_step"] == 12, "the stream draws the oversampled count"
    assert set(ckpt["arrol"]["prompt_scorer"]) == {"head", "calibrator", "replay", "optimizer", "generator"}
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert set(summary["screen"]) == {"prompt", "detect", "cost_share"} and 0 < summary["screen"]["cost_share"] < 1
    assert summary["screen"]["detect"]["audited"] == audit_totals(history, "detect").audited

    resumed = run_script(
        tmp_path,
        *SCREEN,
        f"trainer.resume={tmp_path / 'ref' / 'checkpoints' / 'step00002.ckpt'}",
        f"hydra.run.dir={tmp_path / 'resumed'}",
        warm=True,
        cache=policy_cache,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    assert strip(history_of(tmp_path / "resumed")) == strip(history)
