"""Soak: many training steps on varied lengths, recording each rank's memory and step time.

    torchrun --nproc_per_node=2 benchmarks/experiments/soak.py --steps 1000 --out benchmarks/results/soak.json
    python benchmarks/tools/plot_soak.py benchmarks/results/soak.json   # the verdict numbers and plot

Two pipeline ranks (Gloo, CPU, one thread each), the tiny LLaMA, EPP planned per step, AdamW.
Step i's batch is the same on every rank and in every run: `--batch` lengths drawn from the
built-in Wikipedia length distribution (truncated to `--context`) with seed `--seed + i`,
synthetic tokens drawn with the same seed (lib/training.sampled_batch, as the measured
benchmarks draw theirs), so a later run resumed at step i sees the same batches from there on.

Resuming (issue 15, item 5): with `--checkpoint-dir DIR --save-at N` the run saves the whole
training state (Trainer.save_checkpoint: weights, AdamW state, step, RNG states) after N steps
(steps 0 to N-1) and goes on; `--resume --checkpoint-dir DIR` loads DIR's latest checkpoint,
takes its step S from it and runs steps S to `--steps` - 1, recording them as usual (the JSON's
"first_step" is S, its "checkpoint" says what was saved or loaded). The checkpoint's extra holds
the batch settings, and a resume with other ones is refused. `plot_soak.py --resumed` compares
the two runs' losses step by step.

    torchrun --nproc_per_node=2 benchmarks/experiments/soak.py --checkpoint-dir /tmp/soak_ckpt --save-at 500
    torchrun --nproc_per_node=2 benchmarks/experiments/soak.py --checkpoint-dir /tmp/soak_ckpt --resume \
        --out benchmarks/results/soak_resumed.json

After every step each rank records: the step's wall time (`Trainer.step` as a user calls it:
planning, agreement, execution, optimizer) and the CPU time the process spent in it (which other
work on a shared machine inflates far less than the wall time), the end time, the machine's
1-minute load average, its resident memory (VmRSS of /proc/self/status),
glibc's bytes in use by malloc (mallinfo2's uordblks + hblkhd: what the process holds through
malloc, whatever the arenas' fragmentation) and the loss. Every `--gc-every` steps also the
number of objects Python's garbage collector tracks, which grows if our Python code retains
objects per step. Rank 0 gathers everything every `--save-every` steps and at the end, and
writes the JSON (marked "complete": false until the last step is in), so a run cut short still
leaves its curves. The per-step lists themselves grow by a few floats a step (about 40 KiB over
1,000 steps), far below what the RSS curve resolves.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import results, training  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.soak_report import BATCH_SETTINGS  # noqa: E402

import infinipipe
from infinipipe import _C
from infinipipe.models.llama import LlamaConfig

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument(
        "--context", type=int, default=1024, help="longest sequence (longer ones are truncated)"
    )
    p.add_argument("--distribution", default="wikipedia", choices=_C.plan.distribution_names())
    p.add_argument("--method", default="epp", choices=_C.plan.methods())
    p.add_argument(
        "--memory-gib", type=float, default=None, help="budget per stage (default: host's)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=100, help="gather and write every N steps")
    p.add_argument("--gc-every", type=int, default=10, help="count Python's tracked objects")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak.json")
    p.add_argument("--checkpoint-dir", type=Path, default=None, help="where to save or resume")
    p.add_argument(
        "--save-at", type=int, default=None, help="save the training state after N steps"
    )
    p.add_argument(
        "--resume", action="store_true", help="continue from --checkpoint-dir's latest checkpoint"
    )
    args = p.parse_args()
    if (args.save_at is not None or args.resume) and args.checkpoint_dir is None:
        p.error("--save-at and --resume need --checkpoint-dir")
    if args.save_at is not None and not 0 < args.save_at < args.steps:
        p.error(f"--save-at must be a step between 1 and --steps - 1 ({args.steps - 1})")
    return args


def rss_bytes() -> int:
    """This process's resident set size (VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    raise RuntimeError("no VmRSS in /proc/self/status")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_probe():
    """A function returning glibc malloc's bytes in use (small blocks plus mmapped ones), or
    None where mallinfo2 is missing (not glibc, or glibc before 2.33)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _Mallinfo2

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return in_use


def commit() -> str:
    """The checkout's commit, with "-dirty" when tracked files differ from it."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def settings(args, config) -> dict:
    return dict(
        steps=args.steps,
        batch=args.batch,
        context=args.context,
        distribution=args.distribution,
        method=args.method,
        memory_gib=args.memory_gib,
        seed=args.seed,
        optimizer="AdamW lr 1e-3",
        model="tiny LLaMA ("
        + ", ".join(f"{k}={v}" for k, v in vars(config).items() if k != "dtype")
        + ")",
        world_size=dist.get_world_size(),
        threads_per_rank=torch.get_num_threads(),
        torch=torch.__version__,
        python=platform.python_version(),
        cpus=os.cpu_count(),
        machine=platform.platform(),
        malloc_arena_max=os.environ.get("MALLOC_ARENA_MAX"),
        commit=commit(),
        command=" ".join(["torchrun", f"--nproc_per_node={dist.get_world_size()}", *sys.argv]),
        started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def resume(trainer, args, info: dict) -> dict:
    """Loads --checkpoint-dir's latest checkpoint into `trainer`; what was loaded. Refuses one
    saved with other batch settings (its steps would see other batches)."""
    start = time.perf_counter()
    extra = trainer.load_checkpoint(args.checkpoint_dir) or {}
    seconds = time.perf_counter() - start
    directory = args.checkpoint_dir / (args.checkpoint_dir / "latest").read_text().strip()
    saved = extra.get("soak", {})
    different = [
        f"{k} {saved.get(k)!r} (this run's: {info[k]!r})"
        for k in BATCH_SETTINGS
        if saved.get(k) != info[k]
    ]
    if different:
        raise SystemExit(f"{directory} was saved with other batch settings: {', '.join(different)}")
    if trainer.steps >= args.steps:
        raise SystemExit(f"{directory} is at step {trainer.steps}; --steps is {args.steps}")
    return dict(loaded=str(directory), resumed_from_step=trainer.steps, load_seconds=seconds)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    plan = infinipipe.PlanConfig(method=args.method, memory_budget_gib=args.memory_gib)
    trainer = training.trainer(config, plan)
    rank = dist.get_rank()
    in_use = malloc_probe()
    info = settings(args, config)
    record = dict(
        rank=rank,
        stage=trainer.stage_index,
        rss_before_first_step_bytes=rss_bytes(),
        step_seconds=[],
        step_cpu_seconds=[],  # this process's CPU time in the step (all its threads)
        step_end_unix=[],
        loadavg_1min=[],  # the machine's: other work on it shows here, not in the CPU time
        rss_bytes=[],
        malloc_in_use_bytes=[],
        loss=[],
        gc_objects=[],  # [step, count] pairs
    )
    checkpoint = dict(dir=str(args.checkpoint_dir)) if args.checkpoint_dir else None
    if args.resume:
        checkpoint.update(resume(trainer, args, info))
    first = trainer.steps  # 0, or the step resumed from
    tokens, chunks, plan_hashes = [], [], []
    started = time.perf_counter()

    def save(complete: bool) -> None:
        everyone = gathered(record)
        if rank == 0:
            data = dict(
                settings=info,
                complete=complete,
                first_step=first,
                steps_done=len(record["loss"]),
                checkpoint=checkpoint,
                wall_seconds=time.perf_counter() - started,
                tokens=tokens,
                chunks=chunks,
                plan_hashes=plan_hashes,
                ranks=everyone,
            )
            results.write(args.out, data)

    for step in range(first, args.steps):
        _, batch = training.sampled_batch(
            args.distribution,
            args.batch,
            args.context,
            args.seed + step,
            config.vocab,
            args.seed + step,
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        result = trainer.step(batch)
        seconds = time.perf_counter() - start
        record["step_seconds"].append(seconds)
        record["step_cpu_seconds"].append(time.process_time() - cpu_start)
        record["step_end_unix"].append(time.time())
        record["loadavg_1min"].append(os.getloadavg()[0])
        record["rss_bytes"].append(rss_bytes())
        record["malloc_in_use_bytes"].append(in_use() if in_use else None)
        record["loss"].append(result.loss)
        tokens.append(result.tokens)
        chunks.append(result.plan["chunks"])
        plan_hashes.append(result.plan["hash"])
        if args.gc_every > 0 and (step % args.gc_every == 0 or step == args.steps - 1):
            record["gc_objects"].append([step, len(gc.get_objects())])
        if rank == 0 and (step % 50 == 0 or step == args.steps - 1):
            print(
                f"step {step:4d}  {seconds:6.3f} s  loss {result.loss:.4f}  "
                f"rss {record['rss_bytes'][-1] / 2**20:7.1f} MiB  tokens {result.tokens}",
                flush=True,
            )
        if trainer.steps == args.save_at:
            start = time.perf_counter()
            extra = dict(soak={k: info[k] for k in BATCH_SETTINGS})
            checkpoint["saved"] = str(trainer.save_checkpoint(args.checkpoint_dir, extra))
            checkpoint.update(saved_at_step=trainer.steps, save_seconds=time.perf_counter() - start)
        if args.save_every > 0 and (step + 1) % args.save_every == 0 and step + 1 < args.steps:
            save(complete=False)
    save(complete=True)
    if rank == 0:
        from lib.soak_report import verdict_lines

        print(f"wrote {args.out}")
        print("\n".join(verdict_lines(results.load(args.out))))
    leave()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
