"""Off a terminal a progress bar writes plain lines (every ``lines``-th of its total, a minute without one, its end
once, nothing before it moved), and the engine's start drops vLLM's C++ NUMA notice from descriptor 2 and keeps the
rest (:mod:`arrol_pl.engine.console`); the run's notices are dropped by their logger and opening, the hub's print on
loading a local head is gone."""

import io
import logging
import os

from arrol_pl.engine import console
from arrol_pl.engine.console import NUMA_NOTICE, PlainProgress, native_lines_dropped, progress


def test_a_bar_off_a_terminal_writes_a_line_each_tenth_and_its_end_once():
    out = io.StringIO()
    bar = PlainProgress(total=25, desc="Training", file=out, lines=10)
    bar.set_description("steps")  # Lightning's renaming before any step: no line
    for step in range(1, 26):
        bar.n = step
        bar.set_postfix(acc=0.5)  # a refresh per step, as the steps bar makes
    bar.set_postfix(acc=0.5)  # the epoch's end redraws, then the close
    bar.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines] == [f"steps: {n}/25" for n in (3, 6, 9, 12, 15, 18, 21, 24, 25)]
    assert all("\r" not in line and "\x1b" not in line and "acc=0.5" in line for line in lines)


def test_a_resumed_bar_writes_nothing_until_it_moves_and_a_stopped_one_where_it_stopped():
    out = io.StringIO()
    bar = PlainProgress(total=300, desc="steps", file=out, lines=10)
    bar.reset(total=300)
    bar.initial = bar.n = 120  # as the steps bar resumes at the checkpoint's step
    bar.refresh()
    assert out.getvalue() == ""
    bar.n = 125
    bar.refresh()
    bar.close()
    assert out.getvalue().startswith("steps: 125/300 [") and out.getvalue().count("\n") == 1


def test_an_evaluation_bar_writes_only_once_a_minute_has_passed(monkeypatch):
    monkeypatch.setenv(console.PROGRESS_SECONDS, "60")
    out = io.StringIO()
    bar = PlainProgress(total=512, desc="held-out avg@4", unit="rollout", file=out, mininterval=0)
    bar.update(500)
    bar.update(12)
    bar.close()
    assert out.getvalue() == ""  # a quick evaluation: nothing
    monkeypatch.setenv(console.PROGRESS_SECONDS, "0")
    bar = PlainProgress(total=512, desc="held-out avg@4", unit="rollout", file=out, mininterval=0)
    bar.update(100)
    bar.line_seconds = 3600.0
    bar.update(412)
    bar.close()
    lines = out.getvalue().splitlines()  # a slow one: its minute's line, then its end
    assert [line.split(" [")[0] for line in lines] == ["held-out avg@4: 100/512", "held-out avg@4: 512/512"]
    assert "rollout/s" in lines[0]


def test_progress_is_plain_off_a_terminal():
    out = io.StringIO()
    with progress(total=3, desc="warm start", file=out) as bar:
        bar.update(3)
    assert isinstance(bar, PlainProgress) and out.getvalue() == ""


def test_the_numa_notice_is_dropped_and_the_rest_of_descriptor_2_kept(capfd):
    with native_lines_dropped(NUMA_NOTICE):
        os.write(2, b"[W1205 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation\n")
        os.write(2, b"a real error\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "a real error\nafter\n"


def test_the_notices_a_user_cannot_act_on_are_dropped_by_their_logger_and_opening():
    from arrol_pl.train.run.console import NOTICES, DropNotices

    def dropped(name: str, message: str) -> bool:
        record = logging.LogRecord(name, logging.INFO, __file__, 0, message, None, None)
        return not DropNotices(NOTICES[name]).filter(record)

    rank_zero = "lightning.pytorch.utilities.rank_zero"
    for message in (
        "Using bfloat16 Automatic Mixed Precision (AMP)",
        "GPU available: True (cuda), used: True",
        "TPU available: False, using: 0 TPU cores",
        "Restoring states from the checkpoint path at x",
        "You are using a CUDA device ('NVIDIA H200') that has Tensor Cores. To properly utilize them",
    ):
        assert dropped(rank_zero, message), message
    assert dropped("lightning.pytorch.accelerators.cuda", "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]")
    assert dropped("matplotlib.font_manager", "generated new fontManager")
    assert not dropped(rank_zero, "Restored all states from the checkpoint at /run/checkpoints/last.ckpt")
    assert not dropped("matplotlib.font_manager", "Matplotlib is building the font cache; this may take a moment.")


def test_loading_a_head_from_its_folder_prints_nothing(tmp_path, capsys):
    from arrol_pl.core.calibration import BinnedCalibrator
    from arrol_pl.core.quality_head import QualityHead
    from arrol_pl.models.head import CalibratedHead, save_head

    save_head(QualityHead(8, 4), BinnedCalibrator(), tmp_path / "head")
    capsys.readouterr()
    CalibratedHead.from_pretrained(tmp_path / "head")
    assert capsys.readouterr().out == ""
