"""A rank lost mid-step, whichever it is (rank 0, which hosts the rendezvous store, included),
is named by every other rank within the timeout + 2 s: killed (SIGKILL, its connections close)
or stopped (SIGSTOP, its connections stay open and silent). Real processes, Gloo.

INFINIPIPE_STRESS=N repeats every case N times, to catch the races between a closed connection,
a timeout and the failure boards (docs/design.md, "Failures"); the default is once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from launcher import HERE, REPO, run_ranks

TIMEOUT_S = 5.0
# Start-up (importing torch, joining the group, the first plan) comes before the step's timer.
STARTUP_ALLOWANCE_S = 40.0
REPEATS = int(os.environ.get("INFINIPIPE_STRESS", "1"))
LENGTHS = [300, 200, 50, 40, 30]

CASES = [(2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (4, 2)]
SIGNALS = ["SIGKILL", "SIGSTOP"]


def tiered(*values, fast: bool) -> object:
    """One case of the slow tier unless `fast`: each case here waits out a timeout on several
    processes, and its deadline needs the machine to itself; the fast tier keeps one of each
    kind."""
    return pytest.param(*values, marks=() if fast else pytest.mark.slow)


def _failure_seconds(stdout: str) -> float:
    match = re.search(r"step failed after ([0-9.]+) s", stdout)
    assert match, stdout
    return float(match.group(1))


@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize(
    "world, victim, signal_name",
    [tiered(w, v, s, fast=(w, v, s) == (2, 1, "SIGKILL")) for w, v in CASES for s in SIGNALS],
)
def test_every_other_rank_names_the_lost_rank_in_time(world, victim, signal_name, repeat):
    others = [rank for rank in range(world) if rank != victim]
    results = run_ranks(
        "bodies:peer_dies",
        world,
        dict(victim=victim, timeout_s=TIMEOUT_S, lengths=LENGTHS, signal_name=signal_name),
        timeout_s=TIMEOUT_S + 2 * STARTUP_ALLOWANCE_S,
        wait_for=others,  # a stopped victim never exits; the launcher kills it afterwards
    )
    victim_result = results[victim]
    if signal_name == "SIGKILL":
        assert victim_result.returncode == -9, victim_result.describe()
    else:
        assert victim_result.returncode is None, victim_result.describe()
    for rank in others:
        r = results[rank]
        assert r.returncode == 1, r.describe()
        assert r.error[0] == "LostRankError", r.describe()
        assert f"step 1: lost rank {victim} (stage {victim})" in r.error[1], r.describe()
        assert "Traceback" not in r.error[1] and ".cpp:" not in r.error[1], r.describe()
        assert _failure_seconds(r.stdout) < TIMEOUT_S + 2, r.describe()
        # The groups are left to the process's end: destroying them would wait on the lost peer.
        assert "at exit: groups left True" in r.stdout, r.describe()


# (degrees, victim, how every other rank names it): a sequence rank, a replica's stage.
LAYOUT_CASES = [
    (dict(pipeline=2, sequence=2), 1, "rank 1 (stage 0, sequence rank 1)"),
    (dict(pipeline=2, data=2), 2, "rank 2 (stage 0, replica 1)"),
]


@pytest.mark.parametrize(
    "degrees, victim, name, signal_name",
    [
        tiered(d, v, n, s, fast=(v, s) == (2, "SIGKILL"))
        for d, v, n in LAYOUT_CASES
        for s in SIGNALS
    ],
)
def test_a_lost_rank_of_a_layout_is_named_in_time(degrees, victim, name, signal_name):
    """With sequence ranks or data replicas, every other rank (those in other replicas and
    other sequence ranks included) names the lost one within the timeout + 2 s."""
    world = 4
    others = [rank for rank in range(world) if rank != victim]
    results = run_ranks(
        "bodies:peer_dies",
        world,
        dict(
            victim=victim,
            timeout_s=TIMEOUT_S,
            lengths=LENGTHS,
            signal_name=signal_name,
            parallel=degrees,
        ),
        timeout_s=TIMEOUT_S + 2 * STARTUP_ALLOWANCE_S,
        wait_for=others,
    )
    for rank in others:
        r = results[rank]
        assert r.returncode == 1, r.describe()
        assert r.error[0] == "LostRankError", r.describe()
        assert f"step 1: lost {name}" in r.error[1], r.describe()
        assert "Traceback" not in r.error[1] and ".cpp:" not in r.error[1], r.describe()
        assert _failure_seconds(r.stdout) < TIMEOUT_S + 2, r.describe()


def test_a_script_that_neither_closes_nor_destroys_exits_cleanly():
    """The groups a Trainer made are destroyed when the interpreter exits, as torch asks of a
    program that makes groups (rendezvous.at_exit)."""
    results = run_ranks("bodies:exits_without_closing", 2, timeout_s=120)
    for r in results:
        assert r.returncode == 0 and r.error is None, r.describe()
        assert "at exit: groups left False" in r.stdout, r.describe()
    assert results[0].value == results[1].value > 0


def test_no_rank_leaves_setup_before_every_board_connection_is_open():
    """A rank that connects to the others' failure boards late still finds them open: the others
    wait for its word before they can close (without it, it retried each connect until its
    timeout, tens of seconds, with c10d's connect errors in its log)."""
    for r in run_ranks("bodies:closes_at_once", 3, dict(late=1), timeout_s=120):
        assert r.returncode == 0 and r.error is None, r.describe()
        assert "failed to connect" not in r.stderr, r.describe()


@pytest.mark.parametrize("slow_reader", [None, tiered(2, fast=False)])
def test_a_model_factory_that_raises_is_named_on_every_rank(slow_reader):
    results = run_ranks(
        "bodies:factory_raises",
        3,
        dict(victim=1, timeout_s=TIMEOUT_S, slow_reader=slow_reader),
        timeout_s=TIMEOUT_S + 2 * STARTUP_ALLOWANCE_S,
    )
    victim = results[1]
    assert victim.error[0] == "RuntimeError", victim.describe()
    assert "no such checkpoint" in victim.error[1]
    for r in (results[0], results[2]):
        assert r.returncode == 1, r.describe()
        assert r.error[0] == "RankFailedError", r.describe()
        assert "rank 1 (stage 1)" in r.error[1] and "no such checkpoint" in r.error[1], r.error


@pytest.mark.slow  # waits out the setup's timeout
def test_a_rank_that_exits_before_setup_is_named_in_time():
    results = run_ranks(
        "bodies:exits_before_setup",
        3,
        dict(victim=1, timeout_s=TIMEOUT_S),
        timeout_s=TIMEOUT_S + 2 * STARTUP_ALLOWANCE_S,
    )
    assert results[1].returncode == 17, results[1].describe()
    for r in (results[0], results[2]):
        assert r.returncode == 1, r.describe()
        assert r.error[0] == "LostRankError", r.describe()
        assert "rank 1 (stage 1)" in r.error[1], r.describe()
        seconds = float(re.search(r"setup failed after ([0-9.]+) s", r.stdout).group(1))
        assert seconds < TIMEOUT_S + 2, r.describe()


@pytest.mark.slow  # two torchrun attempts
def test_a_torchrun_restart_after_a_failed_setup_starts_clean(tmp_path):
    script = tmp_path / "restart.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(REPO / 'python')!r}, {str(HERE)!r}]\n"
        "import bodies\n"
        "bodies.fails_setup_on_first_attempt()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--max-restarts=1"]
        + ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", str(script)],
        capture_output=True,
        text=True,
        timeout=4 * STARTUP_ALLOWANCE_S,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("attempt 1 loss") == 2, proc.stdout
