"""Runs a test body in N real processes (one per pipeline rank) and collects what each returns.

    results = run_ranks("bodies:parity", world_size=2, args={...}, timeout_s=120)

Each rank is a process of its own with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port) and one intra-op thread, forked from
a server that has imported torch and infinipipe once (_worker.py says why). The body, `function(**args)` in a module of this directory, runs there; its
return value comes back through a file (torch.save), its exception as (type, message), along
with the exit code, stdout, stderr and wall time of the process. A rank that outlives
`timeout_s` is killed and reported with returncode None; so are the ranks still running once
every rank of `wait_for` has exited (for a rank that stopped itself with SIGSTOP on purpose).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import multiprocessing.context
import os
import pickle
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed after the timeout
    elapsed_s: float
    stdout: str
    stderr: str
    value: Any = None  # what the body returned
    error: tuple[str, str] | None = None  # (exception type, message) when the body raised

    def describe(self) -> str:
        return (
            f"rank {self.rank}: returncode {self.returncode} after {self.elapsed_s:.1f} s, "
            f"error {self.error}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n"
            f"{self.stderr[-3000:]}"
        )


# The first line of torchrun's own report once a worker failed: it comes after the workers' output.
_LAUNCHER_REPORT = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ \S*torch/distributed/elastic/", re.M)


def launch_log(stdout: str, stderr: str, keep: int = 3000) -> str:
    """A torchrun launch's output for a failed test's message: the end of stdout and of the
    workers' stderr (where a failed rank's traceback is), then the end of the launcher's report
    (which names the first rank that failed), each cut to `keep` characters."""
    found = _LAUNCHER_REPORT.search(stderr)
    workers, report = (stderr[: found.start()], stderr[found.start() :]) if found else (stderr, "")
    return (
        f"--- stdout\n{stdout[-keep:]}\n--- the workers' stderr\n{workers[-keep:]}\n"
        f"--- the launcher's report\n{report[-keep // 3 :]}"
    )


def free_port() -> int:
    """A port for a rendezvous store that nothing else takes before the store binds it.

    A port the kernel hands out for bind(0) is free only at that moment: it is drawn from the
    ephemeral range, where every outgoing connection (another test's Gloo pairs, store clients)
    also draws its local port, and CI once lost a test to one taken in between (EADDRINUSE,
    2026-11-30). So the ports come from below that range, a block of their own per pytest-xdist
    worker, taken in turn and checked by binding (no SO_REUSEADDR: a port still in TIME_WAIT
    counts as taken)."""
    block = _PORT_BLOCK * _xdist_worker()
    for _ in range(_PORT_BLOCK):
        port = _FIRST_PORT + block + next(_port_turn) % _PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(
        f"no free port in {_FIRST_PORT + block}..{_FIRST_PORT + block + _PORT_BLOCK}"
    )


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts there


def _xdist_worker() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 16


_FIRST_PORT = 10000  # above the well-known and most registered services' ports
_PORT_BLOCK = max(16, (_ephemeral_floor() - _FIRST_PORT) // 16)  # 16 workers' blocks fit below
_port_turn = itertools.count(os.getpid())  # another pytest run on the machine starts elsewhere


def _forked_rank(*args) -> None:
    import _worker  # in the forked rank, where the server has imported it already

    _worker.forked(*args)


@functools.cache
def _ranks() -> multiprocessing.context.ForkServerContext:
    """The ranks' start method: forked from a server that imported _worker (torch and infinipipe)
    once per test process, the server started on the first launch."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["_worker"])
    return context


def run_ranks(
    target: str,
    world_size: int,
    args: dict | None = None,
    timeout_s: float = 120.0,
    extra_env: dict | None = None,
    wait_for: list[int] | None = None,
) -> list[RankResult]:
    """Runs `module:function` of this directory on `world_size` ranks; returns per-rank results."""
    with tempfile.TemporaryDirectory(prefix="infinipipe-ranks-") as tmp:
        tmp_path = Path(tmp)
        with open(tmp_path / "args.pkl", "wb") as f:
            pickle.dump(args or {}, f)
        port = free_port()
        procs, logs = [], []
        pythonpath = os.pathsep.join(
            [str(REPO / "python"), str(HERE), os.environ.get("PYTHONPATH", "")]
        )
        for rank in range(world_size):
            env = dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE=str(world_size),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world_size),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                PYTHONPATH=pythonpath,
                OMP_NUM_THREADS="1",
                PYTHONUNBUFFERED="1",
            )
            env.update(extra_env or {})
            out, err = tmp_path / f"out{rank}.txt", tmp_path / f"err{rank}.txt"
            logs.append((out, err))
            procs.append(
                _ranks().Process(
                    target=_forked_rank,
                    args=(target, tmp, env, str(HERE), str(out), str(err)),
                    name=f"rank {rank}",
                )
            )
            procs[-1].start()
        started = time.monotonic()
        ended: list[float | None] = [None] * world_size
        awaited = range(world_size) if wait_for is None else wait_for
        while any(ended[rank] is None for rank in awaited):
            now = time.monotonic()
            for rank, p in enumerate(procs):
                if ended[rank] is None and p.exitcode is not None:
                    ended[rank] = now - started
            if now - started > timeout_s:
                break
            time.sleep(0.05)
        results = []
        for rank, p in enumerate(procs):
            returncode = p.exitcode
            if returncode is None:
                p.kill()
            p.join()
            out, err = logs[rank]
            result = RankResult(
                rank,
                returncode,
                ended[rank] if ended[rank] is not None else timeout_s,
                out.read_text(errors="replace") if out.exists() else "",
                err.read_text(errors="replace") if err.exists() else "",
            )
            value_file = tmp_path / f"rank{rank}.pt"
            if value_file.exists():
                payload = torch.load(value_file, weights_only=False)
                result.value, result.error = payload["value"], payload["error"]
            results.append(result)
        return results


def check_all_ok(results: list[RankResult]) -> list[Any]:
    """The values of every rank; fails the test with every rank's log when any rank failed."""
    bad = [r for r in results if r.returncode != 0 or r.error is not None]
    if bad:
        raise AssertionError("ranks failed:\n" + "\n".join(r.describe() for r in bad))
    return [r.value for r in results]


def runs_by_world(target: str, cases: list[dict], timeout_s: float = 300.0):
    """For a module-scoped fixture: get(world) runs `target(cases=...)` on `world` ranks once
    (each case without its "expect", which stays with the test) and returns every rank's
    values, cached per world size."""
    cache: dict[int, list[Any]] = {}

    def get(world: int) -> list[Any]:
        if world not in cache:
            body_cases = [{k: v for k, v in c.items() if k != "expect"} for c in cases]
            results = run_ranks(target, world, dict(cases=body_cases), timeout_s=timeout_s)
            cache[world] = check_all_ok(results)
        return cache[world]

    return get


# What calibration says when a profile's runs are too noisy to fit (cost/calibration.cc): the
# product's answer on a busy machine, not the behaviour a profiling test checks.
TOO_NOISY = "the runs are too noisy"


def run_ranks_profiled(*args, attempts: int = 3, **kwargs) -> list[RankResult]:
    """run_ranks for a body that profiles: launched again (at most `attempts` times in all) when a
    rank's profile was refused as too noisy, as a user would profile again on a quieter moment."""
    for _ in range(attempts):
        results = run_ranks(*args, **kwargs)
        if not any(r.error is not None and TOO_NOISY in r.error[1] for r in results):
            break
    return results
