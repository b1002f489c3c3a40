"""``trainer.push_to_hub``: a run's ``export/`` (written by the real export_policy and write_run_card from a tiny
policy) is pushed whole as a model repository, the policy and tokenizer at its root, the head in quality_head/, the
card as README.md. No hub is reachable here, so the push goes to a recording stand-in for ``HfApi`` whose calls are
bound to the real ``HfApi`` methods' signatures; the operations are huggingface_hub's own. (The layout of a real
run's export: test_run_smoke.py.)"""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from arrol_pl.train.run.finish import HUB_FILES, export_policy, export_run, hub_files, push_export, write_run_card


class RecordingHub:
    """The ``HfApi`` calls a push makes, checked against the real methods' signatures and recorded."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail

    def _record(self, name: str, *args, **kwargs) -> dict:
        from huggingface_hub import HfApi

        bound = inspect.signature(getattr(HfApi, name)).bind(None, *args, **kwargs)  # TypeError if HfApi would refuse
        self.calls.append((name, dict(bound.arguments)))
        return bound.arguments

    def create_repo(self, *args, **kwargs) -> str:
        return f"https://huggingface.co/{self._record('create_repo', *args, **kwargs)['repo_id']}"

    def create_commit(self, *args, **kwargs) -> None:
        self._record("create_commit", *args, **kwargs)
        if self.fail is not None:
            raise self.fail


def trained(tiny_model_dirs) -> tuple[SimpleNamespace, object]:
    """What a run's export reads of its module (the tiny policy, a fresh head, three steps of history), and its
    tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arrol_pl.core.calibration import BinnedCalibrator
    from arrol_pl.core.quality_head import QualityHead

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["policy"])
    module = SimpleNamespace(
        ranks=SimpleNamespace(alone=True, rank=0),
        policy=policy,
        head=QualityHead(128, 8),
        calibrator=BinnedCalibrator(),
        history=[{}] * 3,
    )
    return module, AutoTokenizer.from_pretrained(tiny_model_dirs["policy"])


@pytest.fixture(scope="module")
def export(tmp_path_factory, tiny_model_dirs) -> Path:
    """A run's export/ as export_policy and write_run_card write it, from the tiny policy and a fresh head."""
    from arrol_pl.train.config.run import RunConfig

    module, tokenizer = trained(tiny_model_dirs)
    out = export_policy(module, tokenizer, tmp_path_factory.mktemp("run") / "export", RunConfig().data.prompt_format())
    write_run_card(out, RunConfig(), 3, None, None)
    return out


def test_an_export_is_written_whole_or_not_at_all(tiny_model_dirs, tmp_path, monkeypatch):
    """Written beside export/ and renamed into place: a write that fails half way (a full disk as the head is saved)
    leaves no export/ and no partial copy, nor does a killed one's leftover stay; a resumed run's export replaces the
    earlier one whole."""
    from arrol_pl.train.config.run import RunConfig
    from arrol_pl.train.run import finish

    module, tokenizer = trained(tiny_model_dirs)
    (tmp_path / ".export.partial" / "quality_head").mkdir(parents=True)  # a killed export's

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(finish, "save_head", full_disk)
        with pytest.raises(OSError, match="No space left on device"):
            export_run(module, tokenizer, tmp_path / "export", RunConfig(), None, None)
    assert list(tmp_path.iterdir()) == []
    out = export_run(module, tokenizer, tmp_path / "export", RunConfig(), None, None)
    assert out == tmp_path / "export" and set(HUB_FILES) <= set(hub_files(out))
    assert "3 steps" in (out / "README.md").read_text()
    (out / "from-the-first-session.txt").write_text("")
    export_run(module, tokenizer, out, RunConfig(), None, None)
    assert [p.name for p in tmp_path.iterdir()] == ["export"] and not (out / "from-the-first-session.txt").exists()
    assert set(HUB_FILES) <= set(hub_files(out))


def test_the_export_is_pushed_whole_as_a_model_repository(export):
    from huggingface_hub import CommitOperationAdd
    from transformers import AutoModelForCausalLM

    hub = RecordingHub()
    assert push_export(export, "someone/arrol-policy", api=hub) == "https://huggingface.co/someone/arrol-policy"
    (create, repo), (commit, args) = hub.calls
    assert create == "create_repo" and repo["repo_id"] == "someone/arrol-policy"
    assert repo["repo_type"] == "model" and repo["exist_ok"] is True
    assert commit == "create_commit" and args["repo_id"] == "someone/arrol-policy" and args["repo_type"] == "model"
    ops = args["operations"]
    assert all(isinstance(op, CommitOperationAdd) for op in ops)
    uploaded = {op.path_in_repo: Path(op.path_or_fileobj) for op in ops}
    on_disk = {p.relative_to(export).as_posix(): p for p in export.rglob("*") if p.is_file()}
    assert uploaded == on_disk, "every file of export/, each at its own path, nothing else"
    assert set(HUB_FILES) <= set(uploaded) and "prompt_format.json" in uploaded
    assert {"quality_head/config.json", "quality_head/model.safetensors", "quality_head/README.md"} <= set(uploaded)
    assert uploaded["README.md"].read_text().startswith("---\nlibrary_name: transformers\n")
    # the repository's root is what AutoModelForCausalLM.from_pretrained(repo id) loads: the export's own root
    model = AutoModelForCausalLM.from_pretrained(export)
    assert model.config.model_type == "qwen3" and torch.isfinite(next(model.parameters())).all()


def test_a_partial_export_is_refused_before_anything_is_pushed(export, tmp_path):
    partial = tmp_path / "export"
    shutil.copytree(export, partial)
    (partial / "quality_head" / "model.safetensors").unlink()
    (partial / "README.md").unlink()
    hub = RecordingHub()
    with pytest.raises(
        ValueError,
        match=r"is not a whole export: it lacks README.md \(the run's card\), "
        r"quality_head/model.safetensors \(the quality head's weights\)",
    ):
        push_export(partial, "someone/arrol-policy", api=hub)
    assert hub.calls == []


def test_a_failed_push_keeps_the_export_and_names_how_to_push_it_again(export):
    before = hub_files(export)
    hub = RecordingHub(fail=ConnectionError("Max retries exceeded with url: /api/repos/create\nmore"))
    with pytest.raises(RuntimeError) as err:
        push_export(export, "someone/arrol-policy", api=hub)
    message = str(err.value)
    assert "\n" not in message and "trainer.push_to_hub=someone/arrol-policy: the push failed (Max retries" in message
    assert f"push it with `hf upload someone/arrol-policy {export} .`" in message
    assert hub_files(export) == before
