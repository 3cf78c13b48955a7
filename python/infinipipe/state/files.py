"""A checkpoint directory on disk (checkpoint.py): the step directories, the `latest` pointer,
and the renames that publish a complete save and prune old ones. A crash at any point leaves
`latest` naming a complete checkpoint (docs/runtime.md, "Checkpoints")."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from pathlib import Path

from ..errors import Error

_log = logging.getLogger("infinipipe")

META = "infinipipe.json"  # the trainer's side of a checkpoint (rank 0 writes it)
LATEST = "latest"  # the pointer file: the name of the newest complete step directory
_STEP = re.compile(r"step-(\d+)")
_LEFTOVERS = (".tmp-step-", ".old-step-", ".del-step-")  # of saves that stopped midway


def publish(root: Path, tmp: Path, final: Path) -> None:
    """Renames the complete `tmp` to `final` and points `latest` at it. A checkpoint of the same
    step already there is moved aside first and removed last; if the process dies between the
    two renames, load() finds it under its `.old-` name."""
    old = None
    if final.exists():
        old = root / f".old-{final.name}"
        remove(old)
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_directory(root)
    write_atomically(root / LATEST, final.name + "\n")
    if old is not None:
        remove(old)


def prune(root: Path, keep: int | None, current: Path) -> None:
    """Removes the step directories beyond the `keep` newest (by the time they were saved),
    and what saves that stopped midway left. A failure here only warns: the save is done."""
    try:
        for leftover in root.iterdir():
            if leftover.name.startswith(_LEFTOVERS):
                remove(leftover)
        if keep is None:
            return
        others = []
        for d in root.iterdir():
            if d != current and _STEP.fullmatch(d.name) and (d / META).is_file():
                others.append((_saved_at(d), d))
        for _, d in sorted(others, reverse=True)[keep - 1 :]:
            doomed = root / f".del-{d.name}"
            os.rename(d, doomed)  # never a half-removed step directory
            remove(doomed)
    except OSError as e:
        _log.warning("checkpoint: could not remove old checkpoints in %s: %s", root, e)


def _saved_at(directory: Path) -> tuple[float, int]:
    try:
        saved_at = float(json.loads((directory / META).read_text())["saved_at"])
    except (OSError, ValueError, KeyError, TypeError):
        saved_at = 0.0
    match = _STEP.fullmatch(directory.name)
    return saved_at, int(match.group(1)) if match else -1


def resolve(root: Path) -> Path:
    """The step directory `root` stands for: `latest`'s, or `root` itself."""
    pointer = root / LATEST
    if pointer.is_file():
        try:
            name = pointer.read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise Error(f"checkpoint pointer {pointer} is unreadable: {e}") from None
        if not _STEP.fullmatch(name):
            raise Error(
                f"checkpoint pointer {pointer} is corrupt: it holds {name[:80]!r}, not step-N"
            )
        directory = root / name
        if directory.is_dir():
            return directory
        old = root / f".old-{name}"
        if (old / META).is_file():  # a save of the same step stopped between its two renames
            return old
        raise Error(f"checkpoint pointer {pointer} names {name}, but {directory} does not exist")
    if root.name.startswith(_LEFTOVERS):
        raise Error(f"{root} is what a save that did not finish left, not a checkpoint")
    if (root / META).exists() or (root / ".metadata").exists():
        return root
    if not root.is_dir():
        raise Error(
            f"no checkpoint at {root}: {'not a directory' if root.exists() else 'no such directory'}"
        )
    steps = sorted(p.name for p in root.iterdir() if _STEP.fullmatch(p.name))
    unfinished = sorted(p.name for p in root.iterdir() if p.name.startswith(_LEFTOVERS))
    if steps:
        raise Error(
            f"no checkpoint at {root}: it has no `{LATEST}` file; load one of its step "
            f"directories ({', '.join(steps)})"
        )
    if unfinished:
        raise Error(
            f"no checkpoint at {root}: it holds only saves that did not finish "
            f"({', '.join(unfinished)})"
        )
    raise Error(f"no checkpoint at {root}: neither a `{LATEST}` file nor a checkpoint's {META}")


def candidates(root: Path) -> list[Path]:
    """The checkpoints a resume tries, in order: the one `latest` names (or `root` itself when
    it is a step directory), then every other complete-looking step directory, the newest
    first. Empty when `root` holds none."""
    first = []
    try:
        first = [resolve(root)]
    except Error as e:
        if (root / LATEST).exists():
            _log.warning("checkpoint: %s; trying the step directories", e)
    if first and first[0].parent != root:  # root is a step directory itself
        return first
    others = []
    if root.is_dir():
        for d in root.iterdir():
            if _STEP.fullmatch(d.name) and (d / META).is_file() and d not in first:
                others.append((_saved_at(d), d))
    return first + [d for _, d in sorted(others, reverse=True)]


def latest_says(root: Path) -> str:
    pointer = root / LATEST
    try:
        return f"{pointer} still names {pointer.read_text().strip()}"
    except OSError:
        return f"no {pointer} was written"


def write_atomically(file: Path, text: str) -> None:
    tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)
    _fsync_directory(file.parent)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be synced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
