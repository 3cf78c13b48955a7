"""Tokenizers: ByteTokenizer (UTF-8 bytes and an end-of-document id), and load_tokenizer from a
local directory only, with clear errors for a missing or incomplete one."""

import json

import pytest

from infinipipe.data import ByteTokenizer, TokenBatches, TokenizerError, load_tokenizer


def test_byte_tokenizer_ids_are_utf8_bytes_and_256_ends_a_document():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode("añ€")
    assert ids == list("añ€".encode()) and all(0 <= i < 256 for i in ids)
    assert (tokenizer.vocab_size, tokenizer.eos_id) == (257, 256)
    assert tokenizer.decode(ids + [tokenizer.eos_id]) == "añ€"
    assert tokenizer.decode(ids[:-1]) == "añ\ufffd"  # a cut character shows as U+FFFD


def saved_tokenizer(directory):
    """A tiny word-level tokenizer saved as transformers saves one (tokenizer.json and
    tokenizer_config.json), built here: nothing is downloaded."""
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    vocab = {"[UNK]": 0, "</s>": 1, "hello": 2, "world": 3, "again": 4}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="</s>", unk_token="[UNK]"
    )
    fast.save_pretrained(str(directory))
    return directory


def test_a_saved_tokenizer_loads_from_its_directory_and_adds_no_special_token(tmp_path):
    tokenizer = load_tokenizer(saved_tokenizer(tmp_path / "tok"))
    assert (tokenizer.vocab_size, tokenizer.eos_id) == (5, 1)
    assert tokenizer.encode("hello world again") == [2, 3, 4]
    assert tokenizer.encode_many(["hello", "world hello"]) == [[2], [3, 2]]
    assert tokenizer.decode([2, 3]) == "hello world"


def test_batches_from_a_loaded_tokenizer_end_each_document_with_its_eos(tmp_path):
    tokenizer = load_tokenizer(saved_tokenizer(tmp_path / "tok"))
    batches = TokenBatches(
        ["hello world", "again"], tokenizer, tokens_per_batch=100, context=10, shuffle=False
    )
    assert [s.tolist() for s in next(batches)] == [[2, 3, 1], [4, 1]]
    # a transformers tokenizer handed over as it is gets the same treatment
    raw = TokenBatches(["again"], tokenizer.tokenizer, tokens_per_batch=100, context=10)
    assert [s.tolist() for s in next(raw)] == [[4, 1]]


def test_a_missing_directory_is_an_error_without_any_download(tmp_path):
    with pytest.raises(
        TokenizerError, match="no such directory.*expected a directory holding tokenizer.json"
    ):
        load_tokenizer(tmp_path / "absent")
    with pytest.raises(TokenizerError, match="gpt2: no such directory"):
        load_tokenizer("gpt2")  # a hub name is not looked up
    (tmp_path / "file").write_text("x")
    with pytest.raises(TokenizerError, match="not a directory"):
        load_tokenizer(tmp_path / "file")


def test_an_incomplete_directory_says_which_file_was_expected(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(
        TokenizerError, match=r"no tokenizer file \(expected tokenizer.json.*found config.json\)"
    ):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0}))
    with pytest.raises(TokenizerError, match="vocab.json without merges.txt"):
        load_tokenizer(tmp_path)


def test_an_unreadable_tokenizer_file_is_named(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed")
    (tmp_path / "tokenizer.json").write_text("{ not json")
    with pytest.raises(TokenizerError, match=f"{tmp_path}: transformers could not load it"):
        load_tokenizer(tmp_path)
