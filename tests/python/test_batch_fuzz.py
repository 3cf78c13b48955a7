"""Trainer.check_batch against arbitrary input (issue 15, "Fuzzing"): whatever a script hands to
Trainer.step, the batch check returns 1-D int64 CPU tensors of exactly the tokens given, or
raises BatchError; never another exception, never a crash."""

import functools
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import infinipipe
from infinipipe.errors import BatchError
from infinipipe.models.llama import LlamaConfig

VOCAB = LlamaConfig.tiny().vocab
# Every integer dtype torch has, the unsigned wide ones included (few kernels support them), and
# the ones check_batch must refuse.
DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
]
# INFINIPIPE_BATCH_FUZZ_EXAMPLES=20000 for a longer search than CI's.
EXAMPLES = settings(
    max_examples=int(os.environ.get("INFINIPIPE_BATCH_FUZZ_EXAMPLES", 300)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@functools.cache
def trainer() -> infinipipe.Trainer:
    # One process, one stage: check_batch needs only the model's vocabulary, but it is the
    # trainer's method that step() calls, so the real object is checked.
    return infinipipe.Trainer(LlamaConfig.tiny(), runtime=infinipipe.RuntimeConfig(timeout_s=30))


@pytest.fixture(scope="module", autouse=True)
def _one_process_group():
    # The trainer made a one-rank Gloo group in this pytest process: the tests after this module
    # must not find it.
    yield
    trainer.cache_clear()
    if dist.is_initialized():
        dist.destroy_process_group()


# Token ids around the vocabulary's edges, and integers no dtype holds.
token_ids = st.one_of(
    st.integers(min_value=0, max_value=VOCAB - 1),
    st.integers(min_value=-3, max_value=VOCAB + 3),
    st.integers(min_value=-(2**70), max_value=2**70),
)


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=3))
    numel = int(np.prod(shape)) if shape else 1
    values = draw(
        st.lists(st.integers(min_value=-3, max_value=VOCAB + 3), min_size=numel, max_size=numel)
    )
    t = torch.tensor(values, dtype=torch.int64).reshape(shape)
    if not (dtype.is_floating_point or dtype.is_complex or dtype.is_signed):
        t = t.clamp(min=0)  # unsigned and bool: no negative ids to cast
    t = t.to(dtype)
    if draw(st.booleans()) and t.dim() >= 1 and t.shape[0] > 1:
        t = t[::2]  # not contiguous
    if draw(st.booleans()) and t.dim() == 2:
        t = t.t()
    return t


# Tensors most kernels do not take: needing a gradient, zero-dimensional, expanded (stride 0),
# meta and sparse (both once escaped check_batch as NotImplementedError; found by this test).
unusual_tensors = st.sampled_from(
    [
        lambda: torch.tensor([1.0, 2.0], requires_grad=True),
        lambda: torch.tensor(5),
        lambda: torch.arange(6).expand(2, 6)[0],
        lambda: torch.empty(3, dtype=torch.int64, device="meta"),
        lambda: torch.tensor([1, 0, 2]).to_sparse(),
    ]
).map(lambda make: make())


# Objects a script might pass by mistake, from scalars to containers and arrays.
leaves = st.one_of(
    st.none(),
    st.booleans(),
    token_ids,
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(),
    st.text(max_size=5),
    st.binary(max_size=5),
    tensors(),
    unusual_tensors,
    st.builds(np.array, st.lists(token_ids, max_size=5)),
    st.builds(lambda n: range(n), st.integers(min_value=-1, max_value=8)),
)
objects = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.frozensets(st.integers(min_value=0, max_value=VOCAB - 1), max_size=3),
    ),
    max_leaves=12,
)
# Batches that are nearly right: lists of sequences, each a list or a tensor of ids.
sequences = st.one_of(st.lists(token_ids, max_size=8), tensors(), unusual_tensors)
batches = st.one_of(st.lists(sequences, max_size=5), st.tuples(sequences, sequences))


def expect_checked(batch) -> None:
    try:
        checked = trainer().check_batch(batch)
    except BatchError as e:
        assert str(e), "a BatchError must say what is wrong"
        return
    # Accepted: the same tokens, as 1-D int64 CPU tensors the executor can run.
    assert isinstance(checked, list) and len(checked) == len(batch)
    assert sum(t.numel() - 1 for t in checked) > 0
    for given_seq, t in zip(batch, checked):
        assert isinstance(t, torch.Tensor)
        assert t.dtype == torch.int64 and t.device.type == "cpu" and t.dim() == 1
        assert t.is_contiguous() and t.numel() > 0
        assert int(t.min()) >= 0 and int(t.max()) < VOCAB
        want = torch.as_tensor(given_seq)
        assert torch.equal(t, want.to(torch.int64)), "check_batch changed the tokens"


@EXAMPLES
@given(objects)
def test_any_object_is_checked_or_refused(batch):
    expect_checked(batch)


@EXAMPLES
@given(batches)
def test_near_batches_are_checked_or_refused(batch):
    expect_checked(batch)


@pytest.mark.parametrize(
    "batch",
    [
        [list(range(10))],
        [torch.arange(5), [1, 2, 3]],
        ([7, 8], np.array([1, 2, 3])),
        [torch.arange(12).reshape(3, 4)[:, 1]],  # a non-contiguous column
    ],
)
def test_valid_batches_are_accepted(batch):
    checked = trainer().check_batch(batch)
    assert [t.tolist() for t in checked] == [torch.as_tensor(s).tolist() for s in batch]


@pytest.mark.parametrize(
    "batch, message",
    [
        # torch's "new(): invalid data type 'str'" named neither what a batch is nor where
        (
            "hello world",
            "a batch is a list of token sequences (lists of ints or 1-D integer "
            "tensors), got the str 'hello world': tokenize text first",
        ),
        (b"hi", "got the bytes b'hi': tokenize text first"),
        (
            {"input_ids": [1, 2]},
            "a batch is a list of token sequences (lists of ints or 1-D "
            "integer tensors), got a dict",
        ),
        (None, "got None"),
        (3.5, "got the float 3.5"),
        (torch.ones(2, 3, dtype=torch.long), "got a 2-D tensor"),
        ([], "the batch is empty"),
        (["hello", "world"], "sequence 0 is the str 'hello', not token ids: tokenize text first"),
        ([[1, 2], [3, "a"]], "sequence 1, position 1: the str 'a' is not a token id (an int)"),
        ([[1, None]], "sequence 0, position 1: None is not a token id (an int)"),
        ([[1, 2], None], "sequence 1 is None"),
        ([{"a": 1}], "sequence 0 is a dict"),
        ([1, 2, 3], "sequence 0 is the int 1: a batch of one sequence is [[id, id, ...]]"),
        ([2.0, 3.0], "sequence 0 is the float 2.0"),
        (
            [[1.0, 2.0]],
            "sequence 0 must be a 1-D list or tensor of integer token ids, got "
            "torch.float32 of shape (2,)",
        ),
        ([[[1, 2], [3, 4]]], "got torch.int64 of shape (2, 2)"),
        (
            [[[1], [2, 3]]],
            "sequence 0 is not a token sequence (a list of ints or a 1-D integer "
            "tensor): a list, which torch could not read",
        ),
        ([[1, 2**70]], "sequence 0, position 1: token id 1180591620717411303424 is outside"),
    ],
)
def test_a_wrong_batch_says_what_a_batch_is_and_what_it_got(batch, message):
    with pytest.raises(BatchError) as raised:
        trainer().check_batch(batch)
    assert message in str(raised.value)
