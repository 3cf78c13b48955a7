"""Reading documents (strings) from disk: JSON Lines, plain text files, saved `datasets`.

Every reader is a generator: documents stream one at a time in a fixed order (file order, and
sorted path order in a directory), so every rank reading the same corpus sees the same
documents, and a corpus never has to fit in memory as text. Errors are `DocumentError`s naming
the file and line (or the dataset row), raised when the reader gets there; a corpus holding no
document at all raises at its end.

- JSON Lines (`.jsonl`, `.ndjson`, `.json`, any of them `.gz`-compressed): one JSON object a
  line, the document in its `field` (default "text"); blank lines are skipped.
- Plain text (UTF-8): a file is one document; a directory holds one document per file whose
  name matches `pattern` (default "*.txt"), searched recursively, hidden files and
  directories (names starting with ".") skipped, in sorted path order.
- A `datasets` dataset written by `save_to_disk` (a `Dataset`, or one split of a
  `DatasetDict`), read with `datasets.load_from_disk`; `datasets` is imported only then.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import Error

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
FORMATS = ("jsonl", "text", "dataset")


class DocumentError(Error, ValueError):
    """A corpus that cannot be read: a missing path, a malformed line or record, no documents."""


def read_documents(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    field: str = "text",
    pattern: str = "*.txt",
    split: str = "train",
) -> Iterator[str]:
    """The documents at `path`, in `format` ("jsonl", "text" or "dataset"; by default told from
    the path: a directory written by `datasets.save_to_disk` is a dataset, a file named like
    JSON Lines is JSON Lines, anything else is plain text)."""
    path = _existing(path)
    format = format or _format_of(path)
    if format == "jsonl":
        return read_jsonl(path, field=field)
    if format == "text":
        return read_text(path, pattern=pattern)
    if format == "dataset":
        return read_dataset(path, field=field, split=split)
    raise DocumentError(f"unknown document format {format!r}: expected one of {', '.join(FORMATS)}")


def hold_out(documents: Iterable[str], every: int = 20) -> tuple[list[str], list[str]]:
    """(training, held-out) documents: every `every`-th document held out for evaluation, in a
    fixed way that does not depend on the order batches are drawn in."""
    if every < 2:
        raise ValueError(f"hold_out: every must be at least 2, got {every}")
    documents = list(documents)
    held_out = [d for i, d in enumerate(documents) if i % every == every - 1]
    return [d for i, d in enumerate(documents) if i % every != every - 1], held_out


def read_jsonl(path: str | os.PathLike, *, field: str = "text") -> Iterator[str]:
    """Each line's JSON object's `field`, a string (blank lines skipped)."""
    path = _existing(path)
    if path.is_dir():
        raise DocumentError(f"{path}: a directory, not a JSON Lines file")
    return _jsonl(path, field)


def _jsonl(path: Path, field: str) -> Iterator[str]:
    count = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DocumentError(f"{where}: not UTF-8 at byte {e.start} of the line") from None
            if not line.strip():
                continue
            try:
                # Without its line end, which json would call an invalid control character in
                # an unterminated string.
                record = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                raise DocumentError(
                    f"{where}: not valid JSON at column {e.colno}: {_why(e)}"
                ) from None
            if not isinstance(record, dict):
                raise DocumentError(
                    f"{where}: expected a JSON object holding {field!r}, got a JSON {_json_type(record)}"
                )
            yield _text_field(record, field, where)
            count += 1
    if count == 0:
        raise DocumentError(f"{path}: no documents (the file holds no JSON line)")


def read_text(path: str | os.PathLike, *, pattern: str = "*.txt") -> Iterator[str]:
    """A file's whole text as one document, or one document per file matching `pattern` under a
    directory (recursively, in sorted path order, hidden names skipped)."""
    path = _existing(path)
    if not path.is_dir():
        return iter([_read_text_file(path)])
    files = sorted(
        p
        for p in path.rglob(pattern)
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        present = sorted(p.name for p in path.iterdir())[:10]
        raise DocumentError(
            f"{path}: no documents (no file matching {pattern!r} under the directory; "
            f"it holds {', '.join(present) if present else 'nothing'})"
        )
    return (_read_text_file(p) for p in files)


def _read_text_file(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DocumentError(
            f"{path}, line {line}: not UTF-8 (byte {e.start} of the file)"
        ) from None


def read_dataset(
    path: str | os.PathLike, *, field: str = "text", split: str = "train"
) -> Iterator[str]:
    """The `field` column of a dataset saved with `save_to_disk` (of its `split` when it is a
    DatasetDict), read with `datasets.load_from_disk`, in row order."""
    path = _existing(path)
    try:
        import datasets
    except ImportError:
        raise DocumentError(
            f"{path}: reading a saved dataset needs the `datasets` package (pip install datasets)"
        ) from None
    try:
        dataset = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise DocumentError(f"{path}: not a dataset saved with save_to_disk ({e})") from None
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise DocumentError(
                f"{path}: no split {split!r} in the saved DatasetDict (it has: {', '.join(dataset)})"
            )
        dataset = dataset[split]
    if field not in dataset.column_names:
        raise DocumentError(
            f"{path}: no column {field!r} in the dataset (it has: {', '.join(dataset.column_names)})"
        )
    if len(dataset) == 0:
        raise DocumentError(f"{path}: no documents (the dataset has no rows)")
    return _dataset_rows(dataset.select_columns([field]), field, path)


def _dataset_rows(dataset, field: str, path: Path) -> Iterator[str]:
    row = 0
    for rows in dataset.iter(batch_size=1024):
        for value in rows[field]:
            if not isinstance(value, str):
                raise DocumentError(
                    f"{path}, row {row}: column {field!r} holds {type(value).__name__}, not a string"
                )
            yield value
            row += 1


def _text_field(record: dict, field: str, where: str) -> str:
    if field not in record:
        fields = ", ".join(repr(k) for k in record) or "none"
        raise DocumentError(f"{where}: no field {field!r} in the record (its fields: {fields})")
    value = record[field]
    if not isinstance(value, str):
        raise DocumentError(f"{where}: field {field!r} is a JSON {_json_type(value)}, not a string")
    return value


def _why(e: json.JSONDecodeError) -> str:
    """json's reason in a sentence of ours: its messages end in " at" where its own text goes on
    with the position ("Unterminated string starting at: line 1 column 10 (char 9)")."""
    why = e.msg[:1].lower() + e.msg[1:]
    return why[: -len(" at")] + " here" if why.endswith(" at") else why


def _json_type(value) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise DocumentError(f"{path}: no such file or directory")
    return path


def _format_of(path: Path) -> str:
    if path.is_dir():
        saved = ("dataset_info.json", "state.json", "dataset_dict.json")
        return "dataset" if any((path / name).is_file() for name in saved) else "text"
    suffixes = path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]
    return "jsonl" if suffixes and suffixes[0] in JSONL_SUFFIXES else "text"
