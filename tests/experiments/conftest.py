"""The experiments' scripts import their neighbours (``from bench_phases import ...``) and the results page
(``results_page``) from ``experiments/``, which is the first entry of ``sys.path`` when a script runs; the tests
here import them the same way."""

import sys
from pathlib import Path

EXPERIMENTS = str(Path(__file__).resolve().parents[2] / "experiments")
if EXPERIMENTS not in sys.path:
    sys.path.insert(0, EXPERIMENTS)
