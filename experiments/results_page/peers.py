"""Section 15 of the results page: the project's GRPO and ARRoL steps beside TRL's GRPOTrainer on the same work,
and GRPO's generation against vLLM as shipped (``experiments/bench_peers.py``, one ``peers.json`` per task)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import Claim, load_json

TASKS = (
    ("default", "The default task (tiny policy, `conf/config.yaml`)", []),
    (
        "long",
        "The long-answer task (`+exp=bench_phases`: its vLLM slots capped at a quarter of the batch, the "
        "KV-limited regime it models)",
        ["--preset", "bench_phases"],
    ),
    (
        "long_all_slots",
        "The long-answer task with every rollout in flight at once (`engine.max_num_seqs=128`, "
        "as TRL's transformers generation decodes the whole batch)",
        ["--preset", "bench_phases", "engine.max_num_seqs=128"],
    ),
)
"""(directory under ``peers/``, title, bench_peers.py arguments): ``experiments/reproduce.py``'s part ``peers``."""
GENERATION_GOAL = 1.05
"""GRPO's generation at most 5 % above vLLM's as shipped on the same requests."""
STEP_GOALS = {
    "default": {"GRPO": 1.0},
    "long": {"GRPO": 1.0, "ARRoL": 1.6},
    "long_all_slots": {"GRPO": 1.0, "ARRoL": 1.6},
}
"""Per task, TRL's best step ÷ the arm's (the arm named by its first word) the project asks for."""


def goal_lines(task: str, data: dict[str, Any]) -> list[str]:
    """The project's targets on one task, each with its figure and whether it was met."""
    lines = []
    bare = data.get("generation_vs_bare")
    if bare:
        met = bare["grpo_vs_bare"] <= GENERATION_GOAL
        lines.append(
            f"- GRPO's generation ÷ vLLM as shipped on the same requests and weights: "
            f"{bare['grpo_vs_bare']:.3f} ({bare['grpo_s']:.3f} s against {bare['bare_s']:.3f} s, medians "
            f"of {bare['pairs']} alternating pairs) — project target (≤ {GENERATION_GOAL:.2f}): "
            f"**{'met' if met else 'missed'}**."
        )
    best = data.get("best_trl")
    for arm, x in data.get("speedup_vs_best_trl", {}).items():
        goal = STEP_GOALS.get(task, {}).get(arm.split()[0])
        verdict = "" if goal is None else (f" — project target (≥ {goal:.1f}×): **{'met' if x >= goal else 'missed'}**")
        lines.append(f"- {arm}: {x:.2f}× {best}'s step{verdict}.")
    if best is None:
        lines.append("- No TRL arm ran, so the step goals are not judged.")
    return lines


def task_part(root: Path, task: str, title: str, extra: list[str]) -> list[str]:
    data = load_json(root / "peers" / task / "peers.json")
    if data is None:
        command = " ".join(["python experiments/bench_peers.py", *extra, "--out", f"<results>/peers/{task}"])
        return [f"### {title}", "", f"Not run: `{command}` (or `experiments/reproduce.py --only peers page`).", ""]
    s = data["setting"]
    slots = f", {s['max_num_seqs']} vLLM slots" if s.get("max_num_seqs") else ""
    lines = [
        f"### {title}",
        "",
        f"`{data['command']}`: B = {s['prompts_per_step']} × G = {s['group_size']}, responses up to "
        f"{s['max_response_tokens']} tokens, lr {s['lr']:g}{slots}; {s['rounds']} rounds of {s['steps']} "
        f"measured steps per arm after {s['warmup']} unmeasured, in alternating order. Versions: "
        + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
        + ".",
        "",
        "| arm | s / step (median) | range | generation s | generation share | tokens / s |",
        "|---|---|---|---|---|---|",
    ]
    for arm, t in data["arms"].items():
        tps = "n/a" if t.get("tokens_per_s") is None else f"{t['tokens_per_s']:.0f}"
        lines.append(
            f"| {arm} | {t['s_per_step']:.3f} | {t['min']:.3f}–{t['max']:.3f} | {t['generation_s']:.3f} | "
            f"{t['generation_share']:.2f} | {tps} |"
        )
    lines += ["", *goal_lines(task, data), *(f"- {n}." for n in data.get("notes", [])), ""]
    return lines


def section_peers(root: Path) -> tuple[list[str], list[Claim]]:
    lines = [
        "## 15. Speed against peers: the GRPO step beside TRL's GRPOTrainer (beyond the paper)",
        "",
        "`experiments/bench_peers.py` trains the same warm-started policy on the same prompts, group size, "
        "response length, learning rate and sampling with this project's GRPO (`pruning=none`) and ARRoL, and "
        "with TRL's `GRPOTrainer` (its transformers generation; its vLLM generation where the installed TRL "
        "supports the installed vLLM), in alternating rounds on one machine; speed-ups are TRL's best step ÷ "
        "the arm's (above 1: faster than TRL). It then times GRPO's generation call against vLLM as shipped "
        "(the same requests through the stock engine loop, nothing read from the hidden states) on the same "
        "weights. Figures are this machine's; compare ratios, not seconds.",
        "",
    ]
    for task, title, extra in TASKS:
        lines += task_part(root, task, title, extra)
    while lines[-1] == "":
        lines.pop()
    return lines, []
