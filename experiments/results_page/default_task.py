"""The results page's sections on the default task (the tiny policy): 1 phases (Table 5), 2 balance (Table 4),
3 head quality (Fig. 2), 4 κ (Table 6), 5 votes (Table 3), 6 wall clock (Fig. 4) and 9 the experiment over seeds.

Each ``section_*`` returns the section's lines and the claims (:class:`~.common.Claim`) it adds to the page's
summary.

Decisions (section 9):
- **A seed learned when its held-out gain lies beyond its 95 % t interval** on the evaluation's problems − 1
  degrees of freedom (:func:`~arrol_pl.analysis.significance.gain_estimate`).
- **Time to GRPO's final accuracy is a share of the time GRPO itself first reached it**
  (:func:`~arrol_pl.core.metrics.reach_share`), never of GRPO's whole run.
- **A seed whose gate never opened ran as GRPO** (``pruning_active_fraction`` 0: no rollout pruned): it is shown,
  but no speed of ARRoL's is claimed from it; with no seed pruned the section makes no speed claim at all. The gain
  per second over the seeds that pruned is judged against 1× on its 95 % t interval over those seeds.
"""

from __future__ import annotations

import math
import shutil
import statistics
from fractions import Fraction
from pathlib import Path

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.history import read_history
from arrol_pl.analysis.runs import comparable, heldout_curve, pairs_by_seed, pick, sweep_runs
from arrol_pl.analysis.significance import INTERVAL, Estimate
from arrol_pl.analysis.sweep import seed_table
from arrol_pl.core.metrics import mean_sd_se, reach_share, time_to_reach
from arrol_pl.train.records.summary import RunSummary

from .common import Claim, load_json, parity, verdict
from .paper import PAPER_TABLE3, PAPER_TABLE4, PAPER_TABLE5, PAPER_TABLE6


def section_phases(root: Path) -> tuple[list[str], list[Claim]]:
    data = load_json(root / "phases" / "phases.json")
    lines = ["## 1. Phase decomposition (paper Table 5)", ""]
    if data is None:
        return lines + ["Not run (`phases/phases.json` missing)."], []
    s = data["setting"]
    g, a = PAPER_TABLE5["GRPO"], PAPER_TABLE5["ARRoL"]
    lines += [
        f"Command: `{data['command']}`. Every arm is a real training run from the same starting weights, prompts "
        f"and seeds on one shared engine; {data['warmup']} warm-up (cold-start) steps, then {data['steps']} "
        f"measured steps, in {data.get('rounds', 1)} round(s) of alternating arm order; medians over all "
        f"measured steps. Setting: B = {s['prompts_per_step']} prompts × G = {s['group_size']}, responses up "
        f"to {s['max_response_tokens']} tokens, L_detect = {s['detect_length']} "
        f"({Fraction(s['detect_length'], s['max_response_tokens'])} of them; the paper: 512 of 8192 = 1/16), at most "
        f"{s['max_num_seqs']} rollouts decoded at once (fewer than B × G: KV-limited concurrency, as with long "
        "responses on a GPU).",
        "",
        "Ours, seconds per step (median), speedup vs GRPO in brackets:",
        "",
        data["table"],
        "",
        "Paper (Qwen-3-1.7B-Base, κ = 0.5), seconds per step:",
        "",
        *table_lines(
            ["arm", "generation", "log-prob", "update", "end to end"],
            [["GRPO", *g.values(), "1.00×"], ["ARRoL", *(f"{a[k]} ({g[k] / a[k]:.2f}×)" for k in g), "1.61–1.70×"]],
        ),
        "",
    ]
    claims = []
    for kappa, v in data["verdicts"].items():
        arm = data["arms"][kappa]
        r = arm["ratios"]
        gap = v["generation_gap"]
        logprob = f"log-prob {r['log-prob']:.2f}× and " if math.isfinite(r["log-prob"]) else ""
        rounds = v.get("end_to_end_per_round") or []
        spread = f" (per round: {', '.join(f'{x:.2f}×' for x in rounds)})" if len(rounds) > 1 else ""
        lines.append(
            f"- {v['text'][:-1]}{spread}. Generation {r['generation']:.2f}× on {r['generated_tokens']:.2f}× fewer "
            f"generated tokens ({gap:+.1%}); {logprob}update {r['update']:.2f}× "
            f"on {r['trained_tokens']:.2f}× fewer trained tokens; realised keep ratio "
            f"{arm['medians']['keep_ratio']:.2f}."
        )
        paper = PAPER_TABLE6.get(float(kappa), (None, None))[1]
        here = f"{v['end_to_end']:.2f}×" + (
            f" (generation {r['generation']:.2f}×)" if kappa == "0.5" else f" at κ = {kappa} (long answers)"
        )
        claims.append(
            Claim(
                "speed" if kappa == "0.5" else "kappa",
                f"Table 5, κ = {kappa}: end to end {v['end_to_end']:.2f}× against the paper's "
                + ("1.61–1.70×" if kappa == "0.5" else f"{fmt(paper, '.2f')}×")
                + f"; generation ratio {gap:+.1%} from the token ratio",
                paper=verdict(v["end_to_end"] >= paper) if paper else None,
                targets=(
                    (f"{v['goal']:.2f}× end to end", bool(v["met"])),
                    ("generation within 10 % of its token ratio", abs(gap) <= 0.10),
                ),
                here=here,
            )
        )
    half = data["arms"].get("0.5")
    if half is not None:
        r = half["ratios"]
        trained = [x for x in (r["log-prob"], r["update"]) if math.isfinite(x)]
        least = r["generation"] < min(trained) if trained else False
        lines += [
            "",
            "Paper's reading: generation gains least (every rollout runs to L_detect), log-prob and update "
            f"about 2× (half the rollouts are trained). Here at κ = 0.5: generation {r['generation']:.2f}×, "
            + ", ".join(f"{k} {r[k]:.2f}×" for k in ("log-prob", "update") if math.isfinite(r[k]))
            + f", so generation {'does' if least else 'does not'} gain least.",
        ]
    return lines, claims


def section_balance(root: Path, kappa_runs: list[RunSummary]) -> tuple[list[str], list[Claim]]:
    balance_runs = sweep_runs(root / "balance")
    lines = ["## 2. Balance against random pruning (paper Table 4)", ""]
    rows = [
        ("GRPO, no pruning (κ = 1)", pick(kappa_runs, keep_ratio=1.0)),
        ("random pruning (κ = 0.5)", pick(balance_runs, policy="random")),
        ("ARRoL, anchored (default rule)", pick(kappa_runs, keep_ratio=0.5, policy="arrol", balance_target="anchored")),
        ("ARRoL, Eq. 2 as written (global δ)", pick(balance_runs, policy="arrol", balance_target="global")),
    ]
    if rows[1][1] is None or (rows[2][1] is None and rows[3][1] is None):
        return lines + ["Not run (`balance/` or the κ = 0.5 job of `kappa/` missing)."], []
    lines += [
        "Commands: `python experiments/run.py +exp=ablation_kappa` (κ = 1 and the default rule's row) and "
        "`python experiments/run.py +exp=random_pruning pruning=arrol_eq2,random`. Means over the steps "
        "after the cold start, over the trained (surviving) rollouts of each group; ρ = 0.5.",
        "",
        *table_lines(
            ["run", "E[ρ̂]", "E[ρ̂(1−ρ̂)]", "zero-advantage groups", "keep ratio", "held-out avg@4 after"],
            [
                [name, "not run", None, None, None, None]
                if s is None
                else [
                    name,
                    fmt(s.positive_ratio_mean),
                    fmt(s.rho_1_minus_rho_mean),
                    fmt(s.zero_advantage_fraction),
                    fmt(s.keep_ratio_mean, ".2f"),
                    fmt(s.heldout_accuracy_after),
                ]
                for name, s in rows
            ],
        ),
        "",
        "Paper:",
        "",
        *table_lines(
            ["model", "method", "E[ρ̂]", "E[ρ̂(1−ρ̂)]"],
            [
                [model, method, f"{rho:.2f}", f"{bal:.2f}"]
                for model, methods in PAPER_TABLE4.items()
                for method, (rho, bal) in methods.items()
            ],
        ),
        "",
    ]
    claims = []
    random = rows[1][1]
    for name, s in rows[2:]:
        if s is None:
            continue
        if None in (s.positive_ratio_mean, random.positive_ratio_mean):
            continue  # a run that never left its cold start has no balance after it
        closer = abs(s.positive_ratio_mean - 0.5) < abs(random.positive_ratio_mean - 0.5)
        more_signal = s.rho_1_minus_rho_mean > random.rho_1_minus_rho_mean
        fewer_flat = s.zero_advantage_fraction < random.zero_advantage_fraction
        ok = closer and more_signal and fewer_flat
        claims.append(
            Claim(
                "balance_tiny",
                f"Table 4, {name}: E[ρ̂] {s.positive_ratio_mean:.3f} vs random {random.positive_ratio_mean:.3f} "
                f"(closer to ρ: {'yes' if closer else 'no'}), E[ρ̂(1−ρ̂)] {s.rho_1_minus_rho_mean:.3f} vs "
                f"{random.rho_1_minus_rho_mean:.3f}, zero-advantage groups {s.zero_advantage_fraction:.3f} vs "
                f"{random.zero_advantage_fraction:.3f}",
                paper=verdict(ok),
                here=(
                    f"E[ρ̂(1−ρ̂)] {s.rho_1_minus_rho_mean:.3f} vs {random.rho_1_minus_rho_mean:.3f}"
                    if name.startswith("ARRoL, global")
                    else ""
                ),
            )
        )
    lines += [f"- {c.line()}" for c in claims]
    return lines, claims


def section_head(
    root: Path, kappa_runs: list[RunSummary], figures: Path, page_dir: Path
) -> tuple[list[str], list[Claim]]:
    lines = ["## 3. Quality head against DeepConf trace confidence (paper Fig. 2 b–d)", ""]
    online = pick(kappa_runs, keep_ratio=0.5, policy="arrol")
    claims = []
    if online is not None:
        acc = online.head_accuracy_after_cold_start
        lines += [
            "Online, during the κ = 0.5 training run (the head the engine prunes with, scored on each step's "
            f"survivors at L_detect = {online.config['engine']['detect_length']}; its AUC over every rollout before "
            f"pruning, estimated from them): accuracy {fmt(acc)}, AUC "
            f"{fmt(online.head_auc_after_cold_start)}, Spearman {fmt(online.head_spearman_after_cold_start)}, "
            f"calibration error of the binned posterior {fmt(online.head_calibration_error_after_cold_start)} "
            "(means over the steps after the cold start). Paper: about 80 % accuracy (82.37 % on Qwen-3-1.7B).",
            "",
        ]
        if acc is not None:
            start = online.config["pruning"]["cold_start_steps"]
            rates = [h["reward/accuracy"] for h in read_history(Path(online.run_dir))[start:]]
            majority = sum(max(a, 1 - a) for a in rates) / max(len(rates), 1)
            ok = acc >= 0.75 and acc > majority + 0.02
            lines.append(
                f"Always predicting each step's majority outcome would score {majority:.3f}: the "
                "accuracy only counts when it is above that."
            )
            lines.append("")
            claims.append(
                Claim(
                    "head_tiny",
                    f"Head accuracy after cold start {acc:.3f} against the paper's ~0.80, with the majority-"
                    f"outcome rate at {majority:.3f}",
                    paper=verdict(ok),
                    detail=f" (criterion: ≥ 0.75 and 2 points above the majority rate; AUC "
                    f"{fmt(online.head_auc_after_cold_start)})",
                    here=f"accuracy {acc:.3f} (majority {majority:.3f})",
                )
            )
    data = load_json(root / "head" / "head_quality.json")
    if data is None:
        return lines + ["Offline probe not run (`head/head_quality.json` missing)."], claims
    rows, st = data["rows"], data["settings"]
    lines += [
        f"Offline probe: `{data.get('command', 'python experiments/head_quality.py')}`. One set of "
        f"{data['rollouts']} rollouts ({st['problems']} held-out problems × {st['samples']}, T = 1, accuracy "
        f"{data['accuracy']:.3f}, mean length {data['mean_response_length']:.1f} of {st['max_tokens']} tokens) "
        "of the trained κ = 0.5 policy. Per detection length a fresh head is trained on part of the problems, "
        "calibrated on another part and scored on the rest (split by problem), against DeepConf trace "
        "confidence of the same prefixes. A rollout counts at L only if it is still running there, as in the "
        f"engine. Probe features equal the engine's to {parity(data)}.",
        "",
        *table_lines(
            [
                "L_detect",
                "share of max length",
                "test rollouts",
                "positive rate",
                "head Spearman",
                "DeepConf Spearman",
                "head AUC",
                "DeepConf AUC",
                "head accuracy",
                "majority class",
                "head ECE",
            ],
            [
                [
                    r["detect_length"],
                    share_of(r),
                    r["n_test"],
                    *(
                        fmt(r[k])
                        for k in (
                            "positive_rate",
                            "head_spearman",
                            "deepconf_spearman",
                            "head_auc",
                            "deepconf_auc",
                            "head_accuracy",
                            "majority_accuracy",
                            "head_ece",
                        )
                    ),
                ]
                for r in rows
            ],
        ),
    ]
    online_probe = data.get("online_head")
    if online_probe:
        lines += [
            "",
            f"The head trained online in that run, on all {online_probe['n']} rollouts still running at its "
            f"L_detect = {online_probe['detect_length']}: Spearman {fmt(online_probe['spearman'])}, AUC "
            f"{fmt(online_probe['auc'])}, accuracy {fmt(online_probe['accuracy'])}, ECE {fmt(online_probe['ece'])}.",
        ]
    png = root / "head" / "head_quality.png"
    if png.exists():
        target = figures / "head_quality.png"
        shutil.copyfile(png, target)
        lines += ["", f"![score distributions and Spearman vs L_detect]({target.relative_to(page_dir)})"]
    wins = [r for r in rows if comparable(r["head_spearman"]) > comparable(r["deepconf_spearman"])]
    claims.append(
        Claim(
            "head_tiny",
            f"Fig. 2(c–d): the head's Spearman exceeds DeepConf's at {len(wins)} of {len(rows)} detection lengths",
            paper=verdict(len(wins) == len(rows)),
            here=f"Spearman above DeepConf's at {len(wins)} of {len(rows)} lengths",
        )
    )
    lines += [
        "",
        "Paper: the head's Spearman is higher than trace confidence on both datasets and plateaus by "
        "L_detect = 512 of 8k; its score distributions separate correct from incorrect rollouts.",
    ]
    return lines, claims


def share_of(row: dict) -> str:
    """A probe row's detection length as a share of the maximum length (``1/16``; empty where not recorded)."""
    return str(Fraction(row["fraction"]).limit_denominator(64)) if row.get("fraction") is not None else ""


def section_kappa(runs: list[RunSummary]) -> tuple[list[str], list[Claim]]:
    lines = ["## 4. κ ablation (paper Table 6)", ""]
    base = pick(runs, keep_ratio=1.0)
    if not runs or base is None:
        return lines + ["Not run (`kappa/` missing)."], []
    speedups, rows = {}, []
    for s in sorted(runs, key=lambda s: s.config["pruning"]["keep_ratio"]):
        k = s.config["pruning"]["keep_ratio"]
        speedups[k] = (
            base.seconds_per_step / s.seconds_per_step  # None: a run that never left its cold start
            if base.seconds_per_step and s.seconds_per_step
            else float("nan")
        )
        pa, ps = PAPER_TABLE6.get(k, (None, None))
        rows.append(
            [
                f"{k:g}",
                f"{fmt(s.heldout_accuracy_before)} → {fmt(s.heldout_accuracy_after)}",
                fmt(s.heldout_greedy_accuracy_after),
                fmt(s.keep_ratio_mean, ".2f"),
                fmt(s.seconds_per_step),
                f"{speedups[k]:.2f}×",
                fmt(pa, ".2f"),
                f"{fmt(ps, '.2f')}×",
            ]
        )
    lines += [
        "Command: `python experiments/run.py +exp=ablation_kappa` (the default task: ARRoL-GRPO, tiny policy, "
        f"{base.steps} steps). Speedup = seconds per training step after the cold start, κ = 1 over κ; "
        "held-out accuracy is avg@4 at T = 1 on 128 held-out problems.",
        "",
        *table_lines(
            [
                "κ",
                "held-out avg@4 before → after",
                "greedy after",
                "keep ratio",
                "s/step",
                "speedup",
                "paper avg acc",
                "paper speedup",
            ],
            rows,
        ),
    ]
    monotone = all(speedups[a] >= speedups[b] for a, b in zip(sorted(speedups), sorted(speedups)[1:]))
    history = read_history(Path(base.run_dir))
    algo = base.config["algo"]
    mean_len = (
        sum(h["tokens/generated"] for h in history) / len(history) / (algo["prompts_per_step"] * algo["group_size"])
    )
    low = min(speedups)
    claims = [
        Claim(
            "kappa",
            "Table 6: speedup grows as κ falls "
            f"({', '.join(f'κ={k:g} {v:.2f}×' for k, v in sorted(speedups.items()))})",
            paper=verdict(monotone),
            here=f"{speedups[low]:.2f}× at κ = {low:g} (default task)",
            detail=f". This task's responses average {mean_len:.0f} tokens against L_detect = "
            f"{base.config['engine']['detect_length']}"
            + (
                f", and all {algo['prompts_per_step'] * algo['group_size']} rollouts decode at once, so pruning "
                "removes few decode steps"
                if base.config["engine"].get("max_num_seqs", 256) >= algo["prompts_per_step"] * algo["group_size"]
                else ""
            )
            + "; section 1 is the long-response setting",
        )
    ]
    lines += ["", f"- {claims[0].line()}"]
    return lines, claims


def section_voting(root: Path) -> tuple[list[str], list[Claim]]:
    data = load_json(root / "voting" / "metrics.json")
    lines = ["## 5. Test-time voting (paper Table 3)", ""]
    if data is None:
        return lines + ["Not run (`voting/metrics.json` missing)."], []
    rows, claims = [], []
    for name, m in data["metrics"].items():
        rows.append(
            [
                name,
                m["problems"],
                *(f"{100 * m[key]:.1f}" for key in ("avg@k", "pass@k", "maj@k", "deepconf@k", "arrol@k")),
            ]
        )
        ok = m["arrol@k"] > max(m["maj@k"], m["deepconf@k"])
        n = m["problems"]
        se = math.sqrt(max(m["maj@k"] * (1 - m["maj@k"]), 1e-9) / n)
        claims.append(
            Claim(
                "votes_tiny",
                f"Table 3 ({name}, k = {m['k']}): ARRoL vote {100 * m['arrol@k']:.1f} vs majority "
                f"{100 * m['maj@k']:.1f} and DeepConf {100 * m['deepconf@k']:.1f}",
                paper=verdict(ok),
                detail=f" (criterion: ARRoL above both; one standard error of a vote accuracy here is about "
                f"{100 * se:.1f} points)",
                here=f"{100 * m['arrol@k']:.1f} vs {100 * m['maj@k']:.1f} / {100 * m['deepconf@k']:.1f}",
            )
        )
    lines += [
        f"Command: `python experiments/evaluate.py checkpoint=<κ = 0.5 run>/export k={data['k']}` "
        f"(T = {data['temperature']}). Percent of problems answered correctly:",
        "",
        *table_lines(["dataset", "problems", "avg@k", "pass@k", "majority", "DeepConf", "ARRoL"], rows),
        "",
        "Paper (excerpt):",
        "",
        *table_lines(
            ["model", "vote", "AMC'23", "AIME'24", "AIME'25"],
            [[model, vote, *vals] for model, votes in PAPER_TABLE3.items() for vote, vals in votes.items()],
        ),
    ]
    lines += [""] + [f"- {c.line()}" for c in claims]
    return lines, claims


def section_wallclock(
    root: Path, runs: list[RunSummary], figures: Path, page_dir: Path
) -> tuple[list[str], list[Claim]]:
    lines = ["## 6. Wall-clock convergence (paper Fig. 4)", ""]
    grpo, arrol = pick(runs, keep_ratio=1.0), pick(runs, keep_ratio=0.5, policy="arrol")
    png = root / "wallclock.png"
    if grpo is None or arrol is None or not png.exists():
        return lines + ["Not run (`wallclock.png` or the κ = 1 / κ = 0.5 runs missing)."], []
    target = figures / "wallclock.png"
    shutil.copyfile(png, target)
    cg, ca = heldout_curve(grpo), heldout_curve(arrol)
    if len(cg) < 2 or len(ca) < 2:
        return lines + ["Not measured: the runs have no held-out curve (`trainer.eval_every` was 0)."], []
    level = cg[-1][1]
    tg, ta = time_to_reach(cg, level), time_to_reach(ca, level)
    lines += [
        "Command: `python experiments/plot_wallclock.py <κ = 1 run> <κ = 0.5 run> --tag heldout/accuracy "
        "--smooth 0` on the runs of section 4 (`trainer.eval_every=50`): held-out avg@4 against training "
        "seconds, evaluations excluded. Training reward is not used: ARRoL's is measured on survivors, which "
        "the balance target steers toward ρ = 0.5.",
        "",
        f"![held-out accuracy vs training wall-clock seconds]({target.relative_to(page_dir)})",
        "",
        f"Training wall time for {grpo.steps} steps: GRPO {cg[-1][0]:.0f} s, ARRoL {ca[-1][0]:.0f} s; final "
        f"held-out avg@4: GRPO {cg[-1][1]:.3f}, ARRoL {ca[-1][1]:.3f}. First time at or above GRPO's final "
        f"accuracy ({level:.3f}): GRPO {fmt(tg, '.0f')} s, ARRoL {'never' if ta is None else f'{ta:.0f} s'}.",
    ]
    ok = ta is not None and tg is not None and ta < tg
    reach = "never reaches it" if ta is None else f"reaches it at {ta:.0f} s"
    claims = [
        Claim(
            "time_tiny",
            f"Fig. 4: ARRoL reaches GRPO's final held-out accuracy ({level:.3f}) in less "
            f"training time: GRPO at {fmt(tg, '.0f')} s, ARRoL {reach}",
            paper=verdict(ok),
            here=f"GRPO's final accuracy: ARRoL {reach} (GRPO {fmt(tg, '.0f')} s)",
        )
    ]
    return lines, claims


SEEDS_BASELINE = "pruning=none"
"""The arm of ``+exp=seeds`` the others are paired with (GRPO)."""


def section_seeds(root: Path, figures: Path, page_dir: Path) -> tuple[list[str], list[Claim]]:
    """The default experiment over seeds (``+exp=seeds``): learning on every seed, and the default against GRPO
    paired by seed, per step and per second of training."""
    lines = ["## 9. The default experiment over seeds (tiny policy)", ""]
    runs = [r for r in sweep_runs(root / "seeds") if r.heldout_accuracy_after is not None]
    text, records = seed_table(runs, SEEDS_BASELINE) if runs else ("", [])
    if not records:
        return lines + [
            "Not run (`seeds/` holds no arm with several seeds): `python experiments/reproduce.py "
            "--only seeds page` (`make run` per arm and seed, about 5 min each on 2 cores)."
        ], []
    r0 = runs[0]
    lines += [
        f"`experiments/run.py +exp=seeds`: {r0.config['trainer']['max_steps']} steps per run, each evaluated on "
        f"{r0.heldout_problems} held-out problems × {r0.heldout_samples} samples on its own random stream; "
        "every seed starts all arms from the same warm start. The s / step column is as each run measured it, "
        "whatever else shared the machine (compare speeds in section 1).",
        "",
        text.rstrip("\n"),
    ]
    claims = []
    for rec in records:
        gains = rec["gain_per_seed"]
        rose = sum(g > 0 for g in gains)
        clear = sum(Estimate(*g).ahead for g in zip(gains, rec["gain_se_per_seed"], rec["gain_df_per_seed"]))
        grpo = SEEDS_BASELINE in rec["arm"].split()  # the baseline: context, the target is the pruned arms'
        claims.append(
            Claim(
                "seeds",
                f"Seeds, `{rec['arm']}`: held-out accuracy rose on {rose} of {len(gains)} seeds, beyond "
                f"{INTERVAL} of the before/after difference on {clear} (mean gain {rec['gain'][0]:+.3f} ± "
                f"{rec['gain'][1]:.3f})",
                targets=() if grpo else (("learning on every seed", clear == len(gains)),),
                here=f"`{rec['arm']}` learned on {clear} of {len(gains)}" + (" (GRPO)" if grpo else ""),
            )
        )
    # GRPO, and the arm `make run` trains (conf/config.yaml's pruning preset, arrol_gated: the gated arm, whatever
    # its threshold and metric, since the sweep's other ARRoL arm is the paper's rule, ungated)
    gated_or_grpo = [
        r for r in runs if r.config["pruning"].get("gate_auc") is not None or r.config["pruning"]["policy"] == "none"
    ]
    pairs = pairs_by_seed(
        gated_or_grpo,
        {"policy": "none", "screen": {"stages": "none"}},
        {"policy": "arrol", "screen": {"stages": "none"}},
    )
    if pairs:
        more_lines, more_claims = _default_against_grpo(root / "seeds", pairs, figures, page_dir)
        lines += more_lines
        claims += more_claims
    return lines, claims


def _default_against_grpo(
    sweep: Path, pairs: list[tuple[int, RunSummary, RunSummary]], figures: Path, page_dir: Path
) -> tuple[list[str], list[Claim]]:
    """Per seed: the held-out gain per training second of the default against GRPO's, and when the default first
    reaches GRPO's final held-out accuracy as a share of the time GRPO took to reach it; the sweep's wall-clock
    figure; the speed claim from the seeds whose gate opened (module docstring)."""
    rows, seeds = [], []
    for seed, grpo, ours in pairs:
        cg, co = heldout_curve(grpo), heldout_curve(ours)
        if len(cg) < 2 or len(co) < 2:
            continue
        gain_rate = [(c[-1][1] - c[0][1]) / c[-1][0] for c in (cg, co)]
        ratio = gain_rate[1] / gain_rate[0] if gain_rate[0] > 0 else math.nan
        share, t = reach_share(co, cg), time_to_reach(co, cg[-1][1])
        ran_as_grpo = ours.pruning_active_fraction == 0
        seeds.append((ratio, share, ran_as_grpo))
        rows.append(
            [
                seed,
                f"{cg[-1][0]:.0f} / {co[-1][0]:.0f}",
                f"{cg[-1][1] - cg[0][1]:+.3f} / {co[-1][1] - co[0][1]:+.3f}",
                fmt(ratio, ".2f", unit="×"),
                "never" if t is None else f"{t:.0f} s ({fmt(share, '.2f')})",
                f"{fmt(ours.head_auc_after_cold_start)} / {fmt(ours.head_within_auc_after_cold_start)}",
                fmt(ours.pruning_active_fraction, ".2f") + (" (ran as GRPO)" if ran_as_grpo else ""),
            ]
        )
    if not rows:
        return ["", "No wall-clock comparison: the runs have no held-out curve (`trainer.eval_every` was 0)."], []
    lines = [
        "",
        "The default (ARRoL with the discrimination gate) against GRPO, seed by seed, on the held-out curve "
        "(`trainer.eval_every`; training seconds, evaluations excluded), with the default's head after the cold "
        "start (its AUC over each step's rollouts before pruning, estimated from the survivors, pooled and within "
        "groups: the gate reads the latter over its window) "
        "and the share of steps its gate let prune (0: it never opened, and the default ran as GRPO). The share "
        "of GRPO's time is the seconds at which the default first reaches GRPO's final accuracy over those at "
        "which GRPO itself first did:",
        "",
        *table_lines(
            [
                "seed",
                "training s (GRPO / default)",
                "held-out gain (GRPO / default)",
                "gain per second, default ÷ GRPO",
                "default reaches GRPO's final accuracy at (share of GRPO's time to it)",
                "head AUC (pooled / within groups)",
                "gate open",
            ],
            rows,
        ),
    ]
    png = sweep / "wallclock.png"
    if png.exists():
        target = figures / "seeds_wallclock.png"
        shutil.copyfile(png, target)
        lines += [
            "",
            f"![held-out accuracy vs training seconds, each arm's seeds as a band]({target.relative_to(page_dir)})",
        ]
    return lines, [speed_claim(seeds)]


FASTER = "faster than GRPO per unit of learning on every seed"
"""The project's target for the default in section 9."""


def speed_claim(seeds: list[tuple[float, float | None, bool]]) -> Claim:
    """Section 9's claim on the default's speed from its seeds' ``(gain per second ÷ GRPO's, share of GRPO's time
    to its final accuracy (:func:`~arrol_pl.core.metrics.reach_share`: None never), ran as GRPO)``: made only from
    the seeds whose gate opened (module docstring)."""
    shut = sum(as_grpo for _, _, as_grpo in seeds)
    pruned = [(ratio, share) for ratio, share, as_grpo in seeds if not as_grpo]
    if not pruned:
        return Claim(
            "time_tiny",
            f"Seeds, the default against GRPO: its gate never opened on any of {len(seeds)} "
            "seeds, so it pruned no rollout and ran as GRPO; no speed of ARRoL's is measured here",
            targets=((FASTER, False),),
            detail=": the default pruned nothing",
            here=f"default ran as GRPO (gate shut on {shut} of {len(seeds)} seeds): no speed claim",
        )
    finite = [r for r, _ in pruned if math.isfinite(r)]
    faster = sum(r > 1 for r in finite)
    reached = [x for _, x in pruned if x is not None]
    timed = [x for x in reached if math.isfinite(x)]  # NaN: GRPO ended no higher than it began
    mean, _, se = mean_sd_se(finite)
    speed = Estimate(mean - 1, se, len(finite) - 1) if len(finite) > 1 else None
    judged = (
        ""
        if speed is None
        else (
            f" ({'faster' if speed.ahead else 'slower'} beyond {INTERVAL} over the seeds: {speed.bounds('.2f')})"
            if speed.ahead or speed.behind
            else f" (not distinguishable from 1×: {speed.interval('.2f')}; the seeds {speed.undetected('.2f')})"
        )
    )
    as_grpo = f"; on {shut} of {len(seeds)} seeds its gate never opened and it ran as GRPO, left out" if shut else ""
    return Claim(
        "time_tiny",
        f"Seeds, the default against GRPO where its gate opened: held-out gain per training second "
        f"{fmt(mean_sd_se(finite), '.2f')}× GRPO's{judged}, higher on {faster} of {len(pruned)} seeds; GRPO's final "
        f"accuracy reached on {len(reached)} of {len(pruned)} seeds (median at "
        f"{fmt(statistics.median(timed) if timed else None, '.2f')} of the time GRPO took to reach it){as_grpo}",
        targets=((FASTER, not shut and faster == len(pruned) and len(pruned) > 1),),
        here=f"default: gain per second {fmt(mean if finite else None, '.2f')}× GRPO's over {len(pruned)} seeds"
        + (f" (gate shut on {shut} more)" if shut else ""),
    )
