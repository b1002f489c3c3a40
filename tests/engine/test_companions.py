"""The companion packages' check: a torch extension that would end a run's import is named in one line with its fix;
one that fails the way its importer tolerates (torchcodec without FFmpeg) and one that is not installed pass. The
packages here are stand-ins on a temporary path: no broken build of them can be installed beside the tested stack."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from arrol_pl.engine.companions import BrokenCompanionError, broken_companions, check_companions


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Write a package ``name`` whose import runs ``body``, first on the import path."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, body: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        monkeypatch.delitem(sys.modules, name, raising=False)

    return write


def test_a_companion_that_cannot_load_is_named_with_its_error_and_the_fix(packages):
    packages("torchvision", "raise RuntimeError('operator torchvision::nms does not exist')\n")
    packages("torchaudio", "raise OSError('Could not load this library: _torchaudio.so')\n")
    packages("torchcodec", "raise OSError('libnvrtc.so.13: cannot open shared object file')\n")
    assert [name for name, _, _ in broken_companions()] == ["torchvision", "torchaudio", "torchcodec"]
    with pytest.raises(BrokenCompanionError) as err:
        check_companions()
    text = str(err.value)
    assert "\n" not in text and text.endswith("pip uninstall -y torchvision torchaudio torchcodec"), text
    assert "RuntimeError: operator torchvision::nms does not exist" in text and "libnvrtc.so.13" in text


def test_what_the_importers_tolerate_and_what_is_absent_pass(packages):
    packages("torchcodec", "raise RuntimeError('Could not load libtorchcodec: FFmpeg is not installed')\n")
    packages("torchvision", "VERSION = 'a build that loads'\n")
    assert importlib.util.find_spec("torchaudio") is None  # the tested stack removes it (scripts/setup_env.sh)
    assert broken_companions() == []
    check_companions()
