"""Profile one decoder layer on this machine and calibrate the cost model (the measurement; the
command, `python -m infinipipe profile`, is cli.py, whose docstring tells its options).

Times the forward and backward of one layer of the model with the runtime's profiler
(_C.runtime.profile_layer: at every (tokens, context) of the grid, a chunk holding one slice,
run through the executor's chunk attention and K/V buffers), and the embedding and the head with
its loss per token; fits a1, a2, b, a3, the backward ratio and the per-token times with the C++ fit
(_C.plan.calibrate) and reports its error on grid points held out of the fit; measures the bytes
a layer keeps for its backward per token with saved-tensor hooks on the same path. The other
coefficients (p2p, memory terms other than activation_bytes) keep their analytic values. With
neighbours, other processes do the same layer work while the layer is timed, as the other
pipeline ranks do when they share this machine's cores, caches and memory bandwidth.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from .. import _C
from ..models import cpp, llama
from ..models.stage_protocol import LlamaStageAdapter
from ..planning.cost_model import model_shape_json

STAGES = ("python", "cpp")
# What a profile measures, in profiled_cost's cache key: a cost JSON profiled before the forward
# without autograd was timed has no checkpointed_forward_ratio, nor one before the recompute was
# timed its net r, nor one before recorded forwards were timed with others in flight (IN_FLIGHT)
# their time in a pipeline, and a trainer must not reuse it.
MEASURES = "forward, backward, forward without autograd, recompute; embedding, head; in flight"
STATISTICS = ("min", "median", "trimmed_mean")
DTYPES = ("float32", "bfloat16", "float64")
# Recorded forwards held before the oldest one's backward (runtime/layer_profiler.h, in_flight).
IN_FLIGHT = _C.runtime.profile_layer_in_flight
# Query lengths where the CPU attention changes its tiling, a1 fitted per regime between them
# (runtime/layer_profiler.h, attention_query_cuts): the profile runs on the CPU.
ATTENTION_QUERY_CUTS = list(_C.runtime.cpu_attention_query_cuts)


def grid_points(grid: str) -> tuple[list[tuple[int, int]], int, int]:
    """The grid's (tokens, context) points, its repeats and its min_timed_tokens: sizes under
    it are timed more often (cost/profile_grid.h, timed_runs)."""
    points, repeats, min_timed_tokens = _C.plan.profile_grid(grid)
    return [tuple(p) for p in points], repeats, min_timed_tokens


def attention_query_cuts(device: torch.device) -> list[int]:
    """Query lengths where a1 changes regime: the CPU kernel's tiling; none for CUDA's kernels."""
    return ATTENTION_QUERY_CUTS if torch.device(device).type == "cpu" else []


def hardware_of(device: torch.device | str) -> str:
    """The built-in hardware whose analytic terms (links, memory, the parts not profiled) a
    profile on `device` keeps: the h100's for any GPU (the GPU's name goes with the profile)."""
    return "cpu" if torch.device(device).type == "cpu" else "h100"


def device_model(device: torch.device | str) -> str:
    """The model of the processor a profile on `device` ran on: the CPU's or the GPU's."""
    device = torch.device(device)
    return cpu_model() if device.type == "cpu" else torch.cuda.get_device_name(device)


def profiled_module(
    config: llama.LlamaConfig, stage: str, device: torch.device | str = "cpu"
) -> Any:
    """Two layers (the second gives the per-layer activation bytes) with the embedding and the
    head, as the executor takes it: the Python stage through its adapter, or the C++ stage."""
    layers = min(2, config.layers)
    if stage == "python":
        return LlamaStageAdapter(
            llama.LlamaStage(config, 0, layers, True, True, seed=0, device=device)
        )
    if stage == "cpp":
        return cpp.stage(config, 0, layers, True, True, seed=0, device=device)
    raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")


def _profile_layer(
    module: Any,
    config: llama.LlamaConfig,
    points: Sequence[tuple[int, int]],
    repeats: int,
    device: torch.device | str = "cpu",
    **options: Any,
) -> dict:
    """_C.runtime.profile_layer on `device` for the config's shape; options: seed,
    thread_cpu_time, progress, in_flight, min_timed_tokens."""
    return _C.runtime.profile_layer(
        module,
        [tuple(p) for p in points],
        repeats,
        warmup=1,
        dtype=config.dtype,
        device=torch.device(device),
        hidden=config.hidden,
        kv_heads=config.kv_heads,
        head_dim=config.head_dim,
        vocab=config.vocab,
        **options,
    )


def time_runs(
    module: Any,
    config: llama.LlamaConfig,
    points: Sequence[tuple[int, int]],
    repeats: int,
    *,
    seed: int = 0,
    cpu_time: bool = False,
    progress: bool = True,
    in_flight: int = IN_FLIGHT,
    after_each: Callable[[], None] | None = None,
    device: torch.device | str = "cpu",
    min_timed_tokens: int = 0,
) -> dict:
    """The raw runs of _C.runtime.profile_layer, with a progress bar; `after_each` is called
    after every run (warm-ups included), outside the timed part; sizes under min_timed_tokens
    are timed more often (cost/profile_grid.h, timed_runs)."""
    with tqdm(desc="profile", unit="run", disable=not progress) as bar:

        def update(done: int, total: int) -> None:
            if after_each is not None:
                after_each()
            bar.total = total
            bar.update(done - bar.n)

        return _profile_layer(
            module,
            config,
            points,
            repeats,
            device,
            seed=seed,
            thread_cpu_time=cpu_time,
            progress=update if progress or after_each is not None else None,
            in_flight=in_flight,
            min_timed_tokens=min_timed_tokens,
        )


def fit(
    runs: dict,
    statistic: str = "median",
    holdout: float = 0.25,
    seed: int = 0,
    attention_query_cuts: Sequence[int] | None = None,
) -> Any:
    """_C.plan.Calibration of the runs, each point's repeats reduced by `statistic`; a1 by the
    query regimes of `attention_query_cuts` (default ATTENTION_QUERY_CUTS; [] for one a1)."""

    def t(x):
        return _C.plan.robust_time(x, statistic)

    def sample(r: dict) -> tuple:
        # Runs recorded before the profiler timed the forward without autograd have no such key
        # (their calibration keeps r = 1), nor, before it timed the recompute, recomputed_s
        # (r is then the forward without autograd alone; cost/calibration.h).
        optional = []
        for key in ("checkpointed_forward_s", "recomputed_s"):
            if not r.get(key):
                break
            optional.append(t(r[key]))
        return (r["tokens"], r["context"], t(r["forward_s"]), t(r["backward_s"]), *optional)

    layer = [sample(r) for r in runs["layer"]]
    embedding = [(r["tokens"], t(r["seconds"])) for r in runs["embedding"]]
    head = [(r["tokens"], t(r["seconds"])) for r in runs["head"]]
    return _C.plan.calibrate(
        layer,
        embedding,
        head,
        holdout_fraction=holdout,
        seed=seed,
        attention_query_cuts=ATTENTION_QUERY_CUTS
        if attention_query_cuts is None
        else list(attention_query_cuts),
    )


def layer_saved_bytes(
    module: Any,
    config: llama.LlamaConfig,
    tokens: int,
    context: int,
    device: torch.device | str = "cpu",
) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of one layer on a chunk of
    one slice (tokens at context), on the executor's path: a C++ ChunkContext with K/V buffers for
    a split slice. With two layers it is the second
    layer's share, which leaves out the per-chunk rotary tables (the cost model counts them once
    per chunk) and includes the layer's input (its RMSNorm keeps it). Parameters excluded; a
    storage the lean layer frees until the backward counts as what it holds then: nothing."""
    n = min(2, int(module.num_layers))
    kv = []
    if context:
        kv = [
            [
                _C.kernels.SequenceKV(
                    context + tokens,
                    config.kv_heads,
                    config.head_dim,
                    config.dtype,
                    torch.device(device),
                )
            ]
            if i < n
            else [None]
            for i in range(int(module.num_layers))
        ]
    ctx = _C.runtime.ChunkContext([(0, context, context + tokens)], kv)
    exclude = {p.untyped_storage().data_ptr() for p in module.parameters()}
    # storage -> (layer that saved it first, the storage): its bytes are read once the forward
    # is done, as the lean layer frees some (layers.Refill) until the backward.
    first_layer: dict[int, tuple[int, torch.UntypedStorage]] = {}
    current = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        # Keyed by the storage itself: a freed storage's address may be reused by the next one.
        key = storage._cdata
        if storage.data_ptr() not in exclude and key not in first_layer and storage.nbytes():
            first_layer[key] = (current, storage)
        return t

    hidden = torch.randn(
        tokens, config.hidden, dtype=config.dtype, device=device, requires_grad=True
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for current in range(n):
            hidden = module.layer(current, hidden, ctx)
    return sum(s.nbytes() for layer, s in first_layer.values() if layer == n - 1)


def activation_bytes(
    module: Any,
    config: llama.LlamaConfig,
    tokens: Sequence[int],
    context: int,
    device: torch.device | str = "cpu",
) -> tuple[float, float]:
    """(bytes per token, bytes per slice): a line through layer_saved_bytes over token counts."""
    saved = [layer_saved_bytes(module, config, s, context, device) for s in tokens]
    slope, intercept = np.polyfit(np.asarray(tokens, float), np.asarray(saved, float), 1)
    return float(slope), float(intercept)


def cost_json(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    calibration: Any,
    activation_bytes_per_token: float | None = None,
    hardware: str = "cpu",
) -> dict:
    """The analytic cost model of the shape and split with the calibrated coefficients."""
    base = _C.plan.CostModel.analytic(
        model_shape_json(config, config.dtype), hardware, list(layers_per_stage)
    )
    cost = json.loads(_C.plan.apply_calibration(base, calibration).to_json())
    if activation_bytes_per_token is not None:
        cost["coefficients"]["activation_bytes"] = activation_bytes_per_token
    return cost


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile(
    config: llama.LlamaConfig,
    grid: str = "full",
    stage: str = "python",
    *,
    repeats: int | None = None,
    statistic: str = "median",
    holdout: float = 0.25,
    seed: int = 0,
    cpu_time: bool = False,
    progress: bool = True,
    neighbour_count: int = 0,
    in_flight: int = IN_FLIGHT,
    neighbours_in_step: bool = False,
    device: torch.device | str = "cpu",
) -> dict:
    """Times (beside neighbour_count processes doing the same work; with neighbours_in_step,
    each run beside the same run: neighbours.InStep), fits and measures; returns everything the CLI
    writes (see main)."""
    points, grid_repeats, min_timed_tokens = grid_points(grid)
    module = profiled_module(config, stage, device)
    repeats = repeats or grid_repeats
    in_step = (
        (repeats, min_timed_tokens, seed) if neighbours_in_step and neighbour_count > 0 else None
    )
    from .neighbours import neighbours  # which runs this module's layer work in other processes

    with neighbours(
        neighbour_count, config, stage, points, torch.get_num_threads(), in_flight, in_step
    ) as barrier:
        runs = time_runs(
            module,
            config,
            points,
            repeats,
            seed=seed,
            cpu_time=cpu_time,
            progress=progress,
            in_flight=in_flight,
            after_each=barrier,
            device=device,
            min_timed_tokens=min_timed_tokens,
        )
    cuts = attention_query_cuts(device)
    fits = {s: fit(runs, s, holdout, seed, cuts) for s in STATISTICS}
    tokens = sorted({s for s, _ in points})
    whole, whole_fixed = activation_bytes(module, config, tokens, 0, device)
    split, split_fixed = activation_bytes(module, config, tokens, max(c for _, c in points), device)
    return dict(
        calibration=fits[statistic],
        # A slice of a split sequence saves what a whole sequence does (its own k, v; the K/V
        # buffer is counted apart): the larger of the two, should they differ.
        activation_bytes=max(whole, split),
        activation_bytes_detail=dict(
            whole_per_token=whole,
            whole_per_slice=whole_fixed,
            split_per_token=split,
            split_per_slice=split_fixed,
        ),
        statistics={
            s: {k: v for k, v in json.loads(c.to_json()).items() if k.endswith(("_median", "_max"))}
            for s, c in fits.items()
        },
        runs=runs,
        repeats=repeats,
        min_timed_tokens=min_timed_tokens,
    )
