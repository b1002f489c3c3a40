"""The results page's sections on SmolLM2-135M trained online: 8 ARRoL vs GRPO at equal training time (Fig. 4),
10 the spread rule vs random pruning (Table 4 online) and 11 section 8 in the balancing configuration.

Decisions:
- **Arms are paired by seed** (:func:`~arrol_pl.analysis.runs.pairs_by_seed`); the per-seed differences are
  averaged with their standard errors combined (:func:`~arrol_pl.core.metrics.mean_of_estimates`).
- **Every comparison over seeds is judged on the larger of two uncertainties**: the evaluations' noise (section
  10: the steps') and, over several seeds, the spread of the per-seed differences (which also holds the training
  paths' noise; :class:`~arrol_pl.analysis.significance.SeedMean`), against its 95 % t interval on seeds − 1
  degrees of freedom; inside it a difference is "not distinguishable", with the effect it could have detected at
  80 % power (:mod:`arrol_pl.analysis.significance`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from arrol_pl.analysis.formatting import fmt, table_lines
from arrol_pl.analysis.results.common import Claim, verdict
from arrol_pl.analysis.results.common import NOT_DISTINGUISHABLE
from arrol_pl.analysis.runs import (comparable, paired_difference, pairs_by_seed, per_step_after_cold_start,
                                    sweep_runs)
from arrol_pl.analysis.significance import INTERVAL, Estimate, SeedMean, seed_mean
from arrol_pl.train.summary import RunSummary


ONLINE_HEAD_TARGET = "online head: accuracy ≥ majority + 5 points, AUC ≥ 0.75"


def online_head_claim(run: RunSummary, title: str) -> Claim:
    """The project's target for a run's online head after the cold start: accuracy ≥ majority class + 5 points,
    AUC ≥ 0.75."""
    acc, floor, auc = run.head_accuracy_after_cold_start, run.head_majority_after_cold_start, run.head_auc_after_cold_start
    ok = comparable(acc) >= comparable(floor) + 0.05 and comparable(auc) >= 0.75
    return Claim("head_smollm2", f"{title}: accuracy {fmt(acc)} vs majority class {fmt(floor)}, AUC {fmt(auc)} after "
                 "the cold start", targets=((ONLINE_HEAD_TARGET, ok),))


def section_online(root: Path) -> tuple[list[str], list[Claim]]:
    """Online ARRoL vs GRPO with SmolLM2-135M at equal training wall time (``+exp=smollm2_online``; Fig. 4, Table 1),
    the two arms paired by ``trainer.seed``."""
    return equal_time_section(
        root / "online", "## 8. Online ARRoL vs GRPO on SmolLM2-135M at equal training time (paper Fig. 4, Table 1)",
        preset="smollm2_online", arm={"policy": "arrol"}, arm_override="pruning=arrol", arm_title="ARRoL κ = 0.5",
        label="Fig. 4 on SmolLM2-135M", run_hint="--only online page` (3 seeds, about 90 min on 2 cores)",
        short="paper's rule",
        setting="from the same pretrained weights, in bf16, top 2 decoder blocks trained")


def section_online_spread(root: Path) -> tuple[list[str], list[Claim]]:
    """Section 8 in the configuration where section 10's balance reproduces (``+exp=smollm2_online_spread``)."""
    return equal_time_section(
        root / "online_spread", "## 11. Online ARRoL vs GRPO on SmolLM2-135M at equal training time, in the "
        "balancing configuration (paper Fig. 4)", preset="smollm2_online_spread",
        arm={"policy": "arrol", "balance_target": "spread"}, arm_override="pruning=arrol_spread",
        arm_title="ARRoL spread, κ = 0.5", short="spread rule",
        label="Fig. 4 on SmolLM2-135M with the spread rule", run_hint="--only online_spread page` (3 seeds, about 80 "
        "min on 2 cores)", setting="as section 8, but with section 10's pruning: the spread rule, the `stats` head "
        "input and a later detection length")


def equal_time_section(part: Path, heading: str, *, preset: str, arm: dict[str, Any], arm_override: str,
                       arm_title: str, label: str, run_hint: str, setting: str, name: str = "ARRoL",
                       baseline: dict[str, Any] | None = None, whole: bool = False,
                       baseline_override: str = "pruning=none", row: str = "time_smollm2",
                       judged: str = "paper", target: str = "", short: str = "") -> tuple[list[str], list[Claim]]:
    """GRPO (``pruning=none``, or ``baseline``) against one arm at equal training wall time, paired by
    ``trainer.seed``: the table, the arm − GRPO held-out after per seed and over the seeds, the online-head claims and
    the Fig. 4 verdict. ``name`` is what the text calls the arm; with ``whole`` the arms are whole-config specs
    (:func:`~arrol_pl.analysis.runs.pick_config`), else pruning values.

    The comparison counts toward the headline ``row``, ``judged`` as the paper's Fig. 4 claim (``paper``), as the
    project's own ``target`` (``target``: met when ahead of GRPO beyond its 95 % t interval), or not at all
    (``context``: a baseline against GRPO); ``short`` names the comparison in the headline table."""
    lines = [heading, ""]
    pairs = pairs_by_seed(sweep_runs(part), baseline or {"policy": "none"}, arm, whole)
    if not pairs:
        return lines + [f"Not run (`{part.name}/` needs a `{baseline_override}` and a `{arm_override}` job of one "
                        f"`trainer.seed`): `python experiments/reproduce.py {run_hint}."], []
    arrol = pairs[0][2]
    budget = arrol.config["trainer"].get("max_minutes")
    rows = []
    for seed, grpo, arm_run in pairs:
        for title, s in (("GRPO", grpo), (arm_title, arm_run)):
            gain = comparable(s.heldout_accuracy_after) - comparable(s.heldout_accuracy_before)
            rows.append([seed, title, s.steps, fmt(s.seconds_per_step, ".1f"),
                         f"{fmt(s.heldout_accuracy_before)} ± {fmt(s.heldout_accuracy_se_before)}",
                         f"{fmt(s.heldout_accuracy_after)} ± {fmt(s.heldout_accuracy_se_after)}", f"{gain:+.3f}",
                         fmt(s.keep_ratio_mean), fmt(s.head_accuracy_after_cold_start),
                         fmt(s.head_majority_after_cold_start), fmt(s.head_auc_after_cold_start),
                         fmt(s.zero_advantage_fraction)])
    lines += [
        f"`experiments/run.py +exp={preset}`: both arms train for {budget} min of training wall time "
        f"(held-out evaluations excluded) {setting}; "
        f"B = {arrol.config['algo']['prompts_per_step']} × G = {arrol.config['algo']['group_size']}, "
        f"L_detect = {arrol.config['engine']['detect_length']} of {arrol.config['algo']['max_response_tokens']} tokens, "
        f"head input `{arrol.config.get('head', {}).get('input', 'last')}`. "
        f"Held-out: {arrol.heldout_problems} problems × {arrol.heldout_samples} samples (± the evaluation's standard "
        "error over problems). A sweep runs its jobs one after another; anything else on the machine slows the arms "
        "unevenly and biases an equal-time comparison, so this part runs alone.",
        "",
        *table_lines(["seed", "arm", "steps", "s / step", "held-out before", "held-out after", "gain", "keep",
                      "head acc.", "majority class", "head AUC", "zero-adv. groups"], rows),
    ]
    # the larger of the evaluations' noise and the spread over seeds (which also holds the training paths' noise)
    difference = paired_difference(pairs)
    k, diff, diff_se, eval_se = difference.seeds, difference.mean, difference.se, difference.eval_se
    e = difference.estimate
    steps_ratio = sum(a.steps for _, _, a in pairs) / max(1, sum(g.steps for _, g, _ in pairs))
    per_seed = "; ".join(f"seed {seed}: {d:+.3f} ± {se:.3f}" for seed, d, se in difference.per_seed)
    spread = (f"; over seeds sd {difference.seed_sd:.3f}, SE {difference.seed_se:.3f}; the larger SE is used" if k > 1
              else "; one seed per arm")
    paired = difference.by_problem
    unpaired = ("the two evaluations' standard errors combined as if independent, likely an overestimate since both "
                "arms evaluate the same problems")
    how = ("paired by problem: both arms evaluate the same problems" if paired == k else
           f"{unpaired}; these runs predate the per-problem records that pair them" if not paired else
           f"paired by problem for the seeds whose runs recorded per-problem results, else {unpaired}")
    lines += ["", f"{name} took {steps_ratio:.2f}× GRPO's steps in the same training time. Held-out after, {name} − GRPO "
              f"({how}): {per_seed}. Over the {k} seed(s): {diff:+.3f} ± "
              f"{diff_se:.3f} (evaluation SE {eval_se:.3f}{spread}; {e.interval()})."]
    detect = arrol.config["engine"]["detect_length"]
    claims = [online_head_claim(a, f"Online head on SmolLM2-135M ({arm_title} arm at L_detect = {detect}, seed {seed})")
              for seed, _, a in pairs]
    ahead = e.ahead
    outcome = ("reproduced" if ahead else NOT_DISTINGUISHABLE if diff >= 0 else "not reproduced")
    why = ("" if ahead else f": {name} {e.standing()}" if e.behind else
           f": {name} {'≥' if diff >= 0 else 'below'} GRPO by the point estimate only; {e.standing()}")
    text = (f"{label}: held-out accuracy of {name} minus GRPO's after the same training time, {diff:+.3f} ± "
            f"{diff_se:.3f} over {k} seed(s)")
    here = (f"{short or name}, L_detect = {arrol.config['engine']['detect_length']}: {name} − GRPO {diff:+.3f} ± "
            f"{diff_se:.3f} ({k} seeds)")
    if judged == "paper":
        claims.append(Claim(row, text, paper=outcome, here=here, detail=why + f" (the paper: {name} ≥ GRPO; "
                            f"reproduced means ahead beyond {INTERVAL} over the seeds)"))
    elif judged == "target":
        claims.append(Claim(row, text, targets=((target, ahead),), here=here, detail=why))
    else:
        claims.append(Claim(row, text + (f": {e.standing()}" if ahead else why)))
    return lines, claims


def section_online_balance(root: Path) -> tuple[list[str], list[Claim]]:
    """Online Table 4 on SmolLM2-135M: the spread rule against random pruning (``+exp=smollm2_balance``), the two
    arms paired by ``trainer.seed``; the per-seed differences over the seeds (:func:`spread_minus_random`)."""
    lines = ["## 10. Online balance on SmolLM2-135M: ARRoL's spread rule vs random pruning (paper Table 4)", ""]
    pairs = pairs_by_seed(sweep_runs(root / "online_balance"), {"policy": "arrol", "balance_target": "spread"},
                          {"policy": "random"})
    if not pairs:
        return lines + ["Not run (`online_balance/` needs a `pruning=arrol_spread` and a `pruning=random` job of one "
                        "`trainer.seed`): `python experiments/reproduce.py --only online_balance page` (5 seeds, about "
                        "110 min on 2 cores)."], []
    first = pairs[0][1]
    trainer = first.config["trainer"]
    budget = f"{trainer.get('max_steps')} steps"
    if trainer.get("max_minutes") is not None:
        budget = f"{trainer['max_minutes']} min of training" + (
            f", at most {trainer['max_steps']} steps" if trainer.get("max_steps") else "")
    rows, zero_advantage, balance = [], [], []
    for seed, spread, rand in pairs:
        per_arm = {}
        for title, run in (("ARRoL, spread", spread), ("random", rand)):
            stats = {k: per_step_after_cold_start(run, f"balance/{k}")
                     for k in ("positive_ratio", "rho_1_minus_rho", "zero_advantage_fraction")}
            per_arm[title] = stats
            head_input = run.config.get("head", {}).get("input", "last")
            rows.append([seed, title, f"`{head_input}`", run.steps, fmt(run.keep_ratio_mean),
                         *(f"{e.mean:.3f} ± {e.se:.3f}" for e in stats.values()),
                         fmt(run.head_auc_after_cold_start), fmt(run.head_within_auc_after_cold_start),
                         f"{fmt(run.heldout_accuracy_before)} ± {fmt(run.heldout_accuracy_se_before)}",
                         f"{fmt(run.heldout_accuracy_after)} ± {fmt(run.heldout_accuracy_se_after)}"])
        zero_advantage.append((seed, *(per_arm[t]["zero_advantage_fraction"] for t in ("ARRoL, spread", "random"))))
        balance.append((seed, *(per_arm[t]["rho_1_minus_rho"] for t in ("ARRoL, spread", "random"))))
    lines += [
        f"`experiments/run.py +exp=smollm2_balance`: as section 8 (bf16, top 2 decoder blocks trained), but each arm "
        f"trains {budget}, L_detect = {first.config['engine']['detect_length']}, where SmolLM2 has written its "
        "answer, and the two arms prune at the same κ: `spread` keeps each group's best- and worst-scored rollouts "
        "(ranks of the online head's scores only), `random` ignores the head (which still trains, so its figures are "
        "comparable). Per-step figures after the cold start (mean ± standard error over steps; the within-group AUC is "
        "over each step's survivors, which `spread` picks from the ends of the head's order, so it reads high there "
        "and fairly under `random`).", "",
        *table_lines(["seed", "arm", "head input", "steps", "keep", "E[ρ̂]", "E[ρ̂(1−ρ̂)]", "zero-adv. groups",
                      "head AUC", "head AUC within groups", "held-out before", "held-out after"], rows),
    ]
    z, b = spread_minus_random(zero_advantage), spread_minus_random(balance)
    k = z.seeds
    per_seed = "; ".join(f"seed {seed}: zero-advantage {dz:+.3f} ± {zse:.3f}, E[ρ̂(1−ρ̂)] {db:+.4f} ± {bse:.4f}"
                         for (seed, dz, zse), (_, db, bse) in zip(z.per_seed, b.per_seed))
    lines += ["", f"Spread − random, per seed (standard errors over steps combined): {per_seed}. Over the {k} seed(s): "
              f"zero-advantage groups {z.mean:+.3f} ± {z.se:.3f} ({z.estimate.interval()}), E[ρ̂(1−ρ̂)] "
              f"{b.mean:+.4f} ± {b.se:.4f} ({b.estimate.interval('.4f')}): the per-seed differences averaged, ± the "
              "larger of their standard errors combined and their spread over the seeds (within a seed the two "
              "policies drift apart as they train)."]
    ok = z.estimate.behind and b.estimate.ahead
    claims = [Claim("balance_smollm2", f"Table 4 online on SmolLM2-135M (spread vs random pruning at κ = 0.5, {k} "
                    f"seed(s)): zero-advantage groups {z.mean:+.3f} ± {z.se:.3f}, E[ρ̂(1−ρ̂)] {b.mean:+.4f} ± "
                    f"{b.se:.4f}", paper=verdict(ok),
                    detail=f" (fewer zero-advantage groups and more balance, each beyond {INTERVAL} over the seeds: "
                    f"zero-advantage groups {z.estimate.standing()}; E[ρ̂(1−ρ̂)] {b.estimate.standing('.4f')})",
                    here=f"spread rule online: zero-adv. groups {z.mean:+.3f} ± {z.se:.3f}")]
    claims += [online_head_claim(spread, f"Online head on SmolLM2-135M at L_detect = "
                                         f"{spread.config['engine']['detect_length']} (spread arm, seed {seed})")
               for seed, spread, _ in pairs]
    return lines, claims


def spread_minus_random(per_seed: list[tuple[int, Estimate, Estimate]]) -> SeedMean:
    """A per-step figure of the spread arm minus the random arm's over the seeds, from each seed's ``(seed, spread's
    estimate, random's)``: per seed the difference with both standard errors combined, on the fewer steps − 1
    degrees of freedom."""
    return seed_mean([(seed, a.mean - b.mean, math.hypot(a.se, b.se)) for seed, a, b in per_seed],
                     min(min(a.df, b.df) for _, a, b in per_seed))
