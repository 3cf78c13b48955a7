# Over 400 lines for a reason: one experiment, every method and peer stepped in turn on the same
# batches, with each peer's tuning; its peers are lib/, its page lib/measured_report.py.
"""Measured throughput and memory of EPP against its baselines and peers on this machine.

    torchrun --nproc_per_node=2 benchmarks/experiments/measured_comparison.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/measured.json

Two pipeline ranks (Gloo, CPU, one thread each), the tiny LLaMA, the same batches (lengths from
the Wikipedia distribution, synthetic tokens) and the same memory budget per stage (model
state included) for every method:

- EPP, planned per step with the calibrated cost model;
- batch-level 1F1B, Seq1F1B and fixed-size chunks (ChunkFlow), each at its best static setting:
  the one `infinipipe-plan` picks over these very steps with the same cost model and budget
  (least total predicted time, uniform recompute at what the worst step needs);
- torch.distributed.pipelining's Schedule1F1B on the same model, batches padded to the step's
  longest sequence (benchmarks/lib/torch_pipelining.py), at its fastest configuration
  (microbatch size, checkpointed layers) whose measured memory fits the budget;
- torch.distributed.pipelining on documents packed as torchtitan packs them (rows of a fixed
  length, document-causal attention; benchmarks/lib/torch_packed.py), at its fastest
  configuration (schedule, row length, checkpointed layers) whose measured memory fits;
- the unpipelined model on one process (rank 0), the reference for the total work.

With a parallel layout (--sequence N: Ulysses sequence-parallel ranks inside each stage;
--replicas N: data-parallel replicas of the pipeline; ZeRO-1 over each stage's gradient group),
launched on data x pipeline x sequence processes, e.g. pipeline 2 x SP 2:

    torchrun --nproc_per_node=4 benchmarks/experiments/measured_comparison.py --sequence 2 \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/measured_sp2.json

every same-executor method runs under that layout (infinipipe.Parallel), the plan tool chooses
the baselines' static settings with the same per-rank cost model the trainer plans with (--sp,
--dp, --zero, --gpus-per-node = the processes on this host) and the budget is per rank.
torch.distributed.pipelining has no sequence parallelism and is not run under a layout (nor with
replicas: its DDP-style replication is not built here); the unpipelined one-process model still
runs on rank 0, the reference for the work and for the first step's loss.

Methods run interleaved step by step (every method's step i, then step i + 1), so slow phases of
a noisy machine hit all of them alike. A step's time is the wall time of the whole training step
as a user sees it: planning, the ranks' agreement, execution and the optimizer. Memory is
measured in a second pass (the saved-tensor hooks cost time): activation peak per stage plus
the exact model state (weights, gradients, AdamW moments). Rank 0 writes the JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import results, training  # noqa: E402
from lib.peers import Unpipelined  # noqa: E402
from lib.plan_tool import BASELINES, run_tool  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.results import MIB, TOOL, model_state_bytes  # noqa: E402
from lib.torch_packed import SCHEDULES, TorchPacked  # noqa: E402
from lib.torch_pipelining import TorchPipelining  # noqa: E402

import infinipipe
from infinipipe.models.llama import LlamaConfig

# A baseline's static setting, as the trainer takes it from the plan tool's choice.
STATIC_KNOBS = ("k", "token_cap", "chunk_tokens", "uniform_recompute")
TORCH_OMITTED = (
    "not run under a layout: torch.distributed.pipelining has no sequence parallelism, and its "
    "replication over data-parallel replicas is not built here"
)
# torch.distributed.pipelining configurations tried for its fastest one that fits.
TORCH_CONFIGS = [(mb, ckpt) for mb in (1, 2, 4) for ckpt in (0, "all")]
# Row lengths of the packed peer: the context and smaller powers of two (fractions of it).
PACKED_ROW_FRACTIONS = (1, 2, 4, 8)
# The smoke run (CI's test command) walks the searches' code paths on fewer configurations: the
# padded peer's micro-batch of 1 without and with checkpointing (the first over the budget), the
# packed peer's one schedule per stage placement ("loop" and "v") on rows of an eighth and a
# quarter of the context.
SMOKE_TORCH_CONFIGS = [(1, 0), (1, "all")]
SMOKE_PACKED_SCHEDULES = ("1f1b", "zbv")
SMOKE_PACKED_ROW_FRACTIONS = (4, 8)
# Methods whose loss differs from the others' by design: the packed peer's cut documents lose
# the context before the cut.
OWN_LOSS = ("torch_packed", "torch_packed_context")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cost-model", required=True, help="calibrated cost JSON (infinipipe profile)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument(
        "--budget-mib",
        type=float,
        default=192,
        help="memory per stage (per rank under a layout), "
        "model state included; the default is below what the longest sequences need unsplit "
        "without checkpointing",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--sequence",
        type=int,
        default=1,
        help="Ulysses sequence-parallel ranks per stage (infinipipe.Parallel's sequence)",
    )
    p.add_argument(
        "--replicas", type=int, default=1, help="data-parallel replicas (Parallel's data)"
    )
    p.add_argument(
        "--zero",
        type=int,
        choices=(0, 1),
        default=1,
        help="ZeRO level over each stage's gradient group under a layout (Parallel's zero)",
    )
    p.add_argument("--tool", default=str(TOOL))
    p.add_argument(
        "--torch-config",
        help="MICROBATCH,CHECKPOINT (0 or all) for "
        "torch.distributed.pipelining instead of tuning it here (the tuning measures "
        "memory with hooks on the longest padded step: many minutes)",
    )
    p.add_argument(
        "--packed-config",
        help="SCHEDULE,ROW_LENGTH,CHECKPOINT (0 or all) for the packed peer instead of tuning it "
        f"here; schedules: {', '.join(SCHEDULES)}",
    )
    p.add_argument(
        "--packed-context-config",
        help="SCHEDULE,CHECKPOINT: also run the packed peer with rows of the whole context (the "
        "fewest cut documents), as a row of its own",
    )
    p.add_argument(
        "--packed-tried",
        type=Path,
        help="with --packed-config: a JSON list of the configurations an earlier run of this "
        "case tried (schedule, row_length, checkpoint, peak_bytes, fits, step0_s), kept in the "
        "output",
    )
    p.add_argument(
        "--skip-torch",
        action="store_true",
        help="leave out the padded torch.distributed.pipelining peer (its steps are the slowest)",
    )
    p.add_argument("--output", type=Path)
    p.add_argument(
        "--note", help="what differs in this run, kept in the output (report.py lists it)"
    )
    p.add_argument("--smoke", action="store_true", help="tiny case, one step (CI)")
    args = p.parse_args()
    if args.smoke:
        args.steps, args.batch, args.context, args.budget_mib = 1, 6, 1024, 48
    if args.sequence < 1 or args.replicas < 1:
        p.error("--sequence and --replicas must be at least 1")
    world = int(os.environ.get("WORLD_SIZE", 1))
    inner = args.sequence * args.replicas
    if world % inner or world // inner < 2:
        p.error(
            f"{world} processes do not make a pipeline of at least 2 stages with "
            f"--sequence {args.sequence} x --replicas {args.replicas}; launch "
            f"{2 * inner} (torchrun --nproc_per_node={2 * inner})"
        )
    args.parallel = infinipipe.Parallel(
        pipeline=world // inner, sequence=args.sequence, data=args.replicas, zero=args.zero
    )
    # The processes on this host: the trainer's per-rank cost model takes them as one node.
    args.gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return args


def has_layout(args) -> bool:
    """Whether the run is under a layout beyond one process per pipeline stage."""
    return args.sequence > 1 or args.replicas > 1


def layout_of(args) -> dict:
    p = args.parallel
    return dict(
        pipeline=p.pipeline,
        sequence=p.sequence,
        data=p.data,
        zero=p.zero,
        gpus_per_node=args.gpus_per_node,
        processes=p.pipeline * p.sequence * p.data,
    )


def static_settings(args) -> dict:
    """Per baseline, the static setting infinipipe-plan chooses over the run's steps."""
    command = [
        args.tool,
        "--model",
        args.cost_model,
        "--stages",
        str(args.parallel.pipeline),
        "--memory-gib",
        str(args.budget_mib / 1024),
        "--distribution",
        "wikipedia",
        "--batch",
        str(args.batch),
        "--context",
        str(args.context),
        "--seed",
        str(args.seed),
        "--steps",
        str(args.steps),
        "--method",
        "all",
        "--json",
    ]
    if has_layout(args):  # the per-rank cost model the trainer plans with (Trainer._per_rank)
        p = args.parallel
        command += ["--sp", str(p.sequence), "--dp", str(p.data), "--zero", str(p.zero)]
        command += ["--gpus-per-node", str(args.gpus_per_node)]
    rows = run_tool(command)
    chosen = {}
    for m in BASELINES:
        row = next(r for r in rows if r["method"] == m and r["static"])
        if not row["feasible"]:
            raise SystemExit(f"measured_comparison: no static {m} setting fits: {row['reason']}")
        chosen[m] = dict(
            row["setting"],
            predicted_total_s=sum(
                r["step_time_s"] for r in rows if r["method"] == m and r["static"]
            ),
        )
    return dict(settings=chosen, command=" ".join(["infinipipe-plan"] + command[1:]))


def trainer_for(method: str, setting: dict | None, args, config) -> infinipipe.Trainer:
    kw = dict(
        method=method, cost_model=args.cost_model, memory_budget_bytes=int(args.budget_mib * MIB)
    )
    if setting is not None:
        kw.update((key, setting[key]) for key in STATIC_KNOBS)
    return training.trainer(config, infinipipe.PlanConfig(**kw), parallel=args.parallel)


def trainer_state_bytes(trainer: infinipipe.Trainer) -> int:
    """This rank's model state: its weights and gradients, and the optimizer state it keeps
    (AdamW's two moments; under ZeRO-1 those of its shard only, as measured in the optimizer).
    Without sharding, four copies of every parameter: model_state_bytes."""
    optimizer = trainer.optimizer
    local = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's own shard
    if local is optimizer:
        return model_state_bytes(trainer.parameters)
    state = sum(
        t.numel() * t.element_size()
        for per_param in local.state.values()
        for t in per_param.values()
        if torch.is_tensor(t) and t.dim() > 0  # the moments, not the step counters
    )
    return 2 * sum(p.numel() * p.element_size() for p in trainer.parameters) + state


def timed(fn):
    dist.barrier()  # every method starts a step with all ranks ready
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


class InfiniPipeRunner:
    """A trainer of one method; steps return this rank's stats."""

    def __init__(self, trainer: infinipipe.Trainer) -> None:
        self.trainer = trainer

    def step(self, batch, measure_memory=False) -> dict:
        result = self.trainer.step(batch, measure_memory=measure_memory)
        out = dict(
            loss=result.loss,
            compute_s=result.stats["forward_s"] + result.stats["backward_s"],
            predicted_s=result.plan["predicted_step_s"],
            setting=result.plan["setting"],
            chunks=result.plan["chunks"],
            waves=result.plan["waves"],
            plan_ms=result.plan["plan_ms"],
        )
        if self.trainer.layout.parallel.sequence > 1:
            out["all_to_all_s"] = result.stats["all_to_all_s"]
            out["all_to_all_bytes"] = result.stats["all_to_all_bytes"]
        if measure_memory:
            state = trainer_state_bytes(self.trainer)
            out["memory_bytes"] = result.stats["measured_activation_bytes"] + state
            p = self.trainer.layout.parallel
            if p.sequence > 1 or p.data > 1:  # the peak's parts, and the plan's prediction
                out["activation_bytes"] = result.stats["measured_activation_bytes"]
                out["predicted_activation_bytes"] = result.stats["predicted_activation_bytes"]
                out["model_state_bytes"] = state
        return out


class TorchRunner:
    def __init__(self, pipe: TorchPipelining) -> None:
        self.pipe = pipe

    def step(self, batch, measure_memory=False) -> dict:
        out = self.pipe.step(batch, measure_memory=measure_memory)
        res = dict(loss=out["loss"], setup_s=out["setup_s"], padded_tokens=out["padded_tokens"])
        if "cut_tokens" in out:
            res["cut_tokens"] = out["cut_tokens"]
        if measure_memory:
            res["memory_bytes"] = out["peak_activation_bytes"] + model_state_bytes(
                self.pipe.parameters()
            )
        return res


def torch_pipe(config, microbatch_size, checkpoint) -> TorchPipelining:
    """torch.distributed.pipelining over the two ranks, half the layers each; `checkpoint` is 0
    or "all" (every layer of a stage checkpointed)."""
    return TorchPipelining(
        config,
        [config.layers // 2] * 2,
        dist.group.WORLD,
        microbatch_size=microbatch_size,
        checkpoint_layers=config.layers // 2 if checkpoint == "all" else 0,
    )


def pick_fastest(configs, build, dominated, batches, args, name) -> tuple[dict, list]:
    """The fastest of `configs` (dicts) on the first step whose measured memory fits the budget,
    as a user tuning it would pick; `build(config)` makes the peer, `dominated(config, tried)`
    says a config needs at least the memory of one tried and over budget. Memory is measured on
    the step `args.memory_step` picks (the one padding or packing makes the largest)."""
    tried = []
    budget = args.budget_mib * MIB
    worst = args.memory_step(batches)
    for c in configs:
        if dominated(c, [t for t in tried if not t["fits"]]):
            continue
        runner = TorchRunner(build(c))
        peak = max(s["memory_bytes"] for s in gathered(runner.step(worst, measure_memory=True)))
        fits = peak <= budget
        out, step_s = timed(lambda: runner.step(batches[0])) if fits else ({}, math.inf)
        # The step ends with its slowest rank, and every rank must pick the same configuration:
        # by its own clock, two close ones (0.53 and 0.54 s) made ranks build different pipes.
        step_s = max(gathered(step_s))
        tried.append(dict(c, peak_bytes=peak, fits=fits, step0_s=step_s))
        runner = None
        gc.collect()  # a peer's stages, schedules and buffers, before the next one is built
        if "cut_tokens" in out:  # the share of step 0's tokens cut from their earlier context
            tried[-1]["cut_share"] = out["cut_tokens"] / sum(t.numel() for t in batches[0])
        if dist.get_rank() == 0:
            print(
                f"{name} {c}: peak {peak / MIB:.0f} MiB "
                f"({'fits' if fits else 'over budget'}), step 0 {step_s:.2f} s",
                flush=True,
            )
    best = min((t for t in tried if t["fits"]), key=lambda t: t["step0_s"], default=None)
    if best is None:
        raise SystemExit(f"measured_comparison: no {name} configuration fits the budget")
    return {k: best[k] for k in configs[0]}, tried


def pick_torch_config(batches, config, args) -> tuple[tuple, list]:
    """Padded Schedule1F1B's (microbatch size, checkpoint) of TORCH_CONFIGS; its memory on the
    step with the longest sequence (padding makes every microbatch that long there). A larger
    microbatch of the same padded rows needs more memory."""
    args.memory_step = lambda bs: max(bs, key=lambda b: max(t.numel() for t in b))
    best, tried = pick_fastest(
        [
            dict(microbatch_size=mb, checkpoint=ckpt)
            for mb, ckpt in (SMOKE_TORCH_CONFIGS if args.smoke else TORCH_CONFIGS)
        ],
        lambda c: torch_pipe(config, c["microbatch_size"], c["checkpoint"]),
        lambda c, over: any(
            t["checkpoint"] == c["checkpoint"] and t["microbatch_size"] < c["microbatch_size"]
            for t in over
        ),
        batches,
        args,
        "torch Schedule1F1B (padded)",
    )
    return (best["microbatch_size"], best["checkpoint"]), tried


def packed_pipe(config, schedule, row_length, checkpoint) -> TorchPacked:
    """The packed peer over the two ranks; `checkpoint` 0 or "all" (every layer of a stage)."""
    return TorchPacked(
        config,
        dist.group.WORLD,
        schedule=schedule,
        row_length=row_length,
        checkpoint_layers=config.layers if checkpoint == "all" else 0,
    )


def pick_packed_config(batches, config, args) -> tuple[dict, list]:
    """The packed peer's (schedule, row length, checkpoint): every schedule of SCHEDULES, rows of
    the context and its halves to eighths, no or full checkpointing. Memory on the step with the
    most tokens (the most rows); longer rows of the same schedule and checkpointing need more."""
    args.memory_step = lambda bs: max(bs, key=lambda b: sum(t.numel() for t in b))
    rows = [
        args.context // f
        for f in (SMOKE_PACKED_ROW_FRACTIONS if args.smoke else PACKED_ROW_FRACTIONS)
    ]
    configs = [
        dict(schedule=s, row_length=r, checkpoint=c)
        for s in (SMOKE_PACKED_SCHEDULES if args.smoke else SCHEDULES)
        for c in (0, "all")
        for r in sorted(rows)
    ]
    return pick_fastest(
        configs,
        lambda c: packed_pipe(config, **c),
        lambda c, over: any(
            t["schedule"] == c["schedule"]
            and t["checkpoint"] == c["checkpoint"]
            and t["row_length"] < c["row_length"]
            for t in over
        ),
        batches,
        args,
        "torch packed",
    )


def checkpoint_arg(text: str):
    return "all" if text == "all" else int(text)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    static = static_settings(args)
    runners = {"epp": InfiniPipeRunner(trainer_for("epp", None, args, config))}
    for m in BASELINES:
        runners[m] = InfiniPipeRunner(trainer_for(m, static["settings"][m], args, config))
    rank = dist.get_rank()
    sampled = [
        training.sampled_batch(
            "wikipedia", args.batch, args.context, args.seed + i, config.vocab, args.seed + i
        )
        for i in range(args.steps)
    ]
    lengths = [step for step, _ in sampled]
    batches = [batch for _, batch in sampled]
    packed_config = None
    if has_layout(args):
        torch_config = dict(omitted=TORCH_OMITTED)
    else:
        if args.skip_torch:
            torch_config = dict(omitted="left out of this run (--skip-torch)")
        elif args.torch_config:
            mb_text, ckpt = args.torch_config.split(",")
            mb, torch_tried = int(mb_text), [dict(given=args.torch_config)]
            ckpt = checkpoint_arg(ckpt)
        else:
            (mb, ckpt), torch_tried = pick_torch_config(batches, config, args)
        if not args.skip_torch:
            runners["torch_1f1b"] = TorchRunner(torch_pipe(config, mb, ckpt))
            torch_config = dict(microbatch_size=mb, checkpoint=ckpt, tried=torch_tried)
        if args.packed_config:
            schedule, row, ckpt = args.packed_config.split(",")
            packed = dict(schedule=schedule, row_length=int(row), checkpoint=checkpoint_arg(ckpt))
            packed_tried = [dict(given=args.packed_config)]
            if args.packed_tried:
                packed_tried += json.loads(args.packed_tried.read_text())
        else:
            packed, packed_tried = pick_packed_config(batches, config, args)
        runners["torch_packed"] = TorchRunner(packed_pipe(config, **packed))
        packed_config = dict(packed, tried=packed_tried)
        if args.packed_context_config:
            schedule, ckpt = args.packed_context_config.split(",")
            context = dict(
                schedule=schedule, row_length=args.context, checkpoint=checkpoint_arg(ckpt)
            )
            runners["torch_packed_context"] = TorchRunner(packed_pipe(config, **context))
            packed_config["context_row"] = context
    reference = Unpipelined(config) if rank == 0 else None

    def unpipelined_step(batch):
        return reference.step(batch) if rank == 0 else {}

    # Warm-up: one step of every method on the first batch (allocator, kernels, shapes). All
    # start from the same weights, so their first losses must agree: the methods train the same
    # model, only the schedule differs.
    first_loss = {
        name: gathered(timed(lambda: runner.step(batches[0]))[0]["loss"])[0]
        for name, runner in runners.items()
    }
    first_loss["unpipelined"] = gathered(
        timed(lambda: unpipelined_step(batches[0]))[0].get("loss")
    )[0]
    same = [v for k, v in first_loss.items() if k not in OWN_LOSS]
    spread = max(same) / min(same) - 1
    if rank == 0:
        print(
            f"first-step losses: {first_loss} (spread {spread:.2e} without {OWN_LOSS})", flush=True
        )
    if spread > 1e-4:
        raise SystemExit(
            f"measured_comparison: the methods' first-step losses differ by "
            f"{spread:.2e} relative: {first_loss}; they must train the same model"
        )

    rows = {name: [] for name in list(runners) + ["unpipelined"]}
    for i, batch in enumerate(batches):
        for name, runner in runners.items():
            out, seconds = timed(lambda: runner.step(batch))
            rows[name].append(dict(step=i, seconds=seconds, ranks=gathered(out)))
        out, seconds = timed(lambda: unpipelined_step(batch))
        rows["unpipelined"].append(dict(step=i, seconds=seconds, ranks=gathered(out)))
        if rank == 0:
            print(
                f"step {i}: {sum(lengths[i])} tokens; "
                + ", ".join(f"{name} {r[-1]['seconds']:.2f} s" for name, r in rows.items()),
                flush=True,
            )
    for i, batch in enumerate(batches):  # memory pass
        for name, runner in runners.items():
            ranks = gathered(runner.step(batch, measure_memory=True))
            rows[name][i]["memory_bytes"] = [s["memory_bytes"] for s in ranks]
            if "activation_bytes" in ranks[0]:
                for key in ("activation_bytes", "predicted_activation_bytes", "model_state_bytes"):
                    rows[name][i][key] = [s[key] for s in ranks]

    if rank == 0:
        result = dict(
            case=dict(
                batch=args.batch,
                context=args.context,
                steps=args.steps,
                seed=args.seed,
                budget_mib=args.budget_mib,
                cost_model=args.cost_model,
                model="tiny LLaMA ("
                + ", ".join(f"{k}={v}" for k, v in vars(config).items() if k != "dtype")
                + ")",
            ),
            lengths=lengths,
            static=static,
            first_step_loss=first_loss,
            torch_config=torch_config,
            rows=rows,
            summary=summarise(rows, lengths, args),
        )
        if packed_config is not None:
            result["packed_config"] = packed_config
        if has_layout(args):
            result["case"]["layout"] = layout_of(args)
        if args.note:
            result["note"] = args.note
        print(json.dumps(result["summary"], indent=1))
        if args.output:
            results.write(args.output, result)
    leave()


def summarise(rows: dict, lengths: list, args) -> dict:
    tokens = sum(sum(step) for step in lengths)
    out = {}
    for name, steps in rows.items():
        total = sum(s["seconds"] for s in steps)
        entry = dict(tokens_per_s=tokens / total, total_s=total)
        if steps and "memory_bytes" in steps[0]:
            entry["peak_memory_mib"] = max(max(s["memory_bytes"]) for s in steps) / MIB
            entry["within_budget"] = entry["peak_memory_mib"] <= args.budget_mib
        if steps and "compute_s" in steps[0]["ranks"][0]:
            # Pipeline efficiency: mean stage compute over the step time (1 - bubbles), from
            # the measured per-stage compute.
            entry["pipeline_efficiency"] = statistics.mean(
                statistics.mean(r["compute_s"] for r in s["ranks"]) / s["seconds"] for s in steps
            )
        if steps and "cut_tokens" in steps[0]["ranks"][0]:
            # The tokens of document pieces after a cut (they lose the context before it).
            entry["cut_share"] = sum(s["ranks"][0]["cut_tokens"] for s in steps) / tokens
        if steps and "all_to_all_s" in steps[0]["ranks"][0]:
            # The all-to-alls' share of the wall time, over all steps and ranks (they run inside
            # the stages' forward and backward compute).
            ranks = range(len(steps[0]["ranks"]))
            entry["all_to_all_s"] = [
                sum(s["ranks"][k]["all_to_all_s"] for s in steps) for k in ranks
            ]
            entry["all_to_all_share"] = statistics.mean(entry["all_to_all_s"]) / total
        out[name] = entry
    epp = out["epp"]["tokens_per_s"]
    for entry in out.values():
        entry["epp_speedup"] = epp / entry["tokens_per_s"]
    return out


if __name__ == "__main__":
    sys.exit(main())
