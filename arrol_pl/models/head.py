"""The exported quality head on the Hugging Face Hub's terms: :class:`CalibratedHead`, the head (§4.2) and its
calibrator (A.4) as one ``PyTorchModelHubMixin`` model, saved as ``model.safetensors`` (the head's weights) plus
``config.json`` (the head's sizes and input kind, and the calibrator's whole state) and a model card, loaded with
one call, ``CalibratedHead.from_pretrained(directory or repo id)``, pushed with ``push_to_hub(repo id)``.

Decisions:
- **Beside the policy, in a folder of its own.** A run's ``export/`` is a transformers directory, whose
  ``config.json`` and ``model.safetensors`` are the policy's: the head goes to ``export/quality_head/``
  (:data:`HEAD_FOLDER`), and ``export/README.md`` is the run's card (:func:`write_run_card`).
- **The calibrator's state is data.** Its window (scores, labels, weights, capacity entries each) is written as
  JSON numbers, which read back to the same float64 values, so a loaded calibrator maps scores exactly as the
  run's last one did and can keep learning. ``config.json`` is a snapshot taken when the head is built.
- **No code is executed on load**: safetensors and JSON only, loaded strictly (every weight present, none extra).
- The core stays torch-only: this wrapper, not :class:`~arrol_pl.core.quality_head.QualityHead`, takes the hub
  dependency.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from arrol_pl.core.calibration import BinnedCalibrator
from arrol_pl.core.quality_head import QualityHead

HEAD_FOLDER = "quality_head"
"""The folder of a run's ``export/`` that holds the head."""

LOCAL_LOAD = "Loading weights from local directory"
"""What the hub mixin prints on every load from a directory: nothing a user can act on (dropped)."""

CARD = """---
{{ card_data }}
---

# ARRoL quality head

The quality head and calibrator of an ARRoL run (online rollout pruning for RLVR): a 2-layer MLP from a rollout's
detect-time feature (the policy's final hidden state at L_detect, or the prefix's log-prob statistics, as
`config.json`'s `input_kind` says) to a success logit, and the online binned calibrator that maps the logit to
P(correct).

```python
from arrol_pl.models.head import CalibratedHead

head = CalibratedHead.from_pretrained("path/or/repo-id")
logits = head(features)            # (N, input_dim) -> (N,) raw logits
q = head.posterior(features)       # calibrated P(correct)
```

Feed it to the engine with the policy it was trained with: `ArrolEngine(policy, head=head.head)`, or hold it in
`OnlinePruning` to keep learning (`docs/library.md` of arrol-pl).
"""


def calibrator_json(calibrator: BinnedCalibrator) -> dict[str, Any]:
    """The calibrator's state with plain lists for its tensors (JSON; float64 values read back exactly)."""
    return {
        key: value.tolist() if isinstance(value, torch.Tensor) else value
        for key, value in calibrator.state_dict().items()
    }


def calibrator_from_json(state: dict[str, Any]) -> BinnedCalibrator:
    """The calibrator :func:`calibrator_json` wrote."""
    calibrator = BinnedCalibrator(int(state["num_bins"]), int(state["capacity"]), float(state["alpha"]))
    calibrator.load_state_dict(state)
    return calibrator


class CalibratedHead(
    nn.Module,
    PyTorchModelHubMixin,
    library_name="arrol-pl",
    model_card_template=CARD,
    tags=["arrol", "rlvr", "rollout-pruning", "quality-head"],
):
    """A quality head and its calibrator; ``forward(features: (N, D)) -> (N,)`` logits, :meth:`posterior` the
    calibrated probabilities. Build one from a run's with :meth:`from_run`."""

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int = 256,
        input_kind: str = "last",
        standardize: bool = False,
        calibrator: dict[str, Any] | None = None,
    ) -> None:
        """The arguments are what ``config.json`` holds: the head's sizes, its input kind, whether it standardises
        its input, and the calibrator's state (:func:`calibrator_json`; None: a fresh calibrator)."""
        super().__init__()
        self.head = QualityHead(input_dim, hidden_dim, input_kind, standardize)
        self.calibrator = calibrator_from_json(calibrator) if calibrator is not None else BinnedCalibrator()

    @classmethod
    def from_run(cls, head: QualityHead, calibrator: BinnedCalibrator) -> "CalibratedHead":
        """A copy of a run's ``head`` (its weights and input moments) and ``calibrator`` (its state now)."""
        out = cls(head.input_dim, head.hidden_dim, head.input_kind, head.standardize, calibrator_json(calibrator))
        out.head.load_state_dict(head.state_dict())
        return out.eval()

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)

    @torch.no_grad()
    def posterior(self, features: torch.Tensor) -> torch.Tensor:
        """``(N,)`` calibrated P(correct) of ``features: (N, D)``."""
        return self.calibrator.posterior(self.head(features).float().cpu())

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs):
        # the hub mixin loads non-strictly by default; a head with a missing or an extra tensor is refused here.
        # It prints LOCAL_LOAD on every load from a directory (a run's export): dropped, anything else it prints kept.
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):
                return super()._from_pretrained(strict=strict, **kwargs)
        finally:
            sys.stdout.write(
                "".join(line for line in said.getvalue().splitlines(keepends=True) if line.strip() != LOCAL_LOAD)
            )


def check_push_target(repo_id: str) -> None:
    """ValueError when ``repo_id`` is no hub repository id (``user/name``) or this process is kept off the hub
    (``HF_HUB_OFFLINE``): a run that could not push is refused before it starts, not after it trained."""
    from huggingface_hub import constants
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ValueError(f"not a hub repository id (user/name): {str(exc).splitlines()[0]}") from None
    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            "HF_HUB_OFFLINE=1 (the Makefile's default) keeps this process off the hub: run with "
            "HF_HUB_OFFLINE=0 and a token (huggingface-cli login)"
        )


def save_head(head: QualityHead, calibrator: BinnedCalibrator, directory: Path | str) -> Path:
    """Write ``head`` and ``calibrator`` as a :class:`CalibratedHead` into ``directory`` (``config.json``,
    ``model.safetensors``, ``README.md``); a run pushes it with its policy (``trainer.push_to_hub``)."""
    CalibratedHead.from_run(head, calibrator).save_pretrained(directory)
    return Path(directory)


def load_head(export_dir: Path | str) -> tuple[QualityHead, BinnedCalibrator] | None:
    """The head and calibrator a run exported into ``export_dir`` (its :data:`HEAD_FOLDER`); None when it holds
    none. An export written before the hub format (``quality_head.pt`` and ``calibrator.pt``) reads too."""
    export_dir = Path(export_dir)
    if (export_dir / HEAD_FOLDER / "config.json").is_file():
        hub = CalibratedHead.from_pretrained(export_dir / HEAD_FOLDER)
        return hub.head, hub.calibrator
    if not (export_dir / "quality_head.pt").is_file():
        return None
    head = QualityHead.load(export_dir / "quality_head.pt")
    calibrator = BinnedCalibrator()
    if (export_dir / "calibrator.pt").is_file():
        state = torch.load(export_dir / "calibrator.pt", map_location="cpu", weights_only=True)
        calibrator = BinnedCalibrator(state["num_bins"], state["capacity"], state["alpha"])
        calibrator.load_state_dict(state)
    return head, calibrator


def has_head(export_dir: Path | str) -> bool:
    """Whether ``export_dir`` holds an exported head (without loading it: config checks run before any model)."""
    export_dir = Path(export_dir)
    return (export_dir / HEAD_FOLDER / "config.json").is_file() or (export_dir / "quality_head.pt").is_file()
