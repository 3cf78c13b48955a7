"""Building one rank's HFStage: from a save_pretrained directory (materialising only the
stage's own weights) or from a transformers model in memory (deep copies of its pieces).

From a directory: the config is read, the whole model is built on the meta device (no memory),
the stage's modules are kept, given storage on the device (`to_empty`) and filled with their
tensors read one by one from the safetensors files (`safe_open`, through the index of a
sharded checkpoint). The rotary module is built anew on the device (its tables are computed,
not stored).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch

from ...errors import Error
from ..llama import even_layer_split
from ..stage_protocol import StageFactory
from . import files
from .stage import HFStage
from .support import (
    check_class,
    check_supported,
    config_of,
    default_dtype,
    load_config,
    model_shape,
)


def stage_layers(num_layers: int, layers_per_stage: int | Sequence[int]) -> list[range]:
    """Global layers of every stage: layers_per_stage is a list of counts or a stage count
    (split as the planner does)."""
    if isinstance(layers_per_stage, int):
        layers_per_stage = even_layer_split(num_layers, layers_per_stage)
    counts = [int(n) for n in layers_per_stage]
    if not counts or any(n <= 0 for n in counts) or sum(counts) != num_layers:
        raise Error(f"layers per stage {counts} must be positive and sum to {num_layers}")
    return [range(sum(counts[:i]), sum(counts[: i + 1])) for i in range(len(counts))]


def _layers_of(config: Any, layers_per_stage: int | Sequence[int], stage_index: int) -> list[range]:
    ranges = stage_layers(config.num_hidden_layers, layers_per_stage)
    if not 0 <= stage_index < len(ranges):
        raise Error(f"stage {stage_index} out of range for {len(ranges)} stages")
    return ranges


def default_device() -> torch.device:
    """The Trainer's (rendezvous.local_device): this rank's GPU, LOCAL_RANK modulo the GPUs
    (ranks sharing them: RuntimeConfig.share_gpus), when CUDA is available, else the CPU."""
    if torch.cuda.is_available():
        return torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        )
    return torch.device("cpu")


def _pieces(
    model: Any, ranges: list[range], stage_index: int, spread_head: bool = False
) -> dict[str, Any]:
    """The modules of the stage's share of a transformers CausalLM (not copied); spread_head:
    the final norm and the LM head on every stage (docs/design.md, "Spread head")."""
    inner, first, last = model.model, stage_index == 0, stage_index == len(ranges) - 1
    if spread_head and getattr(model.config, "tie_word_embeddings", False):
        raise Error(
            "spread_head with tie_word_embeddings is not supported: the LM head replicas "
            "would each be the first stage's embedding; untie them or leave spread_head off"
        )
    head = last or spread_head
    return dict(
        config=model.config,
        layers=[inner.layers[i] for i in ranges[stage_index]],
        embed_tokens=inner.embed_tokens if first else None,
        norm=inner.norm if head else None,
        lm_head=model.lm_head if head else None,
    )


def _modules(pieces: dict[str, Any]) -> list[torch.nn.Module]:
    extra = [pieces["embed_tokens"], pieces["norm"], pieces["lm_head"]]
    return pieces["layers"] + [m for m in extra if m is not None]


def from_model(
    model: torch.nn.Module,
    layers_per_stage: int | Sequence[int],
    stage_index: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    spread_head: bool = False,
) -> HFStage:
    """Stage `stage_index` of an in-memory transformers model: deep copies of its pieces (one
    copy of the config shared by them), so the model itself is left as it was. dtype None:
    the model's. spread_head: with a replica of the final norm and the LM head."""
    check_supported(model.config, type(model).__name__)
    ranges = _layers_of(model.config, layers_per_stage, stage_index)
    dtype = dtype or default_dtype(model)
    device = torch.device(device) if device is not None else default_device()
    pieces = copy.deepcopy(
        dict(_pieces(model, ranges, stage_index, spread_head), rotary=model.model.rotary_emb)
    )
    rotary = pieces.pop("rotary").to(device)  # its tables keep transformers' precision
    for module in _modules(pieces):
        module.to(device=device, dtype=dtype)
    return HFStage(
        class_name=type(model).__name__,
        stage_index=stage_index,
        num_stages=len(ranges),
        layer_range=ranges[stage_index],
        rotary_emb=rotary,
        **pieces,
    )


def from_pretrained(
    directory: str | os.PathLike,
    layers_per_stage: int | Sequence[int],
    stage_index: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    spread_head: bool = False,
) -> HFStage:
    """Stage `stage_index` of the model saved in `directory` (save_pretrained, safetensors),
    holding only the stage's weights in memory (spread_head: and the head's replica)."""
    from transformers import AutoModelForCausalLM

    config = load_config(directory)
    check_supported(config)
    ranges = _layers_of(config, layers_per_stage, stage_index)
    device = torch.device(device) if device is not None else default_device()
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    check_class(type(skeleton).__name__)
    pieces = _pieces(skeleton, ranges, stage_index, spread_head)
    for module in _modules(pieces):
        module.to(dtype=dtype).to_empty(device=device)
    stage = HFStage(
        class_name=type(skeleton).__name__,
        stage_index=stage_index,
        num_stages=len(ranges),
        layer_range=ranges[stage_index],
        rotary_emb=type(skeleton.model.rotary_emb)(config=skeleton.config).to(device),
        **pieces,
    )
    load_stage_weights(stage, directory)
    return stage


@torch.no_grad()
def load_stage_weights(stage: HFStage, directory: str | os.PathLike) -> list[str]:
    """Fills every tensor of the stage's state_dict from the directory's safetensors files (a
    tied LM head from the embedding when the files leave it out); returns the names read."""
    available = files.weight_map(directory)
    state = stage.state_dict(keep_vars=True)
    unfilled = [
        name
        for name, _ in stage.named_buffers()
        if name not in state and not name.startswith("model.rotary_emb.")
    ]
    if unfilled:
        raise Error(f"stage buffers {unfilled} are neither stored nor computed: cannot load them")
    source = {}
    for name in state:
        if name not in available and name == "lm_head.weight" and stage.tied:
            source[name] = "model.embed_tokens.weight"
        else:
            source[name] = name
    missing = sorted(name for name, key in source.items() if key not in available)
    if missing:
        raise Error(
            f"{directory} lacks {len(missing)} weights of stage {stage.stage_index}: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    wanted = {key: [] for key in source.values()}
    for name, key in source.items():
        wanted[key].append(name)
    for key, tensor in files.read_tensors(available, wanted):
        for name in wanted[key]:
            if tuple(state[name].shape) != tuple(tensor.shape):
                raise Error(
                    f"{directory}: {key} has shape {tuple(tensor.shape)}, stage "
                    f"{stage.stage_index}'s {name} {tuple(state[name].shape)}"
                )
            state[name].copy_(tensor)
    return sorted(source.values())


def build_stage(
    source: Any,
    layers_per_stage: int | Sequence[int],
    stage_index: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    spread_head: bool = False,
) -> HFStage:
    """Stage `stage_index` of a transformers model in memory or a save_pretrained directory
    (spread_head: with a replica of the final norm and the LM head, Trainer(spread_head=True))."""
    dtype = dtype or default_dtype(source)
    build = from_pretrained if isinstance(source, (str, os.PathLike)) else from_model
    return build(
        source, layers_per_stage, stage_index, dtype=dtype, device=device, spread_head=spread_head
    )


def stage_factory(
    source: Any,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    spread_head: bool = False,
) -> StageFactory:
    """The Trainer's model: a StageFactory whose build(stage_index, layers_per_stage) returns an
    HFStage and whose config is the model's shape for the planner (support.model_shape).
    source: a save_pretrained directory (dtype default float32) or a transformers model
    (dtype default its own). Checks the model is supported now, before any stage is built.
    spread_head: every stage with the head's replica (for PlanConfig(spread_head=True))."""
    config, name = config_of(source)
    check_supported(config, name)

    def build(stage_index: int, layers_per_stage: list[int]) -> HFStage:
        return build_stage(
            source,
            layers_per_stage,
            stage_index,
            dtype=dtype,
            device=device,
            spread_head=spread_head,
        )

    return StageFactory(build, model_shape(source, dtype=dtype))
