"""``docs/results.md`` from the outputs of ``experiments/reproduce.py``: our tables beside the paper's.

This project's own page, so it lives beside the scripts and not in the installed ``arrol_pl``: ``write_results.py``
and ``reproduce.py`` import it as ``results_page`` (``experiments/`` is the first entry of ``sys.path`` when they
run). It reads runs through what the package keeps for every user: :mod:`arrol_pl.analysis.runs` and
:mod:`arrol_pl.analysis.history` (the run readers), :mod:`arrol_pl.analysis.sweep`,
:mod:`arrol_pl.analysis.significance`, :mod:`arrol_pl.analysis.formatting` and :mod:`arrol_pl.analysis.wallclock`.

Every number on the page is read from the run outputs, through the records kept beside the page
(:mod:`.records`: the small files each section reads, collected from a results directory); every verdict is computed
from them against the criterion stated next to it, the paper's claim apart from the project's own targets
(:class:`.common.Claim`). A part whose outputs are missing is listed as not run, never filled in; a section whose
records were never collected is kept from the page and says so. :mod:`.page` assembles the page from one
renderer per section: :mod:`.default_task` (sections 1–6 and 9, the tiny policy), :mod:`.pretrained` (7, the
SmolLM2 probe), :mod:`.online` (8, 10 and 11, SmolLM2 trained online), :mod:`.screen` (12, choosing the
groups), :mod:`.pruning_pays` (13, when pruning pays: scorers, the oracle ladder, the cost-matched control;
:mod:`.ladder` reads a ladder: its break-even, its slope, its figure), :mod:`.grad_probe` (14, the gradient
probe) and :mod:`.peers` (15, the step beside TRL's); :mod:`.paper` holds the paper's numbers set beside ours.
:mod:`.headline` makes the opening table from every section's claims, which are written beside the page
as data (``results.json``).

Layout of a results directory (what ``reproduce.py`` writes; the records keep the same layout)::

    phases/phases.json            experiments/bench_phases.py
    kappa/<job>/summary.json      +exp=ablation_kappa (history.jsonl beside each summary)
    balance/<job>/summary.json    +exp=random_pruning without the κ = 0.5 default-rule job
    head/head_quality.json        experiments/head_quality.py (+ head_quality.png)
    voting/metrics.json           experiments/evaluate.py k = 32
    wallclock.png                 experiments/plot_wallclock.py
    pretrained/head_quality.json  experiments/head_quality.py policy=smollm2 data=arithmetic_fewshot
    pretrained_seeds/<seed>/...   the same probe with other seeds (opt-in): Fig. 2(c) across probe runs
    votes32/head_quality.json     the same at k = 32 (opt-in): section 7's votes when present
    online/<job>/summary.json     +exp=smollm2_online (ARRoL vs GRPO at equal training time; opt-in part)
    seeds/<job>/summary.json      +exp=seeds (the default experiment over 5 seeds, 3 arms; opt-in part)
    online_balance/<job>/...      +exp=smollm2_balance (ARRoL's survival rules vs random pruning, per step; opt-in part)
    online_spread/<job>/...       +exp=smollm2_online_spread (section 8 with the spread rule; opt-in part)
    screen/<job>/summary.json     +exp=smollm2_screen (choosing the groups at equal training time; opt-in part)
    pruning_pays/<job>/...        +exp=pruning_pays (when pruning pays: scorers, oracle ladder, G = 4; opt-in part)
    grad_probe/<policy>/...       experiments/grad_probe.py, policies tiny and smollm2 (the gradient probe; opt-in part)
    peers/<task>/peers.json       experiments/bench_peers.py per task (the step beside TRL's; opt-in part)
    manifest.json                 commands, exit codes and seconds per part
"""
