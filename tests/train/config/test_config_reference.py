"""docs/configuration.md's reference and docs/guide.md's preset tables are generated from the typed configs and
the files in conf/ (arrol_pl.train.config.reference): both must be current, every key must say what it means and
every preset what it is."""

import dataclasses
import shutil
from pathlib import Path

import pytest

from arrol_pl.train.config.reference import (
    MARKER,
    PRESETS_END,
    PRESETS_START,
    SKIP_GROUPS,
    first_sentence,
    guide,
    keys,
    page,
    preset_changes,
)

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "configuration.md"
GUIDE = ROOT / "docs" / "guide.md"


def test_the_page_is_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "write_config_reference", ROOT / "experiments" / "write_config_reference.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    existing = PAGE.read_text()
    assert MARKER in existing
    assert page(existing, ROOT / "conf", script.SCRIPTS) == existing, (
        "run: python experiments/write_config_reference.py"
    )
    assert script.main(["--check"]) == 0  # the script checks the guide's preset tables as well
    # the other scripts' own keys, their shared sections once
    assert "| `samples` | `int` | `8` | Rollouts per problem. |" in existing and "| `data.*` |" in existing
    assert "| `k` | `int` | `8` |" in existing


def test_every_key_is_listed_with_its_meaning_and_the_presets_that_set_it():
    from arrol_pl.train.config.run import RunConfig

    rows = {key: (kind, default, meaning) for key, kind, default, meaning in keys(RunConfig)}
    assert rows["pruning.keep_ratio"] == (
        "float",
        0.5,
        "κ: target fraction of rollouts that survive L_detect (paper 0.5).",
    )
    assert rows["pruning.screen.stages"][1] == "none" and all(meaning for _, _, meaning in rows.values())
    changes = preset_changes(ROOT / "conf")
    assert "pruning=arrol_gated (default)" in changes["pruning.gate_auc"]
    assert "pruning=arrol_screen_prompt" in changes["pruning.screen.stages"]
    assert "+exp=seeds" in changes["trainer.eval_every"] and "algo=dapo" in changes["algo.clip_high"]
    text = PAGE.read_text()
    assert (
        "| `pruning.keep_ratio` | `float` | `0.5` |" in text and "| `data.options.max_operands` | `int` | `4` |" in text
    )


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
    assert (
        first_sentence("Split (None: the adapter's, e.g. ``train``). More.")
        == "Split (None: the adapter's, e.g. ``train``)."
    )
    assert first_sentence("One sentence only") == "One sentence only"
    # a full stop inside brackets ends nothing; a sentence may start with a key in lower case
    assert (
        first_sentence("The run (§5.1, App. A.4; Table 1) on 8 GPUs. More.")
        == "The run (§5.1, App. A.4; Table 1) on 8 GPUs."
    )
    assert first_sentence("Fetched on first use. model.path=DIR reads a copy.") == "Fetched on first use."
    assert first_sentence("Set data.x=... when it has one. More.") == "Set data.x=... when it has one."


def preset_block(text: str) -> str:
    return text.split(PRESETS_START, 1)[1].split(PRESETS_END, 1)[0]


def test_the_guides_preset_tables_are_current_and_list_every_preset_file():
    text = GUIDE.read_text()
    assert guide(text, ROOT / "conf") == text, "run: python experiments/write_config_reference.py"
    block = preset_block(text)
    files = [path for path in sorted((ROOT / "conf").glob("*/*.yaml")) if path.parent.name not in SKIP_GROUPS]
    assert len(files) > 40
    for path in files:
        group, name = path.parent.name, path.stem
        assert f"| `{group}={name}`" in block or f"| `+{group}={name}`" in block, f"{path} is not in the guide"
    for group in ("model", "data", "algo", "pruning", "exp", "arm"):
        assert f"**`conf/{group}/`**" in block
    # the defaults are marked, and a row says what the preset is (its opening comment's first sentence)
    assert "| `pruning=arrol_gated` (default) | ARRoL with the discrimination gate (beyond the paper):" in block
    assert "| `model=qwen3_8b` | Qwen3-8B-Base (the paper's Tables 1 and 3)" in block
    assert "| `+exp=paper_grpo` | The paper's GRPO + ARRoL run (§5.1, App. A.4; Table 1) on 1 node × 8 GPUs:" in block
    assert "| `+arm=dapo` |" in block and "@package" not in block


def test_a_preset_added_without_regenerating_makes_the_guide_stale(tmp_path: Path):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "pruning" / "halves.yaml").write_text("# Prune half of every group.\n# More on it.\ndefaults:\n  - arrol\n")
    text = GUIDE.read_text()
    regenerated = guide(text, conf)
    assert regenerated != text
    assert "| `pruning=halves` | Prune half of every group. |" in preset_block(regenerated)
    assert regenerated.split(PRESETS_START)[0] == text.split(PRESETS_START)[0]
    assert regenerated.split(PRESETS_END)[1] == text.split(PRESETS_END)[1]


def test_a_preset_without_an_opening_comment_is_refused(tmp_path: Path):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "arm" / "bare.yaml").write_text("# @package _global_\ndefaults:\n  - override /pruning: none\n")
    with pytest.raises(ValueError, match=r"bare\.yaml opens with no comment"):
        guide(GUIDE.read_text(), conf)
    with pytest.raises(ValueError, match="no .*presets:start.* block"):
        guide("# A guide without the block\n", ROOT / "conf")
