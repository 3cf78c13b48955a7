"""Processes doing the profiled layer work beside the profiler (`--neighbours`), as the other
pipeline ranks do when they share this machine's cores, caches and memory bandwidth; with
`--neighbours-in-step`, each run beside the very same run (InStep)."""

from __future__ import annotations

import contextlib
import multiprocessing
from typing import Any

import torch

from ..models import llama
from .layer_profile import IN_FLIGHT, _profile_layer, profiled_module


def _neighbour(
    config: llama.LlamaConfig,
    stage: str,
    points: list,
    threads: int,
    in_flight: int,
    ready: Any,
    in_step: tuple[int, int, int, Any] | None = None,
) -> None:
    """A process doing the profiled layer work over and over, until it is terminated. With
    `in_step` (repeats, min_timed_tokens, seed, connection), its first pass runs the profiler's own runs in the
    profiler's order, waiting for the profiler after each (InStep)."""
    torch.set_num_threads(threads)
    module = profiled_module(config, stage)
    ready.send(True)
    ready.close()
    if in_step is not None:
        repeats, min_timed_tokens, seed, conn = in_step
        barrier = InStep([conn])
        _profile_layer(
            module,
            config,
            points,
            repeats,
            seed=seed,
            in_flight=in_flight,
            min_timed_tokens=min_timed_tokens,
            progress=lambda done, total: barrier(),
        )
    while True:  # no tqdm here: its lock is a semaphore that a terminated process would leak
        _profile_layer(module, config, points, 1, in_flight=in_flight)


class InStep:
    """A barrier over pipes: every process calls it after each of its runs and waits there for
    the others, so that all run the same run at once. The profiler and its neighbours make the
    same runs in the same order (the same points, repeats, seed and in-flight count), so a run is
    timed while the neighbours run that very point: in a pipeline the next stage runs the chunk
    this one just ran, or a slice of the same sequence, not a random point of the grid."""

    def __init__(self, conns: list) -> None:
        self.conns = conns

    def __call__(self) -> None:
        try:
            for conn in self.conns:
                conn.send_bytes(b"s")
            for conn in self.conns:
                if not conn.poll(IN_STEP_TIMEOUT_S):
                    raise RuntimeError(
                        f"profile: the other side of an in-step profile did not finish its run "
                        f"within {IN_STEP_TIMEOUT_S:.0f} s; run without --neighbours-in-step to "
                        "see whether the neighbours fail on their own"
                    )
                conn.recv_bytes()
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:
            raise RuntimeError(
                "profile: the other side of an in-step profile stopped (its pipe closed); run "
                "without --neighbours-in-step to see whether the neighbours fail on their own"
            ) from e


# The longest a run of the full grid takes here is well under a second: far above that means the
# other side died or hangs.
IN_STEP_TIMEOUT_S = 300.0


@contextlib.contextmanager
def neighbours(
    count: int,
    config: llama.LlamaConfig,
    stage: str,
    points: list,
    threads: int,
    in_flight: int = IN_FLIGHT,
    in_step: tuple[int, int, int] | None = None,
):
    """`count` processes running _neighbour for the duration of the block, which starts once
    every one of them is at work. Yields None, or with `in_step` (repeats, min_timed_tokens,
    seed) the InStep
    barrier the profiler calls after each of its runs."""
    ctx = multiprocessing.get_context("spawn")
    # Pipes, not Events: a terminated process would leave an Event's semaphore behind.
    pipes = [ctx.Pipe(duplex=False) for _ in range(count)]
    steps = [ctx.Pipe() for _ in range(count)] if in_step is not None else []
    procs = [
        ctx.Process(
            target=_neighbour,
            args=(
                config,
                stage,
                points,
                threads,
                in_flight,
                send,
                (*in_step, steps[i][1]) if in_step is not None else None,
            ),
            daemon=True,
        )
        for i, (_, send) in enumerate(pipes)
    ]
    for proc in procs:
        proc.start()
    for _, send in pipes:
        send.close()  # the child's copy remains: a child that dies ends its pipe at once
    try:
        for proc, (ready, _) in zip(procs, pipes):
            try:
                started = ready.poll(timeout=300) and ready.recv()
            except EOFError:
                started = False
            if not started:
                proc.join(timeout=5)
                raise RuntimeError(
                    f"profile: a neighbour process did not start (exit code "
                    f"{proc.exitcode}); run without --neighbours to see why"
                )
        yield InStep([mine for mine, _ in steps]) if in_step is not None else None
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join()
        for ends in pipes + steps:
            for end in ends:
                end.close()
