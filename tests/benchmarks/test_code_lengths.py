"""benchmarks/tools/code_lengths.py on a few small files: which files are documents (source
extensions, libstdc++'s extensionless headers; not empty, binary or non-UTF-8 files, nor a copy of
one already kept), the fixed training sample, and positive, repeatable token counts."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "tools"))
import code_lengths  # noqa: E402

SOURCE = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"


@pytest.fixture
def sources(tmp_path):
    """Two sources; the first has a top-level site-packages to leave out."""
    one, two = tmp_path / "one", tmp_path / "two"
    files = {
        one / "a.py": SOURCE.encode(),
        one / "pkg" / "b.py": SOURCE.encode(),  # a copy of a.py
        one / "pkg" / "c.h": b"#pragma once\nint add(int a, int b);\n",
        one / "include" / "c++" / "vector": b"// the vector header\n#include <bits/vector.h>\n",
        one / "include" / "README": b"not under c++: no extension, no document\n",
        one / "notes.txt": b"not a source file\n",
        one / "empty.py": b"",
        one / "binary.c": b"int x;\0\0\0",
        one / "latin1.c": "/* caf\u00e9 */\n".encode("latin-1"),
        one / "site-packages" / "left_out.py": b"x = 1\n",
        two / "z.pyi": b"def f(x: int) -> int: ...\n",
        two / "a_copy.py": SOURCE.encode(),  # a copy of one/a.py, in another source
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return [("one", one, frozenset({"site-packages"})), ("two", two, frozenset())]


def test_documents_are_distinct_utf8_source_files_in_sorted_order(sources, tmp_path):
    corpus = code_lengths.collect(sources)
    assert [str(d.path.relative_to(tmp_path)) for d in corpus.documents] == [
        "one/a.py",
        "one/include/c++/vector",
        "one/pkg/c.h",
        "two/z.pyi",
    ]
    one, two = corpus.counts["one"], corpus.counts["two"]
    assert (one.kept, one.duplicate, one.empty, one.not_text) == (3, 1, 1, 2)
    assert (two.kept, two.duplicate, two.empty, two.not_text) == (1, 1, 0, 0)
    assert one.bytes == sum(d.size for d in corpus.documents if d.source == "one")


def test_the_training_sample_is_fixed_by_content_and_within_the_cap(sources):
    documents = code_lengths.collect(sources).documents
    everything = code_lengths.training_sample(documents, 1 << 20)
    assert [d.digest for d in everything] == sorted(d.digest for d in documents)
    cap = sum(d.size for d in documents) - 1
    sample = code_lengths.training_sample(documents, cap)
    assert 0 < len(sample) < len(documents) and sum(d.size for d in sample) <= cap
    assert code_lengths.training_sample(list(reversed(documents)), cap) == sample


def test_lengths_are_positive_and_repeatable(sources):
    documents = code_lengths.collect(sources).documents
    texts = [code_lengths.read_text(d) for d in documents]
    tokenizer = code_lengths.train_tokenizer(texts, vocab_size=300)
    lengths = code_lengths.token_lengths(tokenizer, documents, batch=3)
    assert len(lengths) == len(documents) and all(n >= 1 for n in lengths)
    # Merges learnt on these texts make them shorter than their bytes.
    assert sum(lengths) < sum(d.size for d in documents)
    again = code_lengths.train_tokenizer(texts, vocab_size=300)
    assert code_lengths.token_lengths(again, documents) == lengths


def test_the_script_writes_one_length_per_document(sources, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(code_lengths, "machine_sources", lambda: sources)
    monkeypatch.setenv("RAYON_NUM_THREADS", "1")  # main sets it; restored after the test
    output = tmp_path / "out" / "lengths.txt"
    assert code_lengths.main([str(output), "--vocab-size", "300"]) == 0
    lengths = [int(line) for line in output.read_text().splitlines()]
    assert len(lengths) == 4 and min(lengths) >= 1
    printed = capsys.readouterr().out
    assert "one (" in printed and "3 files kept" in printed and "1 duplicates" in printed
    assert f"max {max(lengths)}" in printed
