"""Bad input and lost peers: clear errors on every rank, never a hang (real processes, Gloo)."""

from __future__ import annotations

import re

import pytest
from launcher import run_ranks

# Start-up (importing torch, joining the group) comes on top of the step's own timeout.
STARTUP_ALLOWANCE_S = 25.0


def test_world_size_must_equal_stage_count():
    results = run_ranks("bodies:world_mismatch", 2, dict(layer_split=[2, 2, 2, 2]), timeout_s=60)
    for r in results:
        assert r.returncode == 1, r.describe()
        assert r.error[0] == "Error"
        assert "2 processes but the pipeline has 4 stages" in r.error[1]
        assert "--nproc_per_node=4" in r.error[1]


@pytest.fixture(scope="module")
def bad_inputs():
    results = run_ranks("bodies:bad_inputs", 2, {}, timeout_s=120)
    for r in results:
        assert r.returncode == 0 and r.error is None, r.describe()
    return [r.value for r in results]


def raised_on_every_rank(bad_inputs, case):
    """Per rank, (rank, exception type, message) of what `case` raised there; a rank that ran
    `case` without an error fails the test."""
    raised = []
    for rank, outcome in enumerate(bad_inputs):
        assert outcome[case] is not None, f"rank {rank} ran {case} without an error"
        raised.append((rank, *outcome[case]))
    return raised


@pytest.mark.parametrize(
    "case, text",
    [
        ("out_of_vocab", "sequence 1, position 1: token id 97 is outside the vocabulary [0, 97)"),
        ("negative_id", "sequence 0, position 1: token id -4 is outside the vocabulary"),
        ("empty_batch", "the batch is empty"),
        ("empty_sequence", "sequence 1 is empty"),
        ("float_tokens", "sequence 0 must be a 1-D list or tensor of integer token ids"),
        (
            "plan_for_other_split",
            "the given plan splits the layers as [2, 6], the trainer as [4, 4]",
        ),
    ],
)
def test_bad_batch_is_rejected_on_every_rank(bad_inputs, case, text):
    for rank, kind, message in raised_on_every_rank(bad_inputs, case):
        assert kind == "BatchError" and text in message, (rank, kind, message)


def test_bad_batch_on_one_rank_stops_every_rank(bad_inputs):
    kind, message = bad_inputs[1]["one_rank_bad"]
    assert kind == "BatchError" and "token id 1000" in message
    kind, message = bad_inputs[0]["one_rank_bad"]
    assert kind == "Error"
    assert "rank(s) 1 rejected the step" in message and "token id 1000" in message


@pytest.mark.parametrize(
    "case, what",
    [
        ("different_batch", "different batches"),
        ("different_plan", "different plans"),
        ("different_config", "different trainer configurations"),
    ],
)
def test_ranks_that_disagree_all_raise_naming_the_ranks(bad_inputs, case, what):
    for _, kind, message in raised_on_every_rank(bad_inputs, case):
        assert kind == "Error" and what in message, (kind, message)
        assert "ranks [0] have" in message and "ranks [1] have" in message


def test_the_group_still_works_after_rejected_steps(bad_inputs):
    losses = [outcome["good_loss"] for outcome in bad_inputs]
    assert losses[0] == losses[1] and 3.0 < losses[0] < 6.0  # ~ln(97) for an untrained model


def _failure_seconds(stdout: str) -> float:
    match = re.search(r"step failed after ([0-9.]+) s", stdout)
    assert match, stdout
    return float(match.group(1))


@pytest.mark.parametrize(
    "world, victim", [(2, 1), (2, 0), pytest.param(4, 2, marks=pytest.mark.slow)]
)
def test_a_peer_that_dies_mid_step_is_named_by_the_others(world, victim):
    timeout = 10.0
    results = run_ranks(
        "bodies:peer_dies",
        world,
        dict(victim=victim, timeout_s=timeout, lengths=[300, 200, 50, 40, 30]),
        timeout_s=timeout + 2 * STARTUP_ALLOWANCE_S,
    )
    assert results[victim].returncode == 17, results[victim].describe()
    for r in results:
        if r.rank == victim:
            continue
        assert r.returncode == 1, r.describe()  # exited by itself, non-zero
        assert r.error[0] == "LostRankError", r.describe()
        assert _failure_seconds(r.stdout) < timeout, r.describe()
        # Its neighbours lose it directly; ranks further away learn it from the failure boards.
        assert f"step 1: lost rank {victim} (stage {victim})" in r.error[1], r.describe()


@pytest.mark.slow  # waits out the timeout
def test_a_peer_lost_before_the_agreement_fails_the_step_not_a_hang():
    timeout = 10.0
    results = run_ranks(
        "bodies:dies_before_agreement",
        2,
        dict(victim=1, timeout_s=timeout),
        timeout_s=timeout + 2 * STARTUP_ALLOWANCE_S,
    )
    assert results[1].returncode == 17, results[1].describe()
    r = results[0]
    assert r.returncode == 1, r.describe()
    assert r.error[0] == "LostRankError", r.describe()
    assert "step 1: lost rank 1 (stage 1)" in r.error[1], r.describe()
    assert "all-gather of the step's agreement" in r.error[1], r.describe()


@pytest.mark.slow  # waits out the timeout
def test_a_peer_that_hangs_is_reported_after_the_timeout():
    timeout = 5.0
    results = run_ranks(
        "bodies:peer_dies",
        2,
        dict(victim=1, timeout_s=timeout, lengths=[300, 200, 50, 40, 30], hang_s=2 * timeout),
        timeout_s=2 * timeout + STARTUP_ALLOWANCE_S,
    )
    r = results[0]
    assert r.returncode == 1, r.describe()
    assert "step 1: lost rank 1 (stage 1)" in r.error[1], r.describe()
    assert "rank 1 (stage 1) did not send within 5 s" in r.error[1]
    assert timeout <= _failure_seconds(r.stdout) < timeout + 3, r.describe()
