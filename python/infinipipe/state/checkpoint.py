"""Saving and resuming the whole training state of a Trainer (issue 14, item 3).

    path = checkpoint.save(trainer, "ckpt", extra={"data": batches.state_dict()})
    extra = checkpoint.load(trainer, "ckpt")  # the directory holding `latest`, or a step-N

(Trainer.save_checkpoint / load_checkpoint call these.) Both are collectives: every rank calls
them, in the same order as every other collective of the trainer. The state is written with
torch.distributed.checkpoint (DCP), each rank writing its own file:

- every stage's weights as `model/<name>` and its optimizer state as
  `optim/state/<name>/<key>`, under the parameters' global names (the built-in stages name
  their layers by global index, `layers.5.mlp.down_proj.weight`), so a checkpoint does not
  depend on the layer split: a run with another split, or another number of stages, of the same
  model loads each parameter by name. Each rank's parameter groups' settings (learning rate
  and the rest, as a scheduler left them) are kept by parameter name as well;
- the step (`trainer.steps`), each rank's RNG states (torch's CPU generator, every CUDA
  device's when there are any, Python's `random`) as `rng/rank<r>/...`, and rank 0's `extra`;
- `infinipipe.json`: the model shape, dtype, layer split, world size, optimizer class, parallel
  layout and step, and the size and checksum of every other file (taken while DCP wrote it,
  checksums.py), written by rank 0 and read before anything else on load. A load checks every
  file against it before reading a tensor: a damaged, truncated or foreign file is an error
  naming it, and the trainer is left as it was. `resume()` loads the newest checkpoint that
  passes, falling back past damaged ones.

With data replicas and sequence ranks (layout.py) several ranks hold a stage: they save the same
keys, which DCP writes once; with ZeRO-1 each rank saves the optimizer state of the parameters
it owns, so every key is written by one rank, and a load reads each rank's keys by name from
whichever rank wrote them: any layout of the same model loads any other's checkpoint.

A save writes `path/.tmp-step-N/`, and only once every rank's data and DCP's metadata are
complete does rank 0 rename it to `path/step-N/` and replace the pointer file `path/latest`
(write and rename). A crash or an error at any point leaves `latest` naming the previous,
complete checkpoint; nothing that exists is overwritten by a failed save. `path` must be on a
filesystem that every rank sees (a save checks that rank 0 sees every rank's file). See
docs/runtime.md, "Checkpoints", for the choices (what is kept, other splits, RNG states).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from .. import _C
from ..errors import Error, LostRankError, RankFailedError
from . import checksums, contents, files
from .files import META

FORMAT = 2  # of infinipipe.json and the key layout; 2 added the checksums (1 still loads)
DEFAULT_KEEP = 2  # step directories kept by save(): the newest and the one before
_log = logging.getLogger("infinipipe")

# --- saving ---


def save(
    trainer: Any, path: str | os.PathLike, extra: Any = None, *, keep: int | None = DEFAULT_KEEP
) -> Path:
    """Writes the trainer's whole state to `path/step-N/` (N: trainer.steps) and points
    `path/latest` at it; returns that directory. `extra` (anything torch.save can pickle, the
    same on every rank, e.g. a data loader's state_dict()) is kept from rank 0. `keep`: how many
    step directories to keep, the newest first (None keeps all). A collective."""
    trainer.check_open()
    root = Path(path)
    step = int(trainer.state_dict()["step"])
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    what = f"checkpoint save to {final}"

    error, state = None, None
    try:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise Error(
                f"{what}: keep must be a positive number of checkpoints or None, got {keep!r}"
            )
        state = contents.state_to_save(trainer, extra)
        if trainer.rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            files.remove(tmp)  # an earlier save of this step that stopped midway
            tmp.mkdir()
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    steps = _agree(trainer, error, what, step)
    if len(set(steps)) > 1:
        raise Error(
            f"{what}: the ranks are at different steps ({steps}); every rank saves together"
        )

    writer = checksums.SummingWriter(tmp)
    metadata = _dcp(
        trainer,
        lambda: dcp.save(state, storage_writer=writer, process_group=trainer.group),
        lambda failure: f"{what} failed, {files.latest_says(root)}: {failure}",
    )
    written = _agree(trainer, None, what, writer.written)  # each file is written by one rank

    error = None
    if trainer.rank == 0:
        try:
            _check_files(tmp, metadata, shared_hint=True)
            meta = _meta(trainer, step, {k: v for w in written for k, v in w.items()})
            text = json.dumps(checksums.seal(meta), indent=1) + "\n"
            files.write_atomically(tmp / META, text)
            files.publish(root, tmp, final)
        except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
            error = Error(f"{what} failed, {files.latest_says(root)}: {e}")
        else:
            files.prune(root, keep, final)
    _agree(trainer, error, what)
    return final


def _meta(trainer: Any, step: int, written: dict[str, Any]) -> dict[str, Any]:
    return dict(
        format=FORMAT,
        step=step,
        trainer=trainer.state_dict(),
        model=contents.model_fields(trainer),
        layers_per_stage=[int(n) for n in trainer.layers_per_stage],
        world_size=int(trainer.world_size),
        optimizer=type(contents.saved_optimizer(trainer)).__qualname__,
        parallel=dataclasses.asdict(trainer.layout.parallel),
        torch=torch.__version__,
        saved_at=time.time(),
        files=written,
    )


# --- loading ---


def load(trainer: Any, path: str | os.PathLike) -> Any:
    """Restores what save() wrote: weights, optimizer state, the step, RNG states (when the
    world size is the one that saved), and returns the saved `extra`. `path` is a directory
    holding `latest`, or a step directory. The checkpoint may come from another layer split or
    number of stages of the same model. Every file is checked against the checksums the save
    recorded before any tensor is read: a checkpoint refused leaves the trainer as it was. A
    collective; on an error every rank raises (a failure while tensors are being read, after
    the checks passed, may leave this trainer's weights partly loaded)."""
    trainer.check_open()
    root = Path(path)
    return _read(trainer, *_open(trainer, lambda: files.resolve(root), root))


def resume(trainer: Any, path: str | os.PathLike) -> tuple[Path, Any] | None:
    """Loads the newest checkpoint under `path` that passes load()'s checks: the one `latest`
    names, and when that one is refused (damaged, incomplete, unreadable) the other step
    directories, the newest first, each refusal logged as a warning on the `infinipipe`
    logger. Returns (the directory loaded, its `extra`), or None when `path` holds no
    checkpoint (a fresh start); an Error naming every refusal when none passes. A collective."""
    trainer.check_open()
    root = Path(path)
    refusals = []
    for directory in files.candidates(root):
        try:
            opened = _open(trainer, lambda d=directory: d, directory)
        except (LostRankError, RankFailedError, _C.runtime.PeerError):
            raise  # a rank is gone: not this checkpoint's fault
        except Error as e:
            _log.warning("checkpoint: %s; trying an earlier one", e)
            refusals.append(str(e))
            continue
        return directory, _read(trainer, *opened)
    if refusals:
        raise Error(f"no checkpoint under {root} could be loaded: " + "; ".join(refusals))
    return None


def _open(trainer: Any, find: Callable[[], Path], shown: Path) -> tuple[Path, dict[str, Any], Any]:
    """The step directory `find` names, its infinipipe.json and DCP's load template for this
    trainer, once every rank found every file whole (the same directory on every rank)."""
    what = f"checkpoint load from {shown}"
    error, directory, meta, template = None, None, None, None
    try:
        directory = find()
        meta = _read_meta(directory)
        _check_fits(trainer, meta, directory)
        _check_checksums(trainer, meta, directory)
        metadata = _read_metadata(directory)
        _check_files(directory, metadata)
        template = contents.load_template(trainer, metadata, meta, directory)
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    names = _agree(trainer, error, what, None if directory is None else directory.name)
    if len(set(names)) > 1:
        raise Error(f"{what}: the ranks found different checkpoints there ({names})")
    return directory, meta, template


def _read(trainer: Any, directory: Path, meta: dict[str, Any], template: Any) -> Any:
    what = f"checkpoint load from {directory}"
    _dcp(
        trainer,
        lambda: dcp.load(
            template, storage_reader=dcp.FileSystemReader(directory), process_group=trainer.group
        ),
        lambda failure: f"{what}: {directory} could not be read (corrupt or incomplete): {failure}",
    )

    error, extra = None, None
    try:
        extra = contents.apply_loaded(trainer, template, meta, directory)
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    _agree(trainer, error, what)
    return extra


def _check_checksums(trainer: Any, meta: dict[str, Any], directory: Path) -> None:
    """Every file the save wrote, whole: each rank reads its share of them (checksums.share)."""
    expected = meta.get("files")
    if expected is None:  # format 1
        _log.warning(
            "checkpoint %s was saved without checksums (format 1): its files are not checked",
            directory,
        )
        return
    names = checksums.share(expected, int(trainer.rank), int(trainer.world_size))
    checksums.check(directory, expected, names)


def _read_meta(directory: Path) -> dict[str, Any]:
    file = directory / META
    try:
        meta = json.loads(file.read_text())
    except FileNotFoundError:
        raise Error(
            f"checkpoint {directory} is incomplete: it has no {META}; {checksums.ADVICE}"
        ) from None
    except (OSError, ValueError) as e:
        raise Error(
            f"checkpoint file {file} is unreadable (truncated or corrupt): {e}; {checksums.ADVICE}"
        ) from None
    needed = ("format", "step", "model", "layers_per_stage", "world_size", "optimizer")
    missing = [k for k in needed if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise Error(
            f"checkpoint file {file} is corrupt: it lacks {', '.join(missing)}; {checksums.ADVICE}"
        )
    if meta["format"] not in (1, FORMAT):
        raise Error(
            f"checkpoint {directory} has format {meta['format']!r}; this InfiniPipe reads "
            f"formats 1 and {FORMAT}"
        )
    if meta["format"] >= 2:
        checksums.check_seal(meta, file)
    return meta


def _check_fits(trainer: Any, meta: dict[str, Any], directory: Path) -> None:
    """Every difference of model shape, dtype or optimizer class, named; other layer splits
    and world sizes are fine."""
    mine, theirs = contents.model_fields(trainer), meta["model"]
    different = [
        f"{k} {theirs.get(k, '(none)')} (the trainer's: {v})"
        for k, v in mine.items()
        if theirs.get(k) != v
    ]
    different += [f"{k} {v} (the trainer has none)" for k, v in theirs.items() if k not in mine]
    optimizer = type(contents.saved_optimizer(trainer)).__qualname__
    if meta["optimizer"] != optimizer:
        different.append(f"optimizer {meta['optimizer']} (the trainer's: {optimizer})")
    if different:
        raise Error(f"checkpoint {directory} does not fit this trainer: " + ", ".join(different))


def _read_metadata(directory: Path) -> Any:
    file = directory / ".metadata"
    if not file.exists():
        raise Error(f"checkpoint {directory} is incomplete: it has no DCP metadata ({file.name})")
    try:
        return dcp.FileSystemReader(directory).read_metadata()
    except Exception as e:  # noqa: BLE001 - whatever unpickling a damaged file raises
        raise Error(
            f"checkpoint file {file} is unreadable (truncated or corrupt): {type(e).__name__}: {e}"
        ) from None


def _check_files(directory: Path, metadata: Any, shared_hint: bool = False) -> None:
    """Every data file the metadata refers to exists and is long enough (a missing or truncated
    file is named before any rank reads a tensor)."""
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = int(info.offset) + int(info.length)
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    hint = (
        ": the checkpoint directory must be on a filesystem every rank sees" if shared_hint else ""
    )
    advice = "" if shared_hint else f"; {checksums.ADVICE}"
    for relative, size in sorted(needed.items()):
        file = directory / relative
        try:
            have = file.stat().st_size
        except FileNotFoundError:
            raise Error(
                f"checkpoint {directory} is incomplete: {file} is missing{hint or advice}"
            ) from None
        if have < size:
            raise Error(
                f"checkpoint file {file} is truncated: {have} bytes, its index needs {size}{advice}"
            )


# --- shared parts ---


def _agree(trainer: Any, error: Exception | None, what: str, mine: Any = None) -> list[Any]:
    """One all-gather through the executor (C++, so that no Python-owned tensor is left with
    Gloo: agreement.py): every rank learns whether any rank failed, and every rank's `mine`
    (JSON). A rank that failed raises its own error; the others raise one naming it."""
    text = None if error is None else f"{type(error).__name__}: {error}"
    with trainer.failures.peers_named():
        everyone = [
            json.loads(b) for b in trainer.stage.executor.all_gather_text(json.dumps([text, mine]))
        ]
    if error is not None:
        raise error if isinstance(error, Error) else Error(f"{what}: {text}") from error
    failed = [(r, e[0]) for r, e in enumerate(everyone) if e[0] is not None]
    if failed:
        raise Error(f"{what}: " + "; ".join(f"rank {r} failed: {m}" for r, m in failed))
    return [e[1] for e in everyone]


def _dcp(trainer: Any, call: Callable[[], Any], message: Callable[[str], str]) -> Any:
    """Runs a DCP save or load; its failure becomes an Error. DCP reports a failure of any rank
    on every rank (CheckpointException); then one more collective through the executor follows
    before the error is raised, as after every success (_agree): DCP's own collectives leave
    Python-owned tensors with Gloo, which aborted about 1 exit in 25 when the last collective of
    a process was DCP's (docs/runtime.md, "Checkpoints")."""
    try:
        return call()
    except CheckpointException as e:
        failure = Error(message(_describe_failure(e)))
        cause = _cause(e)
        _agree(trainer, None, "checkpoint")
    except Exception as e:  # the backend's own failure (a lost peer): no further collective
        failure, cause = Error(message(_describe_failure(e))), e
    raise failure from cause


def _describe_failure(e: BaseException) -> str:
    """A DCP failure in one line a rank: CheckpointException carries every rank's exception."""
    if isinstance(e, CheckpointException):
        parts = []
        for rank, (exc, _) in sorted(e.failures.items()):
            parts.append(f"rank {rank}: {type(exc).__name__}: {exc}".splitlines()[0])
        return "; ".join(parts)
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _cause(e: BaseException) -> BaseException | None:
    if isinstance(e, CheckpointException) and e.failures:
        return next(iter(e.failures.values()))[0]
    return e
