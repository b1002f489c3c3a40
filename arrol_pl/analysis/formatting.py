"""Numbers and tables as the reports write them: :func:`fmt` for every number, :func:`table_lines` for every
Markdown table.

Decisions:
- **One formatter.** A number that was never measured (None) reads ``n/a``; what the report does with NaN (and
  infinities) is a parameter, since the reports differ: the results page and the run summary write ``n/a`` for NaN
  and print infinities, the probe tables write ``n/a`` for anything not finite, the sweep tables print NaN as
  Python does (``nan``). ``spec=None`` gives the JSON value instead of text (None for anything not finite: JSON has
  no NaN).
- **One table helper.** Every Markdown table is a title row, a ``|---|`` rule and one row per line; a None cell is
  left blank (``| |``), an empty string keeps the two spaces of an empty f-string field (``|  |``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def fmt(value: Any, spec: str | None = ".3f", *, unit: str = "", nan: str | None = "n/a", finite: bool = False) -> Any:
    """``value`` as report text: ``format(value, spec) + unit``, or ``n/a`` for None.

    Args:
        spec: the format spec (``".3f"``, ``".2f"``, ``""``); None: the JSON value instead of text, ``value``
            itself or None where it is None or not finite, dicts mapped through.
        unit: text after a formatted number (``"×"``), not after ``n/a``.
        nan: the text of NaN, and with ``finite`` of ±inf too; None formats them like any float (``nan``).
        finite: treat ±inf as NaN.

    A ``(mean, sd, se)`` triple (:func:`~arrol_pl.core.metrics.mean_sd_se`) reads ``mean ± sd (SE se)``.
    """
    if spec is None:
        if isinstance(value, dict):
            return {k: fmt(v, None) for k, v in value.items()}
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if isinstance(value, tuple):
        mean, sd, se = (fmt(v, spec, unit=unit, nan=nan, finite=finite) for v in value)
        return f"{mean} ± {sd} (SE {se})"
    if value is None:
        return "n/a"
    undefined = value != value or (finite and not math.isfinite(value))
    return nan if undefined and nan is not None else format(value, spec) + unit


def table_lines(titles: Sequence[str], rows: Iterable[Sequence[Any]] = ()) -> list[str]:
    """The lines of a Markdown table: ``| title | … |``, the ``|---|`` rule, then ``| cell | … |`` per row (a None
    cell left blank)."""

    def line(cells: Sequence[Any]) -> str:
        return "|" + "".join(" |" if cell is None else f" {cell} |" for cell in cells)

    return [line(titles), "|" + "---|" * len(titles), *(line(row) for row in rows)]
