"""A run's directory: what in it a training run wrote, one run per directory, and the history file.

Decisions:
- **One run per directory.** A run refuses a directory that already holds another run's history, summary,
  checkpoints, TensorBoard events or export, before any model loads, naming the two ways on: resume that run, or
  pass a new directory. Resuming continues only from the directory's newest checkpoint: branching from an older
  one there would leave later, stale files beside it. Hydra's own ``.hydra/`` and log are not a run's; Hydra is
  told not to write ``.hydra/`` itself (``hydra.output_subdir: null``), so a refused run cannot overwrite another
  run's record: the script writes it (:func:`save_hydra_record`) once the directory is accepted.
- **The directory is claimed before it is checked.** Two runs started in the same second get the same default
  directory (its name is the time to the second), and both would pass a check that reads names, since neither
  has written yet. So a run first claims the directory (:func:`claim_output_dir`): it creates
  :data:`CLAIM_FILE` exclusively, holding its process id and host, and removes it when it ends. A second run
  finds the claim and is refused while the holder is alive; a claim left by a process that is gone (a killed
  run) is taken over, so its resume is not blocked. One run claims once: its launcher when it starts the ranks
  itself (:data:`OWNER_ENV` tells its ranks whose claim it is), else rank 0.
- **Resuming a run continues its directory.** ``trainer.resume=<run directory>`` continues that run in that
  directory from its newest checkpoint (``checkpoints/last.ckpt``); ``trainer.resume=auto`` continues the run's own
  directory if it holds a checkpoint, else the most recent run of the same name (:func:`latest_run`); a ``.ckpt``
  path resumes into the run's directory as given. No checkpoint found: the run starts fresh, and says so
  (:func:`resolve_resume`).
- **One resume command.** Every line that tells the user how to go on (a signal's, a failure's, a refused
  directory's) names the run directory, which continues the run in place; a ``.ckpt`` path, which starts a new run
  from that checkpoint, only where the run directory would not resume from it (:func:`resume_command`).
- **The history file is the record.** ``history.jsonl`` holds one JSON row per finished step; whole-file writes go
  to a temporary file renamed over it, and a last line cut short by a crash is left out when read. A resumed run
  starts from the rows before its checkpoint's step, read from the file of the run that wrote the checkpoint.
- **A record that cannot be written is named.** A checkpoint, ``history.jsonl`` or ``summary.json`` whose write
  fails (a full disk, a quota, a file-size limit) raises :class:`RecordWriteError`: the file, the file system's
  reason (:func:`write_reason`) and the newest complete checkpoint, the one to resume from.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from arrol_pl.models.cache import process_alive
from arrol_pl.train.config.loader import ConfigError

logger = logging.getLogger(__name__)


STEP_CHECKPOINT = re.compile(r"step(\d+)\.ckpt")
"""The name of a step checkpoint (``step00042.ckpt``); the group is its step."""


def write_reason(exc: BaseException) -> str:
    """Why a write failed, in the file system's words when an OSError is in ``exc``'s chain (``No space left on
    device``): torch.save reports a failed write of its archive as ``[enforce fail at inline_container.cc] unexpected
    pos``, the OSError only its context. Otherwise ``exc``'s type and first line."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


class RecordWriteError(RuntimeError):
    """A record of the run (``what``: a checkpoint, the history, the summary) could not be written to ``path``;
    ``last_good`` is the newest complete checkpoint (None: none yet; the experiment sets it where the writer does not
    know it)."""

    def __init__(self, what: str, path: Path, cause: BaseException, last_good: Path | None = None) -> None:
        super().__init__(what, path, cause, last_good)
        self.what, self.path, self.last_good = what, Path(path), last_good
        self.failed = f"writing {what} {path} failed ({write_reason(cause)})"
        """What failed and why, without the checkpoint to resume from."""

    def __str__(self) -> str:
        if self.last_good is None:
            return f"{self.failed}; no checkpoint was written before it"
        return f"{self.failed}; the last good checkpoint is {self.last_good}"


@contextmanager
def writing(what: str, path: Path, last_good: Path | None = None) -> Iterator[None]:
    """Inside, an OSError is raised as :class:`RecordWriteError` naming ``what`` and ``path``."""
    try:
        yield
    except OSError as exc:
        raise RecordWriteError(what, path, exc, last_good) from exc


def step_checkpoints(dirpath: Path) -> dict[int, Path]:
    """The step checkpoints in ``dirpath``, by step (empty if it does not exist)."""
    if not Path(dirpath).is_dir():
        return {}
    return {int(m.group(1)): p for p in Path(dirpath).iterdir() if (m := STEP_CHECKPOINT.fullmatch(p.name))}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as JSON lines, replacing ``path`` whole (a temporary file renamed over it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``history.jsonl``; a last line cut short by a crash mid-write is left out."""
    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}: line {i + 1} is not JSON") from None
            logger.warning("%s: its last line was cut short (a crash mid-write); left out", path)
    return rows


def run_files(out_dir: Path) -> list[str]:
    """What in ``out_dir`` a training run wrote: its history, summary, checkpoints, TensorBoard events, export
    (Hydra's ``.hydra/`` and log are not a run's)."""
    out_dir = Path(out_dir)
    found = [name for name in ("history.jsonl", "summary.json") if (out_dir / name).exists()]
    for folder, pattern in (("checkpoints", "*.ckpt"), ("tb", "events.out.tfevents.*"), ("export", "*")):
        if (out_dir / folder).is_dir() and any((out_dir / folder).glob(pattern)):
            found.append(f"{folder}/")
    return found


def check_output_dir(out_dir: Path, resume: str | None, ckpt: dict | None) -> None:
    """One run per directory (module docstring): refuse ``out_dir`` if it holds a run that ``resume`` (the path
    of ``ckpt``) does not continue from its newest checkpoint. Reads names only, writes nothing."""
    found = run_files(out_dir)
    if not found:
        return
    checkpoints = Path(out_dir) / "checkpoints"
    if resume is None or Path(resume).resolve().parent != checkpoints.resolve():
        way = (
            f"resume it with trainer.resume={out_dir}" if last_checkpoint(out_dir) else "it has no checkpoint to resume"
        )
        raise ConfigError(
            f"output directory {out_dir} already holds another run's files ({', '.join(found)}): {way}, "
            "or pass a new directory (trainer.output_dir=<dir> or hydra.run.dir=<dir>)"
        )
    step = int(ckpt["global_step"])
    later = [k for k in step_checkpoints(checkpoints) if k > step]
    if later:
        raise ConfigError(
            f"trainer.resume={resume}: {out_dir} holds this run's later checkpoint "
            f"step{max(later):05d}.ckpt; continue the run with trainer.resume={out_dir}, or branch from "
            f"step {step} into a new directory (trainer.output_dir=<dir> or hydra.run.dir=<dir>)"
        )


RESUME_AUTO = "auto"
"""``trainer.resume``'s value that finds the run to continue (:func:`resolve_resume`)."""
RUN_STAMP = r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_"
"""What Hydra's default run directory (``outputs/runs/<date>_<time>_<name>``) puts before the run's name."""


def last_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint in ``run_dir/checkpoints/``: ``last.ckpt``, unless a ``kill -9`` fell between a step's
    two writes (``step<k>.ckpt``, then ``last.ckpt``), leaving that step file the one written last. None: none."""
    folder = Path(run_dir) / "checkpoints"
    files = [p for p in (folder / "last.ckpt", *step_checkpoints(folder).values()) if p.is_file()]
    return max(files, key=lambda p: p.stat().st_mtime_ns, default=None)


def latest_run(runs_root: Path, name: str) -> Path | None:
    """The most recent run named ``name`` under ``runs_root``: of the directories there named ``name`` or
    ``<date>_<time>_<name>`` (Hydra's default) that hold a checkpoint, the one whose newest checkpoint
    (:func:`last_checkpoint`) was written last (a resumed older run is the most recent once it checkpoints). None: no
    such directory."""
    pattern = re.compile(f"({RUN_STAMP})?{re.escape(name)}")
    runs = [
        (last.stat().st_mtime_ns, d)
        for d in (Path(runs_root).iterdir() if Path(runs_root).is_dir() else ())
        if pattern.fullmatch(d.name) and (last := last_checkpoint(d)) is not None
    ]
    return max(runs, default=(0, None))[1]


def resolve_resume(resume: str | None, name: str, run_dir: Path, pinned: bool) -> tuple[Path | None, Path, str | None]:
    """What ``trainer.resume`` continues, for a run named ``name`` whose directory would be ``run_dir`` (``pinned``:
    set by ``trainer.output_dir``, not Hydra's fresh one): ``(checkpoint, run directory, note)``, the checkpoint None
    for a fresh start, which the note (one line) says. ``auto``: ``run_dir`` if it holds a checkpoint, else (unless
    pinned) :func:`latest_run` under ``run_dir``'s parent; a directory: that run, in it (its ``checkpoints/`` too);
    a file: that checkpoint, into ``run_dir``. A directory that is not ``run_dir`` when pinned: ConfigError."""
    run_dir = Path(run_dir)
    if resume is None:
        return None, run_dir, None
    if resume == RESUME_AUTO:
        found = run_dir if last_checkpoint(run_dir) or pinned else latest_run(run_dir.parent, name)
        if found is not None and (last := last_checkpoint(found)) is not None:
            return last, found, None
        where = f"in {run_dir}" if pinned else f"named {name} under {run_dir.parent}"
        return (
            None,
            run_dir,
            f"trainer.resume=auto: no run {where} holds a checkpoint; starting a fresh run in {run_dir}",
        )
    target = Path(resume)
    if not target.is_dir():
        return target, run_dir, None
    if target.name == "checkpoints" and (target / "last.ckpt").is_file():
        target = target.parent
    if pinned and target.resolve() != run_dir.resolve():
        raise ConfigError(
            f"trainer.resume={resume} continues that run in its own directory, and trainer.output_dir="
            f"{run_dir} names another: drop one (a .ckpt path resumes into another directory)"
        )
    last = last_checkpoint(target)
    note = None if last else f"trainer.resume={resume}: no checkpoints/last.ckpt there; starting a fresh run in it"
    return last, target, note


def resume_command(checkpoint: str | Path) -> str:
    """The ``trainer.resume=`` override that goes on from ``checkpoint``: its run's directory, which continues the
    run in place, when that directory resumes from this very checkpoint (its newest, :func:`last_checkpoint`); else
    the file, which starts a new run from it."""
    checkpoint = Path(checkpoint)
    run_dir = checkpoint.parent.parent
    newest = last_checkpoint(run_dir) if checkpoint.parent.name == "checkpoints" else None
    in_place = newest is not None and newest.resolve() == checkpoint.resolve()
    return f"trainer.resume={run_dir if in_place else checkpoint}"


def resumed_run_dir(run: Any, hydra_dir: Path) -> Path:
    """The directory a run (a ``RunConfig``) writes, given the one Hydra would make: ``trainer.output_dir`` when set
    (what it resumes is checked in the run: :func:`resolve_resume`), else the run ``trainer.resume`` continues
    (``auto``, a run directory), else ``hydra_dir``. Read before Hydra starts the job, so Hydra's record and log go
    there too, and nothing is made under Hydra's own runs directory."""
    if run.trainer.output_dir is not None:
        return Path(run.trainer.output_dir)
    return resolve_resume(run.trainer.resume, run.name, Path(hydra_dir), pinned=False)[1]


CLAIM_FILE = ".arrol-run.claim"
"""The claim on a run directory: JSON ``{"pid", "host"}`` of the process that holds it."""
OWNER_ENV = "ARROL_RUN_OWNER"
"""Set by a launcher that claimed the directory for its ranks: its process id."""


def claim_holder(claim: Path) -> dict[str, Any] | None:
    """The claim's ``{"pid", "host"}``; None while its holder is still writing it (or it is unreadable)."""
    try:
        holder = json.loads(claim.read_text())
        return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def _refuse_claim(out_dir: Path, claim: Path, holder: dict[str, Any] | None) -> ConfigError:
    who = (
        "a run that is still writing its claim"
        if holder is None
        else f"process {holder['pid']} on {holder.get('host', 'an unknown host')}"
    )
    return ConfigError(
        f"output directory {out_dir} is in use by another run ({who}): pass a new directory "
        f"(trainer.output_dir=<dir> or hydra.run.dir=<dir>); if no run is writing there, delete {claim}"
    )


def _take_claim(out_dir: Path, claim: Path, host: str, me: int) -> None:
    """Create ``claim`` for process ``me``, taking it over from a process of this host that is gone."""
    for _ in range(3):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = claim_holder(claim)
            if holder is None or holder.get("host") != host or process_alive(holder["pid"]):
                raise _refuse_claim(out_dir, claim, holder) from None
            stale = claim.with_name(f"{CLAIM_FILE}.{me}.stale")  # of two takers, one rename finds it
            try:
                os.rename(claim, stale)
                stale.unlink()
                logger.info("took over %s from process %d, which is gone", claim, holder["pid"])
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": me, "host": host}, f)
        return
    raise _refuse_claim(out_dir, claim, claim_holder(claim))


@contextmanager
def claim_output_dir(out_dir: Path) -> Iterator[None]:
    """Hold the claim on ``out_dir`` (module docstring) for the body; refused with a ConfigError while another live
    process holds it. Creates ``out_dir`` if missing, and removes it again if it is still empty at the end. A rank
    other than 0, and rank 0 started by a launcher holding the claim (:data:`OWNER_ENV`), take no claim."""
    rank, owner = os.environ.get("RANK", "0"), os.environ.get(OWNER_ENV)
    out_dir, host, me = Path(out_dir), socket.gethostname(), os.getpid()
    claim = out_dir / CLAIM_FILE
    if rank != "0" or (owner is not None and (claim_holder(claim) or {}).get("pid") == int(owner)):
        yield
        return
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        _take_claim(out_dir, claim, host, me)
        yield
    finally:  # refused or ended: our claim goes, and the directory if the claim made it and nothing else is there
        if (claim_holder(claim) or {}).get("pid") == me:
            claim.unlink(missing_ok=True)
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()


def history_before(checkpoint: str | Path, ckpt: dict) -> list[dict[str, float]]:
    """The history rows of the steps ``ckpt`` (read from ``checkpoint``) holds, ``step`` < its ``global_step``,
    unique and in order: from the ``history.jsonl`` of the run that wrote it (the directory above its
    ``checkpoints/``), or from the checkpoint itself if it predates the history file. Missing rows are logged:
    the summary's figures then cover the rows there are. A file broken before its last line: ConfigError."""
    step = int(ckpt["global_step"])
    source = Path(checkpoint).resolve().parent.parent / "history.jsonl"
    rows = ckpt["arrol"].get("history")
    if rows is None and source.is_file():
        try:
            rows = read_rows(source)
        except ValueError as exc:
            raise ConfigError(f"trainer.resume={checkpoint}: {exc}") from None
    by_step = {int(r["step"]): r for r in rows or [] if r["step"] < step}
    kept = [dict(by_step[k]) for k in sorted(by_step)]
    if len(kept) < step:
        logger.warning(
            "trainer.resume=%s: %d of the %d steps before it have a history row (%s); the summary covers those",
            checkpoint,
            len(kept),
            step,
            source if source.is_file() else f"no {source}",
        )
    return kept


def only_hydra(path: Path) -> bool:
    """Whether ``path`` is a directory holding nothing but what Hydra writes before a job starts: its ``.hydra/``,
    its log, a sweep's ``multirun.yaml`` (or nothing)."""
    return path.is_dir() and all(p.name in (".hydra", "multirun.yaml") or p.suffix == ".log" for p in path.iterdir())


def remove_if_only_hydra(run_dir: Path, existed: Path | None = None) -> None:
    """Hydra creates the run directory (its ``.hydra/`` and log) before a script checks its config: a refused
    config leaves nothing behind (a directory holding anything else is left as it is). ``existed``: the deepest
    directory of the run directory's path that existed before the command started; the parents below it that hold
    nothing but Hydra's files (an ``outputs/runs/`` that Hydra created, a sweep's directory) go too."""
    run_dir = Path(run_dir).absolute()
    if only_hydra(run_dir):
        shutil.rmtree(run_dir)
    if existed is None:
        return
    existed = Path(existed).absolute()
    for parent in run_dir.parents:
        if existed not in parent.parents or not only_hydra(parent):
            break
        shutil.rmtree(parent)


def save_hydra_record(run_dir: Path, task_cfg: Any, hydra_cfg: Any, overrides: list[str]) -> None:
    """Hydra's record of an invocation in ``run_dir/.hydra/``, as Hydra writes it (``config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``), written by the script once the directory is accepted (module docstring)."""
    from omegaconf import OmegaConf

    record = Path(run_dir) / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("config.yaml", task_cfg),
        ("hydra.yaml", {"hydra": hydra_cfg}),
        ("overrides.yaml", list(overrides)),
    ):
        OmegaConf.save(OmegaConf.create(value) if not OmegaConf.is_config(value) else value, record / name)
