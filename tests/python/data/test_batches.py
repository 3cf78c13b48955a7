"""TokenBatches: variable-length batches by a token budget, never padded; truncate or split;
deterministic shuffling per epoch; a resumed run yields exactly the uninterrupted run's batches."""

import json
import logging
import random

import pytest
import torch

from infinipipe.data import ByteTokenizer, DocumentError, TokenBatches


def corpus(count=60, seed=1):
    """Documents of 0 to 300 bytes, each starting with its own number (told apart in batches)."""
    rng = random.Random(seed)
    return [f"{i}:" + "x" * rng.randrange(300) for i in range(count)]


def make(documents=None, **settings):
    settings = {"tokens_per_batch": 512, "context": 128, "seed": 7, **settings}
    return TokenBatches(corpus() if documents is None else documents, ByteTokenizer(), **settings)


def as_lists(batches):
    return [[s.tolist() for s in batch] for batch in batches]


def test_batches_are_unpadded_int64_sequences_within_the_token_budget():
    batches = list(make())
    assert len(batches) > 5
    for batch in batches:
        assert batch and all(s.dtype == torch.int64 and s.dim() == 1 for s in batch)
        assert sum(len(s) for s in batch) <= 512
        assert all(len(s) >= 2 and s[-1] != 0 for s in batch)  # no padding (no zero byte here)
    lengths = {len(s) for batch in batches for s in batch}
    assert len(lengths) > 20  # variable lengths, as the documents have
    # greedy: a batch is cut only where the next sequence would exceed the budget
    for batch, following in zip(batches, batches[1:]):
        assert sum(len(s) for s in batch) + len(following[0]) > 512


def test_an_epoch_holds_every_sequence_once_each_ending_with_the_end_of_document_id():
    tokenizer = ByteTokenizer()
    sequences = [s for batch in make(context=400) for s in batch]
    texts = sorted(tokenizer.decode(s.tolist()) for s in sequences)
    assert texts == sorted(corpus())
    assert all(s[-1] == tokenizer.eos_id for s in sequences)


def test_the_same_seed_gives_the_same_batches_and_another_seed_another_order():
    assert as_lists(make(epochs=2)) == as_lists(make(epochs=2))
    assert as_lists(make(seed=8)) != as_lists(make())
    unshuffled = [s for batch in make(shuffle=False, context=400) for s in batch]
    assert [ByteTokenizer().decode(s.tolist()) for s in unshuffled] == corpus()


def test_each_epoch_is_shuffled_anew_with_seed_plus_epoch():
    batches = make(epochs=2)
    with_epoch = [(batches.epoch, batch) for batch in batches]  # epoch: the batch's own
    orders = [[s.tolist() for e, b in with_epoch if e == k for s in b] for k in (0, 1)]
    assert sorted(orders[0]) == sorted(orders[1]) and orders[0] != orders[1]
    assert orders[1] == [s.tolist() for batch in make(seed=8) for s in batch]  # seed 7 + epoch 1


@pytest.mark.parametrize("epochs", [1, 3])
def test_a_resumed_run_yields_exactly_the_uninterrupted_batches(epochs):
    uninterrupted = as_lists(make(epochs=epochs))
    for stop in (1, 5, len(uninterrupted) // 2, len(uninterrupted) - 1):
        first = make(epochs=epochs)
        head = as_lists(next(first) for _ in range(stop))
        state = json.loads(json.dumps(first.state_dict()))  # plain values: JSON round trip
        resumed = make(epochs=epochs)
        resumed.load_state_dict(state)
        assert head + as_lists(resumed) == uninterrupted, f"stopped after {stop} batches"


def test_five_batches_saved_and_resumed_continue_across_epochs():
    batches = make(epochs=None)  # without end: crosses epoch boundaries
    uninterrupted = [next(batches) for _ in range(60)]
    assert batches.epoch >= 2
    first = make(epochs=None)
    for _ in range(5):
        next(first)
    resumed = make(epochs=None)
    resumed.load_state_dict(first.state_dict())
    assert as_lists(next(resumed) for _ in range(55)) == as_lists(uninterrupted[5:])


def test_a_state_from_other_settings_or_another_corpus_is_refused():
    state = make().state_dict()
    with pytest.raises(ValueError, match=r"seed 7 \(saved\) vs 8 \(here\)"):
        make(seed=8).load_state_dict(state)
    with pytest.raises(ValueError, match="tokens_per_batch"):
        make(tokens_per_batch=256).load_state_dict(state)
    with pytest.raises(ValueError, match="fingerprint"):
        make(documents=corpus(seed=2)).load_state_dict(state)
    with pytest.raises(ValueError, match="position must be in"):
        make().load_state_dict({**state, "position": 10**6})


def test_truncate_keeps_a_sequences_first_context_tokens_and_split_cuts_it_in_pieces():
    document = "abcdefghij"  # 10 bytes and the end-of-document id: 11 tokens
    ids = ByteTokenizer().encode(document) + [256]
    settings = {"tokens_per_batch": 100, "context": 4, "shuffle": False}
    truncated = make([document], cut="truncate", **settings)
    assert as_lists(truncated) == [[ids[:4]]]
    assert truncated.stats.truncated_tokens == 7
    split = make([document], cut="split", **settings)
    assert as_lists(split) == [[ids[0:4], ids[4:8], ids[8:11]]]
    assert split.stats.tokens == 11 and split.stats.truncated_tokens == 0


def test_sequences_shorter_than_two_tokens_are_dropped_and_reported(caplog):
    documents = ["", "abcdefgh", "ab"]  # 1 token; 4 + 4 + 1 tokens; 3 tokens
    with caplog.at_level(logging.WARNING, logger="infinipipe"):
        batches = make(documents, context=4, tokens_per_batch=100, shuffle=False)
        assert [len(s) for s in next(batches)] == [4, 4, 3]
    stats = batches.stats
    assert (stats.documents, stats.sequences, stats.dropped_sequences, stats.dropped_tokens) == (
        3,
        3,
        2,
        2,
    )
    assert "dropped 2 of 5 sequences shorter than 2 tokens" in caplog.text


def test_a_sequence_longer_than_the_budget_is_a_batch_of_its_own():
    documents = ["a" * 10, "b" * 199, "c" * 10]
    batches = as_lists(make(documents, tokens_per_batch=50, context=300, shuffle=False))
    assert [[len(s) for s in batch] for batch in batches] == [[11], [200], [11]]


def test_documents_are_tokenized_once_and_only_when_first_needed():
    class Counting(ByteTokenizer):
        calls = 0

        def encode(self, text):
            Counting.calls += 1
            return super().encode(text)

    documents = corpus(20)
    batches = TokenBatches(iter(documents), Counting(), tokens_per_batch=256, context=128, epochs=3)
    assert Counting.calls == 0
    assert len(list(batches)) > 3 and Counting.calls == 20  # three epochs, one tokenization


def test_an_empty_corpus_and_bad_settings_are_errors():
    with pytest.raises(DocumentError, match="no sequence of at least 2 tokens in the corpus"):
        next(make([]))
    with pytest.raises(DocumentError, match="a document must be a string, got int"):
        next(make([1, 2]))
    with pytest.raises(ValueError, match="cut must be one of 'truncate', 'split'"):
        make(cut="pad")
    with pytest.raises(ValueError, match="context must be an integer >= 2"):
        make(context=1)
    with pytest.raises(ValueError, match="tokens_per_batch must be an integer >= 1"):
        make(tokens_per_batch=0)
    with pytest.raises(ValueError, match="epochs must be a positive integer or None"):
        make(epochs=0)
