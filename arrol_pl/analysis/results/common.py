"""What every section of the results page shares: reading a part's JSON and the verdict's wording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_json(path: Path) -> Any:
    """The JSON a part wrote at ``path``; None when the part did not run."""
    return json.loads(path.read_text()) if path.exists() else None


def verdict(ok: bool) -> str:
    return "**reproduced**" if ok else "**not reproduced**"


def parity(data: dict) -> str:
    """How closely a probe's features matched the engine's: the hidden state's, and the prefix statistics' when
    the engine computed them too."""
    p = data["feature_parity"]
    text = f"{p['max_abs_diff']:.1e}"
    if p.get("stats_max_abs_diff") is not None:
        text += f" (hidden state; prefix statistics to {p['stats_max_abs_diff']:.1e})"
    return text
