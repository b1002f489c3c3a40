"""Run every paper measurement in one go, then write ``docs/results.md`` from the outputs.

    python experiments/reproduce.py                      # the CPU default set (each part's time: the page's header)
    python experiments/reproduce.py --only voting page   # redo some parts: only their sections of the page change
    python experiments/reproduce.py --out outputs/results/gpu -- model=hf model.path=/models/Qwen3-1.7B-Base

Parts, in order; each is the public script a user would run, as a subprocess with its log under
``<out>/logs/``:

- ``phases``    experiments/bench_phases.py: Table 5, GRPO vs ARRoL κ = 0.5 / 0.25, same prompts and weights;
- ``kappa``     experiments/run.py +exp=ablation_kappa: Table 6 and the runs behind Fig. 4;
- ``balance``   experiments/run.py +exp=random_pruning, without the κ = 0.5 default-rule job ``kappa`` already ran:
  Table 4;
- ``head``      experiments/head_quality.py on the κ = 0.5 run's policy: Fig. 2(b–d);
- ``voting``    experiments/evaluate.py k = 32 on the κ = 0.5 run's export: Table 3;
- ``wallclock`` experiments/plot_wallclock.py on the κ = 1 and κ = 0.5 runs: Fig. 4;
- ``pretrained`` experiments/head_quality.py on SmolLM2-135M-Instruct (``policy=smollm2``, few-shot arithmetic):
  Fig. 2 with a policy whose hidden state predicts correctness, head inputs side by side, Table 4 by replay;
- ``pretrained_seeds`` the same probe with ``seed=1`` and ``seed=2`` (other samples, problem splits and head
  initialisations): how much of Fig. 2(c) holds across probe runs (opt-in, about 30 min);
- ``votes32``   the same probe at k = 32 samples per problem, in bf16: Table 3 by replay at the paper's k
  (opt-in, about 20 min);
- ``online``    experiments/run.py +exp=smollm2_online: ARRoL vs GRPO with SmolLM2 at equal training time,
  3 seeds of 12 min per arm (Fig. 4 on a real policy; opt-in, about 90 min);
- ``seeds``     experiments/run.py +exp=seeds: the default experiment over 5 seeds, against GRPO and the paper's
  rule alone, with held-out curves against training time (opt-in, about 75 min);
- ``online_balance`` experiments/run.py +exp=smollm2_balance: ARRoL's survival rules (the default, Eq. 2 as written,
  the spread rule) vs random pruning with SmolLM2, online, 5 seeds of 60 steps per arm (Table 4 on a real policy;
  opt-in, about 4 h);
- ``online_spread`` experiments/run.py +exp=smollm2_online_spread: ``online`` with ``online_balance``'s pruning
  (the spread rule, the stats head input, L_detect = 12), 3 seeds (Fig. 4 where balance reproduces; opt-in,
  about 80 min);
- ``screen``    experiments/run.py +exp=smollm2_screen: GRPO, DAPO with refill, ARRoL and ARRoL with the prompt-stage
  screen with SmolLM2 at equal training time, 5 seeds of 12 min per arm (beyond the paper; opt-in, about 5 h);
- ``pruning_pays`` experiments/run.py +exp=pruning_pays: when pruning pays on the long-chain task at equal training
  time: GRPO G = 8 and G = 4 (the cost-matched control), random pruning, ARRoL with the head and the oracle ladder
  (AUC 1.0, 0.9, 0.7), 3 seeds of 4 min each on one core, then experiments/advise.py on the same setting, which the
  page checks against the runs (conf/exp/pruning_pays.yaml; beyond the paper; opt-in, about 2 h on one core);
- ``grad_probe`` experiments/grad_probe.py on the tiny policy, then on SmolLM2: on identical rollouts, what choosing
  which of a group's rollouts to train on does to the policy update (beyond the paper; opt-in, about 50 min);
- ``peers``     experiments/bench_peers.py on the default task and on the long-answer task (as its preset caps vLLM's
  slots, and with every rollout in flight, as TRL's transformers generation decodes): the project's GRPO and
  ARRoL steps beside TRL's GRPOTrainer (when trl is installed) and GRPO's generation against vLLM as shipped (beyond
  the paper; opt-in, about 25 min);
- ``page``      experiments/write_results.py: collects the records the page's sections read from ``--out`` into
  ``docs/results/records/`` (summaries, histories, each part's JSON: a few MB, committed beside the page), then
  writes ``docs/results.md`` (and its figures) from the records alone.

The default set is every part but the opt-in ones (``--all`` adds them).

Hydra overrides after ``--`` go to every training part (``phases``, ``kappa``, ``balance``); ``--head-args``
and ``--vote-args`` point the probe and the votes at other data (real models: the held-out sets). A part that
fails stops the set with its log's tail; the parts already done stay on disk and ``--only`` resumes.
``manifest.json`` records each part's command, exit status and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from results_page.records import PART_SECTIONS

ROOT = Path(__file__).resolve().parents[1]
PARTS = (
    "phases",
    "kappa",
    "balance",
    "head",
    "voting",
    "wallclock",
    "pretrained",
    "pretrained_seeds",
    "votes32",
    "online",
    "seeds",
    "online_balance",
    "online_spread",
    "screen",
    "pruning_pays",
    "grad_probe",
    "peers",
    "page",
)
OPT_IN = (
    "pretrained_seeds",
    "votes32",
    "online",
    "seeds",
    "online_balance",
    "online_spread",
    "screen",
    "pruning_pays",
    "grad_probe",
    "peers",
)
"""Parts run only when named in ``--only`` (or with ``--all``): each takes 20 min to several hours on 2 cores."""
ONE_CORE = ["OMP_NUM_THREADS=1", "VLLM_CPU_OMP_THREADS_BIND=0"]
"""An equal-time sweep's runs on one core, one thread: with two, OpenMP's spin-waits make step times 3-10x longer
whenever anything else runs on a 2-core machine, and the arms would pay for it unequally."""
PRUNING_PAYS_SEEDS = ["trainer.seed=0,1,2"]
PRUNING_PAYS_LADDER = ["arm=oracle", "pruning.oracle_auc=0.9,0.7"]
PRUNING_PAYS_ADVICE = ["arm=arrol", "hydra.mode=RUN", "advise.oracle_aucs=[0.7,0.9]", "advise.batches=64"]
"""Section 13 as the page shows it: the study's arms and the oracle ladder over 3 seeds, each run on one core (two
sweeps side by side on a 2-core machine: ``taskset -c <core>`` and ``VLLM_CPU_OMP_THREADS_BIND=<core>`` each), then
``arrol advise`` on the same setting (its ARRoL arm, one run rather than the preset's sweep) with the ladder's
oracles, which the page sets beside the runs."""
SMOLLM2_TASK = ["policy=smollm2", "data=arithmetic_fewshot", "max_tokens=32", "temperature=0.8"]
"""SmolLM2-135M-Instruct on held-out one-step problems at T = 0.8, answers of at most 32 tokens."""
PRETRAINED_PROBE = [*SMOLLM2_TASK, "data.num_heldout=256", "samples=8", "fractions=[1/8,1/4,3/8,1/2]"]
"""The real pretrained policy's probe: 256 problems × 8 at L_detect = 4, 8, 12, 16 (the answer's digits are
written at tokens 8-14)."""
PROBE_SEEDS = (1, 2)
"""The replicate probes' seeds (``pretrained_seeds``; ``pretrained`` is seed 0)."""
VOTES32_PROBE = [
    *SMOLLM2_TASK,
    "data.num_heldout=160",
    "samples=32",
    "dtype=bfloat16",
    "features=[last]",
    "fractions=[0.125]",
]
"""The same problems at the paper's k = 32 for the vote replay (Table 3): one head input, one detection length."""
GRAD_PROBES = {
    "tiny": ["policy=tiny", "batches=32", "head_prompts=256", "data.num_heldout=64", "rules=[group,spread]"],
    "smollm2": [
        *SMOLLM2_TASK,
        "detect_length=4",
        "trainable_layers=2",
        "engine_dtype=bfloat16",
        "margin=false",
        "oracle_aucs=[1.0]",
        "batches=80",
        "reference_rollouts=16",
        "head_prompts=64",
    ],
}
"""The gradient probe per policy (``grad_probe``, one directory each): on the tiny policy 32 batches, with the
per-group and spread rules beside the default and Eq. 2; on SmolLM2 its few-shot task at L_detect = 4, the gradient
over the top 2 decoder blocks that the SmolLM2 runs train, 80 batches of the cosine alone (no margin, the perfect
oracle and the head): the default rule against the cost-matched G' to a detectable difference of about ±0.08
(±0.05 would take about 185)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "outputs" / "results" / "default")
    p.add_argument("--only", nargs="+", choices=PARTS, default=None, help="run these parts only")
    p.add_argument("--all", action="store_true", help=f"also run the opt-in parts {', '.join(OPT_IN)}")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "results.md", help="where the page goes")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a few steps per part on the default task (the test suite's smoke run; figures meaningless)",
    )
    p.add_argument("--vote-k", type=int, default=32, help="samples per problem for the voting table")
    p.add_argument(
        "--head-args",
        default="",
        help="extra Hydra overrides of head_quality.py, e.g. "
        "'data.heldout_name=math500 data.heldout_path=/data/math500.jsonl max_tokens=8192'",
    )
    p.add_argument(
        "--vote-args",
        default="",
        help="extra Hydra overrides of evaluate.py, e.g. '+datasets.amc23.path=/data/amc23.jsonl max_tokens=8192'",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the training parts")
    args = p.parse_args(argv)
    if args.vote_k < 1:
        p.error(f"--vote-k must be >= 1, got {args.vote_k}")
    return args


def find_run(sweep_dir: Path, **pruning) -> Path:
    """The job directory of a sweep whose summary's ``config.pruning`` has the ``pruning`` values."""
    from arrol_pl.analysis.runs import pick, sweep_runs

    run = pick(sweep_runs(sweep_dir), **pruning)
    if run is None:
        raise FileNotFoundError(f"no run under {sweep_dir} with pruning {pruning}: run the part that makes it first")
    return Path(run.run_dir)


def commands(args: argparse.Namespace) -> dict[str, list[str] | list[list[str]]]:
    """Part → argv (or several, run one after another), resolved lazily by the caller (later parts read earlier
    parts' outputs)."""
    from results_page.peers import TASKS as PEER_TASKS

    py, out, ov = sys.executable, args.out, list(args.overrides)
    quick_train = (
        ["trainer.max_steps=4", "trainer.eval_every=2", "pruning.cold_start_steps=1", "data.num_heldout=8"]
        if args.quick
        else []
    )
    phases = [py, "experiments/bench_phases.py", "--out", str(out / "phases")]
    if args.quick:
        phases += ["--preset", "", "--warmup", "1", "--steps", "1", "--rounds", "1"]
    pretrained = [py, "experiments/head_quality.py", *PRETRAINED_PROBE, f"hydra.run.dir={out / 'pretrained'}"]
    if args.quick:
        pretrained += ["data.num_heldout=6", "samples=2", "max_tokens=16", "head.steps=5"]
    return {
        "phases": phases + ["--", *ov],
        "pretrained": pretrained,
        "kappa": [
            py,
            "experiments/run.py",
            "+exp=ablation_kappa",
            f"hydra.sweep.dir={out / 'kappa'}",
            *ov,
            *quick_train,
            *(["pruning.keep_ratio=0.5,1.0"] if args.quick else []),
        ],  # the two runs later parts read
        "pretrained_seeds": [
            [
                py,
                "experiments/head_quality.py",
                *PRETRAINED_PROBE,
                f"seed={seed}",
                f"hydra.run.dir={out / 'pretrained_seeds' / str(seed)}",
            ]
            for seed in PROBE_SEEDS
        ],
        "votes32": [py, "experiments/head_quality.py", *VOTES32_PROBE, f"hydra.run.dir={out / 'votes32'}"],
        "grad_probe": [
            [py, "experiments/grad_probe.py", *overrides, f"hydra.run.dir={out / 'grad_probe' / policy}"]
            for policy, overrides in GRAD_PROBES.items()
        ],
        "peers": [
            [py, "experiments/bench_peers.py", *arguments, "--out", str(out / "peers" / task)]
            for task, _, arguments in PEER_TASKS
        ],
        "online": [py, "experiments/run.py", "+exp=smollm2_online", f"hydra.sweep.dir={out / 'online'}"],
        "seeds": [py, "experiments/run.py", "+exp=seeds", f"hydra.sweep.dir={out / 'seeds'}", *ov],
        "online_balance": [
            py,
            "experiments/run.py",
            "+exp=smollm2_balance",
            f"hydra.sweep.dir={out / 'online_balance'}",
        ],
        "online_spread": [
            py,
            "experiments/run.py",
            "+exp=smollm2_online_spread",
            f"hydra.sweep.dir={out / 'online_spread'}",
        ],
        "screen": [py, "experiments/run.py", "+exp=smollm2_screen", f"hydra.sweep.dir={out / 'screen'}"],
        "pruning_pays": [
            [
                "env",
                *ONE_CORE,
                py,
                "experiments/run.py",
                "+exp=pruning_pays",
                *PRUNING_PAYS_SEEDS,
                f"hydra.sweep.dir={out / 'pruning_pays'}",
                *arms,
            ]
            for arms in ([], PRUNING_PAYS_LADDER)
        ]
        + [
            [
                py,
                "experiments/advise.py",
                "+exp=pruning_pays",
                *PRUNING_PAYS_ADVICE,
                f"hydra.run.dir={out / 'pruning_pays_advice'}",
            ]
        ],
        "balance": [
            py,
            "experiments/run.py",
            "+exp=random_pruning",
            "pruning=random" if args.quick else "pruning=arrol_eq2,random",
            f"hydra.sweep.dir={out / 'balance'}",
            *ov,
            *quick_train,
        ],
    }


def late_command(args: argparse.Namespace, name: str) -> list[str]:
    """The command of a part that reads the κ sweep's runs (found when it is run, after the sweep); the page reads
    only the results directory and the records."""
    py, out = sys.executable, args.out
    if name == "page":
        return [py, "experiments/write_results.py", str(out), "-o", str(args.page), *page_sections(args)]
    arrol = find_run(out / "kappa", keep_ratio=0.5)
    grpo = find_run(out / "kappa", keep_ratio=1.0)
    quick_eval = ["limit=8"] if args.quick else []
    head = [
        py,
        "experiments/head_quality.py",
        f"policy={arrol / 'export'}",
        f"hydra.run.dir={out / 'head'}",
        *shlex.split(args.head_args),
    ]
    if args.quick:
        head += ["data.num_heldout=16", "samples=2", "head.steps=5"]
    return {
        "head": head,
        "voting": [
            py,
            "experiments/evaluate.py",
            f"checkpoint={arrol / 'export'}",
            f"k={args.vote_k}",
            f"hydra.run.dir={out / 'voting'}",
            *quick_eval,
            *shlex.split(args.vote_args),
        ],
        "wallclock": [
            py,
            "experiments/plot_wallclock.py",
            str(grpo),
            str(arrol),
            "-o",
            str(out / "wallclock.png"),
            "--labels",
            "GRPO (κ=1)",
            "ARRoL (κ=0.5)",
            "--tag",
            "heldout/accuracy",
            "--smooth",
            "0",
        ],
    }[name]


def page_sections(args: argparse.Namespace) -> list[str]:
    """``--sections ...`` when ``--only`` names parts besides the page and the page exists: only their sections'
    records are collected, and the others are rebuilt from the records they have (or kept, with none); otherwise
    none (every section's records are collected)."""
    parts = [p for p in args.only or [] if p != "page"]
    if not parts or not Path(args.page).is_file():
        return []
    return ["--sections", *sorted({section for part in parts for section in PART_SECTIONS[part]})]


def run_part(name: str, argv: list[str] | list[list[str]], out: Path, manifest: dict) -> None:
    """Run a part's command (or its commands, one after another, into one log) and record it in the manifest."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    argvs = argv if argv and isinstance(argv[0], list) else [argv]
    command = " && ".join(" ".join(a[1:]) for a in argvs)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {command}", flush=True)
    t0 = time.perf_counter()
    rc = 0
    with log.open("w") as f:
        for a in argvs:
            rc = subprocess.run(a, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=os.environ.copy()).returncode
            if rc != 0:
                break
    seconds = time.perf_counter() - t0
    manifest["parts"][name] = {
        "command": command,
        "returncode": rc,
        "seconds": round(seconds, 1),
        "log": str(log),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"    {seconds:.0f} s, exit {rc}", flush=True)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"part {name!r} failed (exit {rc}); the parts before it are kept. Log {log}:\n{tail}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out, args.page = args.out.resolve(), args.page.resolve()
    os.chdir(ROOT)  # the parts run in ROOT; paths inside it are written relative (short, portable in the page)
    if args.out.is_relative_to(ROOT):
        args.out = args.out.relative_to(ROOT)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"parts": {}}
    manifest.update({"quick": args.quick, "overrides": args.overrides})
    parts = args.only or [name for name in PARTS if args.all or name not in OPT_IN]
    early = commands(args)
    for name in PARTS:
        if name not in parts:
            continue
        argv_ = early[name] if name in early else late_command(args, name)
        run_part(name, argv_, args.out, manifest)
    total = sum(p["seconds"] for k, p in manifest["parts"].items() if k != "page")
    print(f"measurement parts: {total / 60:.1f} min in total; page: {args.page}")


if __name__ == "__main__":
    main()
