"""What a checkpoint holds of a trainer (checkpoint.py): its stage's weights, master weights,
optimizer state and parameter-group settings keyed by global parameter name, its RNG states and
the caller's `extra`; and handing a loaded state back to the trainer."""

from __future__ import annotations

import dataclasses
import io
import logging
import random
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

from ..distributed.gradient_group import local_optimizer
from ..errors import Error

_log = logging.getLogger("infinipipe")


def state_to_save(trainer: Any, extra: Any) -> dict[str, Any]:
    """This rank's flat state dict for DCP: tensors, and other values (pickled by DCP)."""
    rank = trainer.rank
    state: dict[str, Any] = {}
    for name, value in _module_state(trainer).items():
        state[f"model/{name}"] = value
    state.update(_masters(trainer))
    names = _optimizer_names(trainer)
    saved = saved_optimizer(trainer).state_dict()
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


def model_fields(trainer: Any) -> dict[str, Any]:
    """The model shape and dtype as JSON values (dtypes as their names)."""
    fields = dataclasses.asdict(trainer.config)
    fields["dtype"] = str(trainer.config.dtype)
    return {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in fields.items()}


def load_template(trainer: Any, metadata: Any, meta: dict[str, Any], directory: Path) -> dict:
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


def apply_loaded(
    trainer: Any, loaded: dict[str, Any], meta: dict[str, Any], directory: Path
) -> Any:
    """Hands what DCP read to the stage, the optimizer, the RNGs and the trainer."""
    module = trainer.module
    weights = {k[len("model/") :]: v for k, v in loaded.items() if k.startswith("model/")}
    module.load_state_dict(weights)  # in place already for modules whose state_dict aliases
    masters = _masters(trainer)
    if masters and not all(k in loaded for k in masters):
        trainer.stage.master.refresh_from_model()  # saved without masters: from the weights
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
    optimizer = saved_optimizer(trainer)
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

    trainer.load_state_dict(meta.get("trainer", {"step": int(meta["step"])}))  # format 1: step
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
    master = trainer.stage.master
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
    master = trainer.stage.master
    for name, p in trainer.module.named_parameters():
        by_id.setdefault(id(p), name)
        by_storage.setdefault(_storage_key(p), name)
        if master is not None and master.master_of(p) is not None:
            by_id.setdefault(id(master.master_of(p)), name)
    names, index = {}, 0
    for group in saved_optimizer(trainer).param_groups:
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


def saved_optimizer(trainer: Any) -> torch.optim.Optimizer:
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


def _pickled(value: Any) -> bytes:
    """An opaque value for DCP (which would otherwise walk into dicts and lists)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _unpickled(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)
