"""Reading a dataset's rows: from a local file or folder, a ``save_to_disk`` directory, or the hub.

Decisions:
- Rows come from ``path`` (a json/jsonl/parquet file, a ``save_to_disk`` directory, or a folder of
  such files) when given, else from the adapter's hub id. json and jsonl files are read here, line by
  line, so one broken line (invalid JSON, bytes that are not UTF-8) costs that line only; a UTF-8 byte order
  mark (Windows editors write one) is read past in both json lines and a json array; parquet,
  saved datasets and the hub go through ``datasets``. Offline without a path fails at once with
  :class:`~arrol_pl.tasks.problem.DatasetUnavailableError` naming what to download and the key (``data.path`` or
  ``data.heldout_path``) that must point at it; the hub is never tried offline, where a name stalls
  ~23 s before failing.
"""

from __future__ import annotations

import codecs
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

from arrol_pl.tasks.problem import BadRowError, DatasetUnavailableError

DATA_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
SPLIT_WORDS = ("train", "test", "validation", "valid", "dev")
"""Words that name a split in a data file's path (``test-00000-of-00001.parquet``, ``data/train.jsonl``)."""

Row = tuple[str, "Mapping[str, Any] | BadRowError"]
"""``(where, row)``: the row's place (``file:line`` of json lines, ``file row i`` of a table, counted from
0) and the record, or the error that made it unreadable."""


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set to a true value."""
    truthy = {"1", "true", "yes", "on"}
    return any(os.environ.get(v, "").strip().lower() in truthy for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _download_hint(name: str, hub_id: str | None, hub_config: str | None, key: str) -> str:
    if hub_id is None:
        return (
            f"dataset {name!r} has no hub id: set {key}= to a json, jsonl or parquet file or a save_to_disk directory"
        )
    config = f", {hub_config!r}" if hub_config else ""
    return (
        f"download it on a machine with network access, e.g. "
        f"`datasets.load_dataset({hub_id!r}{config}).save_to_disk('/data/{name}')` "
        f"(or `huggingface-cli download --repo-type dataset {hub_id}`), copy it here and set "
        f"{key}=/data/{name} (a json, jsonl or parquet file or a save_to_disk directory also works)"
    )


def load_rows(
    name: str,
    hub_id: str | None,
    split: str,
    path: str | os.PathLike | None = None,
    hub_config: str | None = None,
    key: str = "data.path",
) -> tuple[str, Iterator[Row]]:
    """``(source, rows)``: where the rows come from and the rows, from the local ``path`` first, else the hub.

    ``key`` is the config key of ``path``, named in every error.
    """
    if path is None and (hub_id is None or hub_offline()):
        # Checked before importing datasets so the error comes at once.
        why = "the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if hub_id else "no local copy given"
        raise DatasetUnavailableError(
            f"{name}: {why} and no {key} is set; {_download_hint(name, hub_id, hub_config, key)}"
        )
    if path is None:
        import datasets

        try:
            loaded = datasets.load_dataset(hub_id, hub_config, split=split)
        except Exception as e:  # noqa: BLE001 — re-raised as the one error users see, with the cause chained
            raise DatasetUnavailableError(
                f"{name}: loading {hub_id!r} from the hub failed ({e}); {_download_hint(name, hub_id, hub_config, key)}"
            ) from e
        source = f"hub:{hub_id}" + (f"/{hub_config}" if hub_config else "")
        return source, _dataset_rows(loaded, source)
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetUnavailableError(
            f"{name}: {key}={str(p)!r} does not exist; {_download_hint(name, hub_id, hub_config, key)}"
        )
    if p.is_dir():
        if any((p / marker).exists() for marker in ("dataset_info.json", "dataset_dict.json", "state.json")):
            import datasets

            return str(p), _dataset_rows(_pick_split(name, datasets.load_from_disk(str(p)), split, key), str(p))
        files = data_files(name, p, split, key)
        return str(p), itertools.chain.from_iterable(_file_rows(f, f.relative_to(p).as_posix(), key) for f in files)
    if p.suffix.lower() not in DATA_SUFFIXES:
        raise DatasetUnavailableError(
            f"{name}: {key}={str(p)!r} must be a .json, .jsonl or .parquet file or a directory"
        )
    return str(p), _file_rows(p, p.name, key)


def data_files(name: str, folder: Path, split: str, key: str) -> list[Path]:
    """The data files of ``folder`` to read for ``split`` (a clone of a hub repository, or a few jsonl files).

    Files whose path names a split keep only ``split``'s; those must sit in one folder (GSM8K's
    ``main/`` and ``socratic/`` are two datasets). A folder whose files name no split is read whole
    (AIME'25 as ``aime2025-I.jsonl`` + ``aime2025-II.jsonl``).
    """
    files = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file()
        and f.suffix.lower() in DATA_SUFFIXES
        and not any(part.startswith(".") for part in f.relative_to(folder).parts)
    )
    if not files:
        raise DatasetUnavailableError(f"{name}: {key}={str(folder)!r} holds no .json, .jsonl or .parquet file")
    words = {f: set(re.split(r"[/_.\-]", f.relative_to(folder).as_posix().lower())) & set(SPLIT_WORDS) for f in files}
    named = sorted(set().union(*words.values()))
    if named:
        files = [f for f in files if split in words[f]]
        if not files:
            split_key = "data.heldout_split" if "heldout" in key else "data.split"
            raise DatasetUnavailableError(
                f"{name}: {key}={str(folder)!r} holds files of splits {named}, none named {split!r}; set {split_key}="
            )
    folders = sorted({f.parent.relative_to(folder).as_posix() for f in files})
    if len(folders) > 1:
        raise DatasetUnavailableError(
            f"{name}: {key}={str(folder)!r} holds {split!r} files in {len(folders)} folders ({', '.join(folders)}); "
            f"set {key} to the one to read, e.g. {key}={str(folder / folders[0])!r}"
        )
    return files


def _file_rows(path: Path, label: str, key: str = "data.path") -> Iterator[Row]:
    if DATA_SUFFIXES[path.suffix.lower()] == "parquet":
        yield from _dataset_rows(_parquet(path, key), label)
        return
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
    if path.suffix.lower() == ".json" and head.startswith(b"["):
        yield from _json_array_rows(path, label, key)
    else:
        yield from _json_lines(path, label)


def _json_lines(path: Path, label: str) -> Iterator[Row]:
    """One row per non-blank line; a line that is not UTF-8, not JSON or not an object is a bad row of its own."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{label}:{number}"
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                yield (
                    where,
                    BadRowError(f"line is not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})", "not_utf8"),
                )
                continue
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                yield where, BadRowError(f"invalid JSON ({e.msg}, column {e.colno})", "invalid_json")
                continue
            yield (
                where,
                row
                if isinstance(row, dict)
                else BadRowError(f"line holds a JSON {type(row).__name__}, not an object", "not_an_object"),
            )


def _parquet(path: Path, key: str):
    """A parquet file as a ``datasets.Dataset``; one pyarrow cannot read is an error naming ``key`` and the file
    (its footer is read first, so ``datasets`` never logs a failure of its own)."""
    import datasets
    import pyarrow
    import pyarrow.parquet

    try:
        pyarrow.parquet.read_metadata(path)
    except (pyarrow.ArrowException, OSError) as e:
        reason = " ".join(str(e).split())
        raise DatasetUnavailableError(
            f"{key}={str(path)!r} is not a readable parquet file ({reason}); expected a "
            "parquet table of rows, or a .json / .jsonl file"
        ) from None
    return datasets.load_dataset("parquet", data_files=str(path), split="train")


def _json_array_rows(path: Path, label: str, key: str = "data.path") -> Iterator[Row]:
    """A file holding one JSON array: unlike JSON lines, one broken byte breaks the whole file."""
    try:
        rows = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetUnavailableError(
            f"{key}: {path}: not a readable JSON array ({e}); write the rows as JSON lines (.jsonl) so a "
            f"broken row costs that row only"
        ) from None
    for i, row in enumerate(rows):
        where = f"{label}[{i}]"
        yield (
            where,
            row
            if isinstance(row, dict)
            else BadRowError(f"item holds a JSON {type(row).__name__}, not an object", "not_an_object"),
        )


def _dataset_rows(rows, label: str) -> Iterator[Row]:
    """Rows of a ``datasets.Dataset`` as dicts, read in column batches (far faster than row access)."""
    index = 0
    for batch in rows.iter(batch_size=4096):
        keys = list(batch)
        for values in zip(*(batch[k] for k in keys)):
            yield f"{label} row {index}", dict(zip(keys, values))
            index += 1


def _pick_split(name: str, loaded, split: str, key: str):
    import datasets

    if isinstance(loaded, datasets.Dataset):
        return loaded
    splits = list(loaded.keys())
    if split in loaded:
        return loaded[split]
    if len(splits) == 1:
        return loaded[splits[0]]
    split_key = "data.heldout_split" if "heldout" in key else "data.split"
    raise DatasetUnavailableError(f"{name}: {key} holds splits {splits}, none named {split!r}; set {split_key}=")
