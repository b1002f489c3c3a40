"""docs/configuration.md's reference is generated from the typed configs (arrol_pl.train.config_reference): it
must be current, and every key must say what it means."""

import dataclasses
from pathlib import Path

import pytest

from arrol_pl.train.config_reference import MARKER, first_sentence, keys, page, preset_changes

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_page_is_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location("write_config_reference",
                                                  ROOT / "experiments" / "write_config_reference.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    existing = PAGE.read_text()
    assert MARKER in existing
    assert page(existing, ROOT / "conf", script.SCRIPTS) == existing, "run: python experiments/write_config_reference.py"
    # the other scripts' own keys, their shared sections once
    assert "| `samples` | `int` | `8` | Rollouts per problem. |" in existing and "| `data.*` |" in existing
    assert "| `k` | `int` | `8` |" in existing


def test_every_key_is_listed_with_its_meaning_and_the_presets_that_set_it():
    from arrol_pl.train.config import RunConfig

    rows = {key: (kind, default, meaning) for key, kind, default, meaning in keys(RunConfig)}
    assert rows["pruning.keep_ratio"] == ("float", 0.5, "κ: target fraction of rollouts that survive L_detect (paper 0.5).")
    assert rows["pruning.screen.stages"][1] == "none" and all(meaning for _, _, meaning in rows.values())
    changes = preset_changes(ROOT / "conf")
    assert "pruning=arrol_gated (default)" in changes["pruning.gate_auc"]
    assert "pruning=arrol_screen_prompt" in changes["pruning.screen.stages"]
    assert "+exp=seeds" in changes["trainer.eval_every"] and "algo=dapo" in changes["algo.clip_high"]
    text = PAGE.read_text()
    assert "| `pruning.keep_ratio` | `float` | `0.5` |" in text and "| `data.options.max_operands` | `int` | `4` |" in text


def test_a_key_without_a_docstring_is_refused():
    @dataclasses.dataclass
    class Section:
        documented: int = 1
        """What it is."""
        bare: int = 2

    @dataclasses.dataclass
    class Config:
        section: Section = dataclasses.field(default_factory=Section)
        """A section."""

    with pytest.raises(ValueError, match=r"section\.bare \(Section\.bare\) has no docstring"):
        list(keys(Config))


def test_the_first_sentence_keeps_abbreviations_whole():
    assert first_sentence("Split (None: the adapter's, e.g. ``train``). More.") == "Split (None: the adapter's, e.g. ``train``)."
    assert first_sentence("One sentence only") == "One sentence only"
