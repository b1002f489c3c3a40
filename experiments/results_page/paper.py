"""The paper's own numbers that the results page sets beside ours (ARRoL, Tables 3–6)."""

from __future__ import annotations

PAPER_TABLE5 = {
    "GRPO": {"generation": 106.82, "log-prob": 18.40, "update": 63.05},
    "ARRoL": {"generation": 72.96, "log-prob": 10.02, "update": 30.26},
}
"""Paper Table 5: seconds per step, Qwen-3-1.7B-Base (κ = 0.5); end to end 1.61× (Table 6), 1.6–1.7× (§5.2)."""
PAPER_TABLE6 = {0.25: (32.46, 2.33), 0.5: (33.34, 1.61), 0.75: (32.68, 1.17), 1.0: (32.36, 1.00)}
"""Paper Table 6: κ → (average accuracy on Math500/Minerva/OlympiadBench, training speedup)."""
PAPER_TABLE4 = {
    "Qwen-3-4B-Base": {"Random": (0.32, 0.21), "ARRoL": (0.40, 0.23)},
    "LLama-3.2-1B-instruct": {"Random": (0.14, 0.11), "ARRoL": (0.23, 0.14)},
}
"""Paper Table 4: model → method → (E[ρ̂], E[ρ̂(1−ρ̂)])."""
PAPER_TABLE3 = {
    "Qwen-3-1.7B-Base": {"Majority": (55.0, 16.7, 3.3), "Deepconf": (57.5, 16.7, 6.7), "ARRoL": (60.0, 23.3, 13.3)},
    "Qwen-3-4B-Base": {"Majority": (72.5, 26.7, 20.0), "Deepconf": (72.5, 33.3, 23.3), "ARRoL": (82.5, 36.7, 26.7)},
}
"""Paper Table 3 (excerpt): model → vote → (AMC'23, AIME'24, AIME'25)."""
PAPER_FIG4_GAIN = (2.30, 2.99)
"""ARRoL's gain in average accuracy over GRPO's, in points: the smallest and the largest the paper reports, the range
the page's Fig. 4 rows set beside ours (and the size of effect a null of the page is weighed against)."""
