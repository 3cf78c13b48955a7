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
  layout and step, written by rank 0 and read before anything else on load.

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

import contextlib
import dataclasses
import io
import json
import logging
import os
import random
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

from . import _C
from .errors import Error
from .stage_group import local_optimizer

_log = logging.getLogger("infinipipe")

FORMAT = 1  # of infinipipe.json and the key layout
META = "infinipipe.json"  # the trainer's side of a checkpoint (rank 0 writes it)
LATEST = "latest"  # the pointer file: the name of the newest complete step directory
DEFAULT_KEEP = 2  # step directories kept by save(): the newest and the one before
_STEP = re.compile(r"step-(\d+)")
_LEFTOVERS = (".tmp-step-", ".old-step-", ".del-step-")  # of saves that stopped midway

# --- saving ---


def save(
    trainer: Any, path: str | os.PathLike, extra: Any = None, *, keep: int | None = DEFAULT_KEEP
) -> Path:
    """Writes the trainer's whole state to `path/step-N/` (N: trainer.steps) and points
    `path/latest` at it; returns that directory. `extra` (anything torch.save can pickle, the
    same on every rank, e.g. a data loader's state_dict()) is kept from rank 0. `keep`: how many
    step directories to keep, the newest first (None keeps all). A collective."""
    root = Path(path)
    step = int(trainer._steps)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    what = f"checkpoint save to {final}"

    error, state = None, None
    try:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise Error(
                f"{what}: keep must be a positive number of checkpoints or None, got {keep!r}"
            )
        state = _state_to_save(trainer, extra)
        if trainer.rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            _remove(tmp)  # an earlier save of this step that stopped midway
            tmp.mkdir()
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    steps = _agree(trainer, error, what, step)
    if len(set(steps)) > 1:
        raise Error(
            f"{what}: the ranks are at different steps ({steps}); every rank saves together"
        )

    metadata = _dcp(
        trainer,
        lambda: dcp.save(
            state, storage_writer=dcp.FileSystemWriter(tmp), process_group=trainer.group
        ),
        lambda failure: f"{what} failed, {_latest_says(root)}: {failure}",
    )

    error = None
    if trainer.rank == 0:
        try:
            _check_files(tmp, metadata, shared_hint=True)
            _write_atomically(tmp / META, json.dumps(_meta(trainer, step), indent=1) + "\n")
            _publish(root, tmp, final)
        except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
            error = Error(f"{what} failed, {_latest_says(root)}: {e}")
        else:
            _prune(root, keep, final)
    _agree(trainer, error, what)
    return final


def _state_to_save(trainer: Any, extra: Any) -> dict[str, Any]:
    """This rank's flat state dict for DCP: tensors, and other values (pickled by DCP)."""
    rank = trainer.rank
    state: dict[str, Any] = {}
    for name, value in _module_state(trainer).items():
        state[f"model/{name}"] = value
    state.update(_masters(trainer))
    names = _optimizer_names(trainer)
    saved = _optimizer(trainer).state_dict()
    for index, values in saved["state"].items():
        for key, value in values.items():
            state[f"optim/state/{names[index]}/{key}"] = value
    groups = [
        dict({k: v for k, v in g.items() if k != "params"}, params=[names[i] for i in g["params"]])
        for g in saved["param_groups"]
    ]
    state[f"optim/groups/rank{rank}"] = _pickled(groups)
    state[f"rng/rank{rank}/cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for device, value in enumerate(torch.cuda.get_rng_state_all()):
            state[f"rng/rank{rank}/cuda{device}"] = value
    state[f"rng/rank{rank}/python"] = _pickled(random.getstate())
    if rank == 0:
        state["extra"] = _pickled(extra)
    return state


def _meta(trainer: Any, step: int) -> dict[str, Any]:
    return dict(
        format=FORMAT,
        step=step,
        model=_model_fields(trainer),
        layers_per_stage=[int(n) for n in trainer.layers_per_stage],
        world_size=int(trainer.world_size),
        optimizer=type(_optimizer(trainer)).__qualname__,
        parallel=dataclasses.asdict(trainer.layout.parallel),
        torch=torch.__version__,
        saved_at=time.time(),
    )


def _model_fields(trainer: Any) -> dict[str, Any]:
    """The model shape and dtype as JSON values (dtypes as their names)."""
    fields = dataclasses.asdict(trainer.config)
    fields["dtype"] = str(trainer.dtype)
    return {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in fields.items()}


def _publish(root: Path, tmp: Path, final: Path) -> None:
    """Renames the complete `tmp` to `final` and points `latest` at it. A checkpoint of the same
    step already there is moved aside first and removed last; if the process dies between the
    two renames, load() finds it under its `.old-` name."""
    old = None
    if final.exists():
        old = root / f".old-{final.name}"
        _remove(old)
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_directory(root)
    _write_atomically(root / LATEST, final.name + "\n")
    if old is not None:
        _remove(old)


def _prune(root: Path, keep: int | None, current: Path) -> None:
    """Removes the step directories beyond the `keep` newest (by the time they were saved),
    and what saves that stopped midway left. A failure here only warns: the save is done."""
    try:
        for leftover in root.iterdir():
            if leftover.name.startswith(_LEFTOVERS):
                _remove(leftover)
        if keep is None:
            return
        others = []
        for d in root.iterdir():
            if d != current and _STEP.fullmatch(d.name) and (d / META).is_file():
                others.append((_saved_at(d), d))
        for _, d in sorted(others, reverse=True)[keep - 1 :]:
            doomed = root / f".del-{d.name}"
            os.rename(d, doomed)  # never a half-removed step directory
            _remove(doomed)
    except OSError as e:
        _log.warning("checkpoint: could not remove old checkpoints in %s: %s", root, e)


def _saved_at(directory: Path) -> tuple[float, int]:
    try:
        saved_at = float(json.loads((directory / META).read_text())["saved_at"])
    except (OSError, ValueError, KeyError, TypeError):
        saved_at = 0.0
    match = _STEP.fullmatch(directory.name)
    return saved_at, int(match.group(1)) if match else -1


# --- loading ---


def load(trainer: Any, path: str | os.PathLike) -> Any:
    """Restores what save() wrote: weights, optimizer state, the step, RNG states (when the
    world size is the one that saved), and returns the saved `extra`. `path` is a directory
    holding `latest`, or a step directory. The checkpoint may come from another layer split or
    number of stages of the same model. A collective; on an error every rank raises (a failure
    while tensors are being read may leave this trainer's weights partly loaded)."""
    root = Path(path)
    what = f"checkpoint load from {root}"
    error, directory, meta, template = None, None, None, None
    try:
        directory = _resolve(root)
        meta = _read_meta(directory)
        _check_fits(trainer, meta, directory)
        metadata = _read_metadata(directory)
        _check_files(directory, metadata)
        template = _template(trainer, metadata, meta, directory)
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    names = _agree(trainer, error, what, None if directory is None else directory.name)
    if len(set(names)) > 1:
        raise Error(f"{what}: the ranks found different checkpoints there ({names})")

    _dcp(
        trainer,
        lambda: dcp.load(
            template, storage_reader=dcp.FileSystemReader(directory), process_group=trainer.group
        ),
        lambda failure: f"{what}: {directory} could not be read (corrupt or incomplete): {failure}",
    )

    error, extra = None, None
    try:
        extra = _apply(trainer, template, meta, directory)
    except Exception as e:  # noqa: BLE001 - raised on every rank by _agree
        error = e
    _agree(trainer, error, what)
    return extra


def _resolve(root: Path) -> Path:
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


def _read_meta(directory: Path) -> dict[str, Any]:
    file = directory / META
    try:
        meta = json.loads(file.read_text())
    except FileNotFoundError:
        raise Error(f"checkpoint {directory} is incomplete: it has no {META}") from None
    except (OSError, ValueError) as e:
        raise Error(f"checkpoint file {file} is unreadable (truncated or corrupt): {e}") from None
    needed = ("format", "step", "model", "layers_per_stage", "world_size", "optimizer")
    missing = [k for k in needed if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise Error(f"checkpoint file {file} is corrupt: it lacks {', '.join(missing)}")
    if meta["format"] != FORMAT:
        raise Error(
            f"checkpoint {directory} has format {meta['format']!r}; this InfiniPipe reads "
            f"format {FORMAT}"
        )
    return meta


def _check_fits(trainer: Any, meta: dict[str, Any], directory: Path) -> None:
    """Every difference of model shape, dtype or optimizer class, named; other layer splits
    and world sizes are fine."""
    mine, theirs = _model_fields(trainer), meta["model"]
    different = [
        f"{k} {theirs.get(k, '(none)')} (the trainer's: {v})"
        for k, v in mine.items()
        if theirs.get(k) != v
    ]
    different += [f"{k} {v} (the trainer has none)" for k, v in theirs.items() if k not in mine]
    optimizer = type(_optimizer(trainer)).__qualname__
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
    for relative, size in sorted(needed.items()):
        file = directory / relative
        try:
            have = file.stat().st_size
        except FileNotFoundError:
            raise Error(f"checkpoint {directory} is incomplete: {file} is missing{hint}") from None
        if have < size:
            raise Error(
                f"checkpoint file {file} is truncated: {have} bytes, its index needs {size}"
            )


def _template(trainer: Any, metadata: Any, meta: dict[str, Any], directory: Path) -> dict:
    """What this rank reads: its stage's tensors in place, its parameters' optimizer state, every
    rank's parameter-group settings, its RNG states (same world size only) and `extra`."""
    stored = metadata.state_dict_metadata
    template: dict[str, Any] = {}
    for name, value in _module_state(trainer).items():
        key = f"model/{name}"
        if key not in stored:
            raise Error(
                f"checkpoint {directory} has no weight {name!r} (rank {trainer.rank}'s stage "
                "has it): it was saved from another model"
            )
        md = stored[key]
        if isinstance(value, torch.Tensor) and isinstance(md, TensorStorageMetadata):
            if tuple(md.size) != tuple(value.shape) or md.properties.dtype != value.dtype:
                raise Error(
                    f"checkpoint {directory} holds {name} as {md.properties.dtype} "
                    f"{list(md.size)}, the trainer's is {value.dtype} {list(value.shape)}"
                )
        template[key] = value
    template.update({k: v for k, v in _masters(trainer).items() if k in stored})
    for name in _optimizer_names(trainer).values():
        prefix = f"optim/state/{name}/"
        for key, md in stored.items():
            if key.startswith(prefix):
                template[key] = _placeholder(md)
    groups = [k for k in stored if k.startswith("optim/groups/")]
    if not groups:
        raise Error(f"checkpoint {directory} is incomplete: it has no optimizer settings")
    template.update({k: None for k in groups})
    if int(meta["world_size"]) == int(trainer.world_size):
        prefix = f"rng/rank{trainer.rank}/"
        template.update({k: _placeholder(md) for k, md in stored.items() if k.startswith(prefix)})
    if "extra" not in stored:
        raise Error(f"checkpoint {directory} is incomplete: it has no `extra`")
    template["extra"] = None
    return template


def _placeholder(md: Any) -> Any:
    """Where DCP puts a stored value: a tensor of its shape and dtype, or None for an object."""
    if isinstance(md, BytesStorageMetadata):
        return None
    return torch.empty(tuple(md.size), dtype=md.properties.dtype)


def _apply(trainer: Any, loaded: dict[str, Any], meta: dict[str, Any], directory: Path) -> Any:
    """Hands what DCP read to the stage, the optimizer, the RNGs and the trainer."""
    module = trainer.module
    weights = {k[len("model/") :]: v for k, v in loaded.items() if k.startswith("model/")}
    module.load_state_dict(weights)  # in place already for modules whose state_dict aliases
    masters = _masters(trainer)
    if masters and not all(k in loaded for k in masters):
        trainer.master.refresh_from_model()  # saved without masters: from the weights
    with torch.no_grad():
        for key, m in masters.items():
            if key in loaded and loaded[key] is not m:
                m.copy_(loaded[key])

    names = _optimizer_names(trainer)
    settings: dict[str, dict] = {}  # parameter name -> its group's settings when saved
    for key, value in loaded.items():
        if key.startswith("optim/groups/"):
            for group in _unpickled(value):
                hyper = {k: v for k, v in group.items() if k != "params"}
                settings.update({name: hyper for name in group["params"]})
    state: dict[int, dict] = {}
    for index, name in names.items():
        prefix = f"optim/state/{name}/"
        values = {k[len(prefix) :]: v for k, v in loaded.items() if k.startswith(prefix)}
        if values:
            state[index] = values
    param_groups, index = [], 0
    optimizer = _optimizer(trainer)
    for number, group in enumerate(optimizer.param_groups):
        indices = list(range(index, index + len(group["params"])))
        index += len(indices)
        hypers = []
        for i in indices:
            if names[i] not in settings:
                raise Error(
                    f"checkpoint {directory} has no optimizer settings for {names[i]!r}: it was "
                    "saved from another model or optimizer"
                )
            hypers.append(settings[names[i]])
        if any(not _same(h, hypers[0]) for h in hypers[1:]):
            raise Error(
                f"checkpoint {directory}: the optimizer's parameter group {number} holds "
                "parameters whose saved groups had different settings; build the parameter "
                "groups the way the run that saved it did"
            )
        param_groups.append(dict(hypers[0] if hypers else {}, params=indices))
    optimizer.load_state_dict({"state": state, "param_groups": param_groups})
    if optimizer is not trainer.optimizer:  # ZeRO: its groups' settings are the ones it steps
        for mine, local in zip(trainer.optimizer.param_groups, optimizer.param_groups):
            mine.update({k: v for k, v in local.items() if k != "params"})

    trainer._steps = int(meta["step"])
    _restore_rng(trainer, loaded, meta)
    return _unpickled(loaded["extra"])


def _restore_rng(trainer: Any, loaded: dict[str, Any], meta: dict[str, Any]) -> None:
    if int(meta["world_size"]) != int(trainer.world_size):
        _log.warning(
            "checkpoint: saved by %d ranks, loaded by %d: the RNG states are not restored "
            "(each rank keeps its own)",
            meta["world_size"],
            trainer.world_size,
        )
        return
    prefix = f"rng/rank{trainer.rank}/"
    cuda = {}
    for key, value in loaded.items():
        if not key.startswith(prefix):
            continue
        kind = key[len(prefix) :]
        if kind == "cpu":
            torch.set_rng_state(value)
        elif kind == "python":
            random.setstate(_unpickled(value))
        elif kind.startswith("cuda"):
            cuda[int(kind[len("cuda") :])] = value
    if cuda and torch.cuda.is_available():
        for device, value in cuda.items():
            if device < torch.cuda.device_count():
                torch.cuda.set_rng_state(value, device)


# --- shared parts ---


def _module_state(trainer: Any) -> dict[str, Any]:
    """The stage's state_dict (global names); a clear error for a stage that has none."""
    module = trainer.module
    missing = [
        m
        for m in ("state_dict", "load_state_dict", "named_parameters")
        if not callable(getattr(module, m, None))
    ]
    if missing:
        raise Error(
            f"checkpoint: rank {trainer.rank}'s stage ({type(module).__name__}) has no "
            f"{', '.join(m + '()' for m in missing)}: a checkpoint keys weights and optimizer "
            "state by parameter name; give the stage those methods (an nn.Module has them)"
        )
    return dict(module.state_dict())


def _masters(trainer: Any) -> dict[str, torch.Tensor]:
    """The fp32 master weights of a mixed-precision trainer as `master/<name>` (read in place on
    load); none without them."""
    master = getattr(trainer, "master", None)
    if master is None:
        return {}
    found = {}
    for name, p in trainer.module.named_parameters():
        m = master.master_of(p)
        if m is not None:
            found.setdefault(f"master/{name}", m)
    return found


def _optimizer_names(trainer: Any) -> dict[int, str]:
    """The name of each optimizer parameter (a stage parameter or its master weight), by its
    index in optimizer.state_dict()."""
    by_id, by_storage = {}, {}
    master = getattr(trainer, "master", None)
    for name, p in trainer.module.named_parameters():
        by_id.setdefault(id(p), name)
        by_storage.setdefault(_storage_key(p), name)
        if master is not None and master.master_of(p) is not None:
            by_id.setdefault(id(master.master_of(p)), name)
    names, index = {}, 0
    for group in _optimizer(trainer).param_groups:
        for p in group["params"]:
            name = by_id.get(id(p)) or by_storage.get(_storage_key(p))
            if name is None:
                raise Error(
                    f"checkpoint: rank {trainer.rank}'s optimizer holds a parameter (number "
                    f"{index}, shape {list(p.shape)}) that is not one of its stage's named "
                    "parameters, so its state cannot be keyed by name"
                )
            names[index] = name
            index += 1
    return names


def _optimizer(trainer: Any) -> torch.optim.Optimizer:
    """The optimizer whose state this rank holds: with ZeRO, its shard's (the parameters it
    owns in its stage's gradient group), so every parameter's state is saved once, by its owner,
    and a load reads each rank's by name whatever the layout that saved it."""
    return local_optimizer(trainer.optimizer)


def _storage_key(p: torch.Tensor) -> tuple:
    return (p.device, p.data_ptr(), tuple(p.shape), p.dtype)


def _same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (
                isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and torch.equal(x, y)
            ):
                return False
        elif x != y:
            return False
    return True


def _agree(trainer: Any, error: Exception | None, what: str, mine: Any = None) -> list[Any]:
    """One all-gather through the executor (C++, so that no Python-owned tensor is left with
    Gloo: agreement.py): every rank learns whether any rank failed, and every rank's `mine`
    (JSON). A rank that failed raises its own error; the others raise one naming it."""
    text = None if error is None else f"{type(error).__name__}: {error}"
    try:
        everyone = [
            json.loads(b) for b in trainer.executor.all_gather_text(json.dumps([text, mine]))
        ]
    except _C.runtime.PeerError as e:
        lost = getattr(trainer, "_lost_peer", None)
        raise (lost(e) if lost is not None else e) from None
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


def _latest_says(root: Path) -> str:
    pointer = root / LATEST
    try:
        return f"{pointer} still names {pointer.read_text().strip()}"
    except OSError:
        return f"no {pointer} was written"


def _pickled(value: Any) -> bytes:
    """An opaque value for DCP (which would otherwise walk into dicts and lists)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _unpickled(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def _write_atomically(file: Path, text: str) -> None:
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


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
