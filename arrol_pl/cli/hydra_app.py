"""What every Hydra command shares (``arrol train`` / ``experiments/run.py``, ``evaluate``, ``head-quality``,
``simulate``): where the presets are, the configuration checked before Hydra starts the job, one kind of error, and
``--help``.

Decisions:
- **The presets travel with the package.** ``conf/`` stays at the top of the checkout; the wheel ships it as the
  package ``arrol_pl.conf`` (``setup.py``), which Hydra finds on its package search path (``pkg://arrol_pl.conf``).
  A checkout, or an editable install of one, reads its ``conf/`` directly.
- **Checked before Hydra starts the job.** The command line is composed here first, as Hydra will compose it, and a
  run's typed config loaded (its schema's checks); in a sweep the fixed overrides are composed, and each swept value
  with them, while the jobs' typed checks stay in the jobs (a value may be valid only beside the sweep's others).
  Every refusal, Hydra's included (a key no dataclass has, a value of the wrong type, a preset that does not exist,
  an override it cannot parse), is one line on stderr naming the key and what is allowed, ``config error: ...``,
  exit 2, before Hydra creates a directory or any model loads. ``--cfg job`` / ``--cfg all`` check as a run does
  before Hydra prints the config. ``--config-dir`` adds presets: they are composed here too (on Hydra's search path,
  where Hydra puts them), and a key, type or value refused in one of them names its file
  (:mod:`arrol_pl.cli.config_files`); a primary config of their own (``--config-name``), which only Hydra finds
  there, and ``--config-path``, which replaces the presets, leave Hydra alone to compose and report in its own
  words.
- **A refusal leaves no directory.** What needs the run directory or the data (a directory holding another run, a
  training set smaller than a step) is checked inside the job, after Hydra created the run directory:
  :func:`refuse` removes it, and the parents Hydra created for it (``outputs/runs/``), known from the composed
  ``hydra.run.dir`` (a sweep's ``hydra.sweep.dir``) before Hydra ran.
- **``--help`` is the configuration's**: the preset groups a user picks, with their presets, then every key with its
  type, default and meaning (:mod:`arrol_pl.cli.help`); ``--hydra-help`` is Hydra's own.
- **A sweep's jobs on CUDA run in processes of their own** when they start an engine (:mod:`.job_process`): one
  process holds one sleep-mode vLLM engine there. On CPU they follow each other in the sweep's process.
- **Hydra's argument parser** (``hydra._internal.utils.get_args_parser``, the one ``@hydra.main`` uses) reads the
  flags, so the command line means here what it means to Hydra; it is the one name this module takes from inside
  Hydra.
"""

from __future__ import annotations

import dataclasses
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence

from omegaconf import DictConfig, open_dict, read_write

from arrol_pl.cli import job_process
from arrol_pl.cli.config_files import composing_file, in_file, setting_file
from arrol_pl.train.config.loader import ConfigError, from_hydra
from arrol_pl.train.records.rundir import remove_if_only_hydra

PACKAGE = Path(__file__).resolve().parents[1]
PACKAGED_CONF = PACKAGE / "conf"
"""Where a wheel puts the presets: ``arrol_pl/conf``."""
CHECKOUT_CONF = PACKAGE.parent / "conf"
"""A checkout's presets, beside the package."""
CONF_MODULE = "arrol_pl.conf"


def conf_dir() -> Path:
    """The presets' directory: the installed package's own, else the checkout's ``conf/``."""
    for path in (PACKAGED_CONF, CHECKOUT_CONF):
        if (path / "config.yaml").is_file():
            return path
    raise FileNotFoundError(
        f"no presets: neither {PACKAGED_CONF} (an installed package) nor {CHECKOUT_CONF} (a checkout) holds config.yaml"
    )


def config_source() -> str:
    """Hydra's search path entry of the presets: ``pkg://arrol_pl.conf`` when installed, the checkout's directory."""
    path = conf_dir()
    return f"pkg://{CONF_MODULE}" if path == PACKAGED_CONF else str(path)


@contextmanager
def initialized() -> Iterator[None]:
    """Hydra's compose API pointed at the presets (:func:`config_source`)."""
    from hydra import initialize_config_dir, initialize_config_module

    source = config_source()
    if source.startswith("pkg://"):
        context = initialize_config_module(config_module=CONF_MODULE, version_base=None)
    else:
        context = initialize_config_dir(config_dir=source, version_base=None)
    with context:
        yield


def searched(config_dir: Path | None) -> list[str]:
    """The override that puts ``--config-dir``'s presets on the search path, where Hydra puts them (none without)."""
    return [] if config_dir is None else [f"hydra.searchpath=['file://{Path(config_dir).absolute()}']"]


def compose(
    config_name: str, overrides: Sequence[str], with_hydra: bool = False, config_dir: Path | None = None
) -> DictConfig:
    """``conf/<config_name>.yaml`` with ``overrides`` (and ``config_dir``'s presets), composed as a run composes it
    (``with_hydra``: Hydra's own section too); what Hydra refuses is a one-line :class:`ConfigError` naming the key
    or preset, and the file when a config file's key or value is refused."""
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    with initialized():
        try:
            return hydra_compose(
                config_name, overrides=[*searched(config_dir), *overrides], return_hydra_config=with_hydra
            )
        except (HydraException, OmegaConfBaseException) as exc:
            dirs = [conf_dir(), *([] if config_dir is None else [Path(config_dir)])]
            raise in_file(from_hydra(exc), composing_file(exc, dirs)) from None


def checked_in_file(
    job: HydraJob, name: str, cfg: DictConfig, config_dir: Path | None, overrides: Sequence[str]
) -> Any:
    """``job``'s typed config of ``cfg`` (``name`` with ``overrides``, composed with Hydra's section); a value it
    refuses that one of ``config_dir``'s presets set names that file."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    try:
        return job.check(task_part(cfg))
    except ConfigError as exc:
        if config_dir is None:
            raise
        with initialized():
            defaults = (
                GlobalHydra.instance()
                .config_loader()
                .compute_defaults_list(name, [*searched(config_dir), *overrides], RunMode.RUN)
                .defaults
            )
        raise in_file(
            exc, setting_file(exc, defaults, [conf_dir(), Path(config_dir)], Path(config_dir), overrides)
        ) from None


@dataclasses.dataclass(frozen=True)
class HydraJob:
    """One Hydra command: its config in ``conf/``, its job, and its typed config."""

    config_name: str
    """The config it composes (``config``: training's; ``evaluate``, ``probe``, ``simulate``)."""
    task: Callable[[DictConfig], None]
    """Hydra's task function: the job, given the composed config."""
    schema: type
    """The dataclass the config composes onto (``--help`` lists its keys)."""
    check: Callable[[DictConfig], Any]
    """Its typed config's loader (``load_run_config``), raising :class:`ConfigError` naming the key."""
    about: str
    """What the command does, ``--help``'s first lines."""
    groups: tuple[str, ...] | None = None
    """The preset groups ``--help`` lists; None: every group (training's)."""
    run_dir: Callable[[Any, Path], Path] | None = None
    """Where the job runs, from its typed config and the directory Hydra would make (training: a resumed run's own
    directory); None: Hydra's."""
    engine: bool = False
    """The job starts a vLLM engine: on CUDA each job of a sweep runs in a process of its own
    (:mod:`arrol_pl.cli.job_process`)."""


@dataclasses.dataclass
class Invocation:
    """The command this process runs (one per process), for the job: how it was called and its arguments (a record,
    the ranks torchrun starts), and the deepest directory of its run's path that existed before it started (what
    :func:`refuse` keeps)."""

    prog: str = ""
    argv: list[str] = dataclasses.field(default_factory=list)
    existed: Path | None = None
    run_dir: Path | None = None
    """The job's run directory when it is not the one Hydra would make (:attr:`HydraJob.run_dir`)."""


INVOCATION = Invocation()


def deepest_existing(path: str | Path) -> Path:
    """The deepest directory of ``path`` (relative: to the working directory, as Hydra reads it) that exists."""
    path = Path(path).absolute()
    return next(p for p in (path, *path.parents) if p.exists())


def task_part(cfg: DictConfig) -> DictConfig:
    """A config composed with Hydra's section, without it: what the job receives."""
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra")
    return cfg


def precheck(job: HydraJob, args: Any) -> Path | None:
    """Compose the command line (Hydra's parsed ``args``) as Hydra will, and load a run's typed config (module
    docstring); raises :class:`ConfigError`. Returns the deepest existing directory of the run's (sweep's) path
    (None: ``--config-dir`` presets that only Hydra composes)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import OverrideParseException
    from hydra.types import RunMode

    name = args.config_name or job.config_name
    extra = Path(args.config_dir) if args.config_dir and Path(args.config_dir).is_dir() else None
    parser = OverridesParser.create()
    parsed = []
    for line in args.overrides:
        try:
            parsed += parser.parse_overrides([line])
        except OverrideParseException as exc:
            raise ConfigError(
                f"{line}: not an override ({str(exc).splitlines()[0]}); an override reads key=value, "
                "group=preset, +key=value (add) or ~key (remove)"
            ) from None
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    try:
        cfg = compose(name, fixed, with_hydra=True, config_dir=extra)
        if args.multirun or cfg.hydra.mode == RunMode.MULTIRUN:
            for o in parsed:
                if o.is_discrete_sweep() and o.value_type != ValueType.GLOB_CHOICE_SWEEP:
                    for value in o.sweep_string_iterator():
                        compose(name, [*fixed, f"{o.get_key_element()}={value}"], config_dir=extra)
            return deepest_existing(cfg.hydra.sweep.dir)
        if len(fixed) < len(parsed):
            compose(name, args.overrides, config_dir=extra)  # Hydra's refusal of a sweep outside --multirun
    except ConfigError:
        if extra and not (conf_dir() / f"{name}.yaml").is_file():
            return None  # a primary config of --config-dir's own: only Hydra finds it there, and words its refusals
        raise
    hydra_dir = Path(cfg.hydra.run.dir)
    existed = deepest_existing(hydra_dir)
    if args.cfg in (None, "job", "all") and not args.info:
        checked = checked_in_file(job, name, cfg, extra, fixed)
        if args.cfg is None and job.run_dir is not None and (run_dir := job.run_dir(checked, hydra_dir)) != hydra_dir:
            INVOCATION.run_dir, existed = run_dir, deepest_existing(run_dir)
    return existed


def run(job: HydraJob, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run ``job`` on the command line ``argv`` (default ``sys.argv[1:]``) as ``@hydra.main`` would, with
    ``--help`` the configuration's and every config error one line, exit 2 (module docstring). Returns 0 when the
    job returns; the job's own failures exit from inside it."""
    from hydra import main as hydra_main
    from hydra._internal.utils import get_args_parser

    from arrol_pl.cli.help import help_text

    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name
    if "-h" in argv or "--help" in argv:
        print(help_text(prog, conf_dir(), job.config_name, job.schema, job.about, job.groups))
        return 0
    args = get_args_parser().parse_args(argv)
    INVOCATION.prog, INVOCATION.argv, INVOCATION.run_dir = prog, argv, None
    if not (args.hydra_help or args.shell_completion or args.config_path):
        try:
            INVOCATION.existed = precheck(job, args)
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            return 2
    if args.cfg is None and not (args.info or args.hydra_help or args.shell_completion):
        from arrol_pl.engine.companions import BrokenCompanionError, check_companions

        try:  # before any model loads: a torch extension that cannot load ends Lightning's or vLLM's import
            check_companions()
        except BrokenCompanionError as exc:
            print(f"environment error: {exc}", file=sys.stderr)
            return 1
    moved = [] if INVOCATION.run_dir is None else [f"hydra.run.dir={job_process.quoted(INVOCATION.run_dir)}"]
    saved, sys.argv = sys.argv, [prog, *argv, *moved]
    try:
        hydra_main(version_base=None, config_path=config_source(), config_name=job.config_name)(
            job_process.task(job, INVOCATION)
        )()
    finally:
        sys.argv = saved
    return 0


def refuse(exc: ConfigError, run_dir: Path) -> NoReturn:
    """A job's refusal of its config, found once Hydra made its run directory: one line on stderr, exit 2, and no
    directory left that only this command's Hydra wrote (module docstring)."""
    print(f"config error: {exc}", file=sys.stderr)
    remove_if_only_hydra(run_dir, INVOCATION.existed)
    sys.exit(2)
