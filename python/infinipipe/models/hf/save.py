"""Saving trained stages as a directory `AutoModelForCausalLM.from_pretrained` loads.

Each stage's tensors go to one safetensors shard under transformers' names
(`model-0000{i+1}-of-0000{n}.safetensors`; `model.safetensors` for a single stage), with
`model.safetensors.index.json` and `config.json` next to them. A tied LM head is left out, as
transformers leaves it out (it ties it to the embedding on loading).

- `save_pretrained(stages, directory)`: every stage in one process.
- `save_stage(stage, directory)`: on each rank, a collective over files (the directory must
  be on a filesystem every rank sees): each rank writes its own shard; stage 0 waits for all
  shards, checks that together they hold exactly the model's tensors, writes the config and
  then the index; every rank returns once the index is there. The directory must not hold an
  earlier save (each rank refuses to overwrite its shard; stage 0 its config and index): a
  rank cannot tell an earlier save's shards from this one's.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ...errors import Error
from . import files
from .stage import HFStage


def _expected_names(stage: HFStage) -> set[str]:
    """The names save_pretrained of the whole model writes (built on the meta device)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(stage.config)
    names = set(model.state_dict())
    if stage.tied:
        names.discard("lm_head.weight")
    return names


def _write_config(stage: HFStage, directory: Path) -> None:
    config = copy.deepcopy(stage.config)
    config.architectures = [stage.class_name]
    config.dtype = next(stage.parameters()).dtype
    config.save_pretrained(str(directory))


def _finish(stage: HFStage, directory: Path, shards: list[str]) -> None:
    """Stage 0's part: every shard holds its own names, together exactly the model's."""
    written: set[str] = set()
    for shard in shards:
        written.update(files.shard_contents(directory / shard)[0])
    expected = _expected_names(stage)
    if written != expected:
        lacking, extra = sorted(expected - written), sorted(written - expected)
        raise Error(
            f"the shards in {directory} do not hold the model {stage.class_name}: lacking "
            f"{lacking[:5]}, unexpected {extra[:5]}"
        )
    _write_config(stage, directory)
    if len(shards) > 1:
        files.write_index(directory, shards)


def _refuse_overwrite(path: Path) -> None:
    if path.exists():
        raise Error(f"{path} exists: save into a new directory (it would mix two saves)")


def save_pretrained(stages: Sequence[HFStage], directory: str | os.PathLike) -> Path:
    """Writes all stages of one model (in stage order) as a transformers directory."""
    stages = sorted(stages, key=lambda s: s.stage_index)
    count = stages[0].num_stages if stages else 0
    if [s.stage_index for s in stages] != list(range(count)):
        raise Error(f"save_pretrained needs every stage 0..{count - 1} once")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    shards = [files.shard_name(s.stage_index, count) for s in stages]
    for stage, shard in zip(stages, shards):
        _refuse_overwrite(directory / shard)
        files.write_shard(directory / shard, stage.hf_state_dict())
    _finish(stages[0], directory, shards)
    return directory


def _wait_for(paths: list[Path], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [p.name for p in paths if not p.exists()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise Error(f"{what}: after {timeout_s:.0f} s, {', '.join(missing)} missing")
        time.sleep(0.05)


def save_stage(stage: HFStage, directory: str | os.PathLike, timeout_s: float = 300.0) -> Path:
    """The collective save: every rank calls it with its own stage (see the module's notes)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    count = stage.num_stages
    shards = [files.shard_name(i, count) for i in range(count)]
    mine = directory / shards[stage.stage_index]
    _refuse_overwrite(mine)
    done = directory / (files.INDEX if count > 1 else "config.json")
    if stage.stage_index == 0:
        for name in {"config.json", files.INDEX}:
            _refuse_overwrite(directory / name)
    files.write_shard(mine, stage.hf_state_dict())
    if stage.stage_index == 0:
        _wait_for([directory / s for s in shards], timeout_s, f"saving to {directory}")
        _finish(stage, directory, shards)
    else:
        _wait_for([done], timeout_s, f"saving to {directory}: stage 0 did not finish")
    return directory
