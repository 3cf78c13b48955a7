"""`python -m infinipipe profile`: profile one decoder layer on this machine (layer_profile.py) and
write a calibrated cost model.

    PYTHONPATH=python python -m infinipipe profile --grid full --output cost.json

Writes the cost JSON that PlanConfig(cost_model=...) and infinipipe-plan --model load (what
is measured and fitted: profile.py), and next to it a .meta.json with the raw runs, the errors
and where they were measured.

--neighbours N runs N other processes doing the same layer work while the layer is timed, as the
other pipeline ranks do when they share this machine's cores, caches and memory bandwidth (a CPU
pipeline of N+1 ranks on one host): a layer runs slower beside them than alone. With
--neighbours-in-step they make the profiler's own runs in its order, in step with it, so that each
point is timed beside the same point rather than beside wherever the neighbour's grid loop is.

--sequence N (under torchrun, N or a multiple of N processes) also times the Ulysses all-to-all
over each group of N consecutive ranks with Gloo (alltoall.py) and writes its fitted
bandwidth and latency into the cost JSON as the in-node all-to-all link; every process profiles
the layer beside the others, and rank 0 writes the files:

    torchrun --nproc_per_node=2 -m infinipipe profile --sequence 2 --grid training

--refit META fits the runs an earlier profile kept in its .meta.json again, with this version's
fit (the context term a3 was added after benchmarks/results/cost_cpu.json was measured), and
writes the cost JSON and its .meta.json as that profile would have, keeping its measurement's
details (date, machine, grid, neighbours, activation bytes) and noting the refit:

    python -m infinipipe profile --layers-per-stage 4,4 \
        --refit benchmarks/results/cost_cpu.meta.json --output benchmarks/results/cost_cpu.json

--device cuda profiles on this machine's first GPU (wall clock, each run between two CUDA
synchronizations; one a1 for CUDA's attention kernels, with no CPU tiling regimes) and writes
the cost model over the built-in h100 hardware's analytic terms, naming the GPU in the
.meta.json; the "gpu" grid goes from 256 to 16K tokens at contexts up to 96K:

    python -m infinipipe profile --device cuda --dtype bfloat16 --grid gpu \
        --vocab 32000 --hidden 4096 --layers 32 --heads 32 --kv-heads 32 --ffn 11008 \
        --layers-per-stage 4,4,4,4,4,4,4,4 --output cost_gpu_llama7b.json

--stage python (default) profiles the Python LlamaStage the Python trainer runs, through the
same adapter the executor drives; --stage cpp the C++ LlamaStage (build/infinipipe-profile does
the same without Python).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .. import _C
from ..models import llama
from . import alltoall
from .layer_profile import (
    DTYPES,
    IN_FLIGHT,
    STAGES,
    STATISTICS,
    attention_query_cuts,
    cost_json,
    cpu_model,
    fit,
    hardware_of,
    profile,
)


def pct(v: float) -> str:
    return "n/a" if v != v else f"{v:.1%}"


def print_fit(cal: Any, activation_bytes_per_token: float) -> None:
    """The fitted coefficients and their held-out errors, as the CLI prints them."""
    c = json.loads(cal.to_json())
    print(
        f"forward a1={c['a1']:.4g} a2={c['a2']:.4g} b={c['b']:.4g} a3={c['a3']:.4g}; backward "
        f"a1={c['backward_a1']:.4g} a2={c['backward_a2']:.4g} b={c['backward_b']:.4g} "
        f"a3={c['backward_a3']:.4g}; g={c['backward_ratio']:.3f} "
        f"r={c['checkpointed_forward_ratio'] or 1:.3f} "
        f"embedding={c['embedding_s_per_token']:.3g} s/token head={c['head_s_per_token']:.3g} "
        f"s/token activation_bytes/token/layer={activation_bytes_per_token:.0f}"
    )
    if c.get("attention_query_cuts"):

        def by_query(values: list) -> str:
            return " ".join(f"{v:.4g}" for v in values)

        print(
            f"a1 by query tokens (regimes from {c['attention_query_cuts']}): forward "
            f"{by_query(c['a1_by_query'])}; backward {by_query(c['backward_a1_by_query'])}"
        )
    print(
        f"held-out forward error: median {pct(cal.forward_median_error)}, max "
        f"{pct(cal.forward_max_error)}; backward: median {pct(cal.backward_median_error)}, "
        f"max {pct(cal.backward_max_error)} ({len(cal.held_out)} of "
        f"{len(cal.held_out) + len(cal.fit)} points)"
    )


# What a refit keeps of the measured profile's .meta.json (the fit's own fields are new).
MEASUREMENT_FIELDS = (
    "date",
    "cpu",
    "device",
    "gpu",
    "threads",
    "torch",
    "stage",
    "grid",
    "repeats",
    "dtype",
    "neighbours",
    "in_flight",
    "statistic",
    "clock",
)


def refit(args: argparse.Namespace, config: llama.LlamaConfig, split: list[int]) -> int:
    """--refit: the runs of an earlier profile fitted again, its cost JSON and meta rewritten."""
    measured = json.loads(args.refit.read_text())
    if "alltoall" in measured:
        raise SystemExit("profile --refit: an all-to-all profile's link is not refitted here")
    statistic = measured.get("statistic", args.statistic)
    runs = measured["runs"]
    device = measured.get("device", "cpu")
    fits = {
        s: fit(runs, s, args.holdout, args.seed, attention_query_cuts(device)) for s in STATISTICS
    }
    cal = fits[statistic]
    cost = cost_json(config, split, cal, measured["activation_bytes"], hardware_of(device))
    args.output.write_text(json.dumps(cost, indent=2))
    _C.plan.CostModel.load(str(args.output))  # fail here, not in the planner
    meta = {k: measured[k] for k in MEASUREMENT_FIELDS if k in measured}
    meta.update(
        refit=dict(
            date=datetime.datetime.now(datetime.UTC).isoformat(),
            of=str(args.refit),
            torch=torch.__version__,
            holdout=args.holdout,
            seed=args.seed,
        ),
        **json.loads(cal.to_json()),
        activation_bytes=measured["activation_bytes"],
        activation_bytes_detail=measured.get("activation_bytes_detail"),
        heldout_errors_by_statistic={
            s: {k: v for k, v in json.loads(c.to_json()).items() if k.endswith(("_median", "_max"))}
            for s, c in fits.items()
        },
        runs=runs,
    )
    meta_path = args.output.with_suffix(".meta.json")
    meta_path.write_text(json.dumps(meta, indent=2))
    print_fit(cal, measured["activation_bytes"])
    print(f"refitted {args.refit}; wrote {args.output} and {meta_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m infinipipe profile", description=__doc__.split("\n\n")[0]
    )
    tiny = llama.LlamaConfig.tiny()
    for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"):
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=getattr(tiny, name),
            help=f"model shape (default: the tiny model's {getattr(tiny, name)})",
        )
    p.add_argument(
        "--layers-per-stage",
        type=str,
        default=None,
        help="comma-separated layers per stage (default: two even stages)",
    )
    p.add_argument(
        "--stage",
        choices=STAGES,
        default="python",
        help="the Python LlamaStage (what the Python trainer runs) or the C++ one",
    )
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument(
        "--lean-layer",
        action="store_true",
        help="profile the lean layer (LlamaConfig.lean_layer: norms and SwiGLU keep less)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the layer runs (cuda: this machine's first GPU; wall clock)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (default 1: the trainer runs one per stage process)",
    )
    p.add_argument(
        "--neighbours",
        type=int,
        default=0,
        help="other processes doing the same work meanwhile (default 0: the layer alone; "
        "a CPU pipeline of N+1 ranks on this host: N)",
    )
    p.add_argument(
        "--neighbours-in-step",
        action="store_true",
        help="the neighbours make the profiler's own runs in its order, each process waiting "
        "for the others after every run, so that each point is timed beside the same point "
        "(as a pipeline's next stage runs the chunk this one just ran) rather than beside "
        "whatever point of the grid the neighbour is at",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        default=IN_FLIGHT,
        help=f"recorded forwards held before the oldest one's backward, as a pipeline stage "
        f"holds chunks in flight (default {IN_FLIGHT}; 0: each backward right after its forward)",
    )
    p.add_argument("--grid", choices=("quick", "training", "full", "gpu"), default="full")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per point")
    p.add_argument(
        "--statistic",
        choices=STATISTICS,
        default="median",
        help="one time per point from its runs (median: a layer's typical time, what "
        "a step sees; see runtime/layer_profiler.h)",
    )
    p.add_argument(
        "--clock",
        choices=("auto", "wall", "cpu"),
        default="auto",
        help="cpu: the thread's CPU time, which leaves out time other processes take "
        "the core (one thread only); auto: cpu with one thread, else wall",
    )
    p.add_argument("--holdout", type=float, default=0.25, help="fraction of points held out")
    p.add_argument("--seed", type=int, default=0, help="order of the runs, held-out points")
    p.add_argument(
        "--sequence",
        type=int,
        default=1,
        help="under torchrun: also time the all-to-all over groups of N consecutive ranks "
        "(Gloo) and write its fit into the cost JSON (default 1: no all-to-all)",
    )
    p.add_argument(
        "--timeout", type=float, default=300, help="seconds any wait of the all-to-all may take"
    )
    p.add_argument("--output", type=Path, default=Path("cost.json"))
    p.add_argument(
        "--refit",
        type=Path,
        help="fit the runs of an earlier profile's .meta.json again instead of measuring "
        "(the model shape and --layers-per-stage must be that profile's)",
    )
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(
            "--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)"
        )
    if args.device == "cuda" and args.clock == "cpu":
        p.error("--clock cpu times the CPU thread, not the GPU's kernels: use wall (or auto)")
    if args.device == "cuda" and args.neighbours:
        p.error("--neighbours shares a CPU's cores; a GPU profile runs alone: drop it")
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    cpu_time = args.device == "cpu" and (
        args.clock == "cpu" or (args.clock == "auto" and args.threads == 1)
    )
    config = llama.LlamaConfig(
        vocab=args.vocab,
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        ffn=args.ffn,
        dtype=getattr(torch, args.dtype),
        lean_layer=args.lean_layer,
    )
    if args.neighbours < 0:
        p.error(f"--neighbours must be 0 or more, got {args.neighbours}")
    if args.neighbours_in_step and args.neighbours == 0:
        p.error("--neighbours-in-step needs neighbours: add --neighbours N (N >= 1)")
    if args.in_flight < 0:
        p.error(f"--in-flight must be 0 or more, got {args.in_flight}")
    if args.sequence < 1:
        p.error(f"--sequence must be 1 or more, got {args.sequence}")
    if args.layers_per_stage:
        split = [int(x) for x in args.layers_per_stage.split(",")]
    else:
        split = llama.even_layer_split(config.layers, 2 if config.layers > 1 else 1)
    if args.refit is not None:
        return refit(args, config, split)
    rank, link = 0, None
    if args.sequence > 1:  # first, while the processes are in step
        try:
            rank, link = alltoall.measure_under_launcher(args.sequence, args.timeout)
        except _C.Error as e:
            p.error(str(e))
    result = profile(
        config,
        args.grid,
        args.stage,
        repeats=args.repeats,
        statistic=args.statistic,
        holdout=args.holdout,
        seed=args.seed,
        cpu_time=cpu_time,
        progress=not args.no_progress and rank == 0,
        neighbour_count=args.neighbours,
        in_flight=args.in_flight,
        neighbours_in_step=args.neighbours_in_step,
        device=device,
    )
    if rank != 0:
        return 0  # rank 0 writes what it measured
    cal = result["calibration"]
    cost = json.dumps(
        cost_json(config, split, cal, result["activation_bytes"], hardware_of(args.device))
    )
    if link is not None:
        cost = alltoall.with_link(cost, link)
    args.output.write_text(json.dumps(json.loads(cost), indent=2))
    _C.plan.CostModel.load(str(args.output))  # fail here, not in the planner

    meta = dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(),
        cpu=cpu_model(),
        device=args.device,
        gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        stage=args.stage,
        grid=args.grid,
        repeats=result["repeats"],
        min_timed_tokens=result["min_timed_tokens"],
        dtype=args.dtype,
        neighbours=args.neighbours,
        neighbours_in_step=args.neighbours_in_step,
        in_flight=args.in_flight,
        statistic=args.statistic,
        clock="thread_cpu" if cpu_time else "wall",
        **json.loads(cal.to_json()),
        activation_bytes=result["activation_bytes"],
        activation_bytes_detail=result["activation_bytes_detail"],
        heldout_errors_by_statistic=result["statistics"],
        runs=result["runs"],
    )
    if link is not None:
        meta["alltoall"] = dict(
            ranks=link["ranks"],
            processes=int(os.environ["WORLD_SIZE"]),
            **json.loads(link["fit"].to_json()),
            runs=link["runs"],
        )
    meta_path = args.output.with_suffix(".meta.json")
    meta_path.write_text(json.dumps(meta, indent=2))

    print_fit(cal, result["activation_bytes"])
    if link is not None:
        f = link["fit"]
        print(
            f"{alltoall.describe(link)} (fit error: median {pct(f.median_error)}, "
            f"max {pct(f.max_error)} over {len(link['runs'])} sizes)"
        )
    print(f"wrote {args.output} and {meta_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
