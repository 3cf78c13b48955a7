"""The safetensors files of a save_pretrained directory: which file holds which tensor, reading
only the tensors a stage needs, and writing shards and their index as transformers does."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from ...errors import Error

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
_BYTES.update({"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1})


def weight_map(directory: str | os.PathLike) -> dict[str, Path]:
    """Tensor name -> the file holding it: the index's weight_map, else model.safetensors."""
    directory = Path(directory)
    if (directory / INDEX).is_file():
        with open(directory / INDEX) as f:
            index = json.load(f)
        return {name: directory / file for name, file in index["weight_map"].items()}
    if (directory / SINGLE).is_file():
        from safetensors import safe_open

        with safe_open(directory / SINGLE, framework="pt", device="cpu") as f:
            return {name: directory / SINGLE for name in f.keys()}
    raise Error(f"{directory} holds neither {INDEX} nor {SINGLE}: no safetensors weights")


def read_tensors(
    files: Mapping[str, Path], names: Iterable[str]
) -> Iterable[tuple[str, torch.Tensor]]:
    """(name, tensor) of each of `names`, opening each file once and reading only those."""
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for path, wanted in by_file.items():
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in wanted:
                yield name, f.get_tensor(name)


def shard_name(stage_index: int, num_stages: int) -> str:
    if num_stages == 1:
        return SINGLE
    return f"model-{stage_index + 1:05d}-of-{num_stages:05d}.safetensors"


def write_shard(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Writes the tensors (contiguous, on the CPU) to a temporary name, then renames it into
    place: a reader never sees half a shard."""
    from safetensors.torch import save_file

    data = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(data, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)


def shard_contents(path: Path) -> tuple[list[str], int]:
    """(tensor names, bytes of tensor data) of a written shard, from its header only."""
    from safetensors import safe_open

    with safe_open(path, framework="pt", device="cpu") as f:
        names = list(f.keys())
        size = 0
        for name in names:
            view = f.get_slice(name)
            count = 1
            for n in view.get_shape():
                count *= n
            size += count * _BYTES[view.get_dtype()]
    return names, size


def write_index(directory: Path, shards: list[str]) -> None:
    """model.safetensors.index.json over the written shards (renamed into place last)."""
    weight_map, total = {}, 0
    for shard in shards:
        names, size = shard_contents(directory / shard)
        total += size
        for name in names:
            if name in weight_map:
                raise Error(f"{name} is in both {weight_map[name]} and {shard} of {directory}")
            weight_map[name] = shard
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    tmp = directory / f".{INDEX}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(index, f, indent=2)
    os.replace(tmp, directory / INDEX)
