"""The Ulysses all-to-all measured on the process group it runs on, for the cost model.

The cost model charges an all-to-all among d_s ranks, each holding X bytes, as the X (d_s - 1)/d_s
bytes it sends over the sequence group's link: sent / bandwidth + latency (cost_model_parallel.cc;
docs/planning.md, "Parallel layout"). Its built-in "cpu" link is Gloo send/recv between two local
processes, not an all-to-all. Here every rank of a sequence group runs the executor's exchange
(c10d `all_to_all_single`, equal splits, as runtime/sequence_parallel.cc calls it; here through
torch.distributed.all_to_all_single, which calls it) at message sizes from 4 KiB to 4 MiB per
rank, each a few times after a small all-to-all that lines the ranks up, and fits the bandwidth
and latency to the median times (_C.plan.fit_link: non-negative relative least squares, as the
layer's fit). The time is the wall time of one rank's call, from its start to its completion.

It is a collective: every rank of the group calls `measure` with the same sizes and repeats.
Every wait is bounded by `timeout_s`, and a backend failure or timeout becomes a
CollectiveFailure, which the trainer turns into the error naming the lost rank, as it does for
the gradient group's collectives (distributed/gradient_group.py).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .. import _C
from ..distributed.gradient_group import CollectiveFailure, guarded
from ..errors import Error

# Bytes each rank holds (X), 4 KiB to 4 MiB: the tiny LLaMA's q of a 128..2048-token chunk over
# two ranks is 64 KiB..1 MiB (float32, hidden 256), and the fit needs sizes where the latency
# dominates as well as where the bandwidth does.
SIZES = tuple(4096 * 4**i for i in range(6))
REPEATS = 11
WARMUP = 2  # untimed calls per size (the first allocates Gloo's buffers)
# Part of the cache key of a profile holding it: a change of what is measured here must not
# reuse a cache of the old measurement.
VERSION = 1


def _exchange(out: torch.Tensor, data: torch.Tensor, group: Any, timeout_s: float) -> None:
    def call() -> None:
        work = dist.all_to_all_single(out, data, group=group, async_op=True)
        work.wait(datetime.timedelta(seconds=timeout_s))

    try:
        guarded("the profile's all-to-all", call)
    except CollectiveFailure as e:
        e.args = ("the profile's all-to-all did not finish: a rank of the sequence group is lost",)
        raise


def measure(
    group: Any,
    timeout_s: float,
    sizes: Sequence[int] = SIZES,
    repeats: int = REPEATS,
) -> dict:
    """Times the all-to-all over `group` (every rank of it calls this, alike) and fits it.

    Returns {"ranks", "fit" (a _C.plan.LinkFit), "runs" (time_runs')}."""
    runs = time_runs(group, timeout_s, sizes, repeats)
    return dict(ranks=dist.get_world_size(group), fit=fit(runs), runs=runs)


def time_runs(
    group: Any,
    timeout_s: float,
    sizes: Sequence[int] = SIZES,
    repeats: int = REPEATS,
    dtype: torch.dtype = torch.float32,
) -> list[dict]:
    """[{"bytes" (held per rank), "sent_bytes", "seconds" (each repeat's)}] per size, in order;
    a collective over `group`, as measure."""
    ranks = dist.get_world_size(group)
    element = torch.empty((), dtype=dtype).element_size()
    sync = torch.zeros(ranks, dtype=dtype)
    sync_out = torch.empty_like(sync)
    runs = []
    for size in sizes:
        elements = max(1, size // element // ranks) * ranks  # equal parts along dim 0
        data = torch.ones(elements, dtype=dtype)
        out = torch.empty_like(data)
        seconds = []
        for i in range(WARMUP + repeats):
            _exchange(sync_out, sync, group, timeout_s)
            started = time.perf_counter()
            _exchange(out, data, group, timeout_s)
            if i >= WARMUP:
                seconds.append(time.perf_counter() - started)
        held = elements * element
        runs.append(dict(bytes=held, sent_bytes=held * (ranks - 1) / ranks, seconds=seconds))
    return runs


def fit(runs: Sequence[dict], statistic: str = "median") -> Any:
    """_C.plan.LinkFit of the runs, each size's repeats reduced by `statistic`."""
    return _C.plan.fit_link(
        [(r["sent_bytes"], _C.plan.robust_time(r["seconds"], statistic)) for r in runs]
    )


def describe(measured: dict) -> str:
    """'all-to-all over 2 ranks: 1.23 GB/s, 45 us' (bandwidth per rank, decimal GB)."""
    f = measured["fit"]
    return (
        f"all-to-all over {measured['ranks']} ranks: {f.bandwidth / 1e9:.3g} GB/s, "
        f"{f.latency_s * 1e6:.3g} us"
    )


def with_link(cost_json_text: str, measured: dict) -> str:
    """The cost JSON with its in-node all-to-all link set to the measured fit."""
    cost = _C.plan.CostModel.from_json(cost_json_text)
    return _C.plan.apply_alltoall_link(cost, measured["fit"]).to_json()


def measure_under_launcher(sequence: int, timeout_s: float) -> tuple[int, dict]:
    """For `python -m infinipipe profile --sequence N` under torchrun: joins the default group
    (Gloo), makes the sequence groups of N consecutive ranks (SP innermost, as the trainer's
    layout), measures over this rank's; returns (this rank, what measure returns)."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise Error(
            f"--sequence {sequence}: the all-to-all needs its {sequence} processes; launch "
            f"under torchrun (torchrun --nproc_per_node={sequence} -m infinipipe profile ...)"
        )
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % sequence:
        raise Error(f"--sequence {sequence} does not divide the {world} processes launched")
    mine = None
    for first in range(0, world, sequence):  # every rank makes every group, in one order
        group = dist.new_group(
            list(range(first, first + sequence)), timeout=datetime.timedelta(seconds=timeout_s)
        )
        if first <= rank < first + sequence:
            mine = group
    try:
        return rank, measure(mine, timeout_s)
    finally:
        # Nothing else runs on these groups: tear them down now (a Gloo group left to the
        # interpreter's exit can abort the process after a successful run).
        dist.destroy_process_group()
