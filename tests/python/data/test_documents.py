"""Reading documents: JSON Lines, plain text files and directories, saved `datasets` datasets;
errors name the file and line (or row); the Python reference corpus."""

import gzip
import json
import sys

import pytest

from infinipipe.data import (
    DocumentError,
    hold_out,
    python_reference_documents,
    read_dataset,
    read_documents,
    read_jsonl,
    read_text,
)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_json_lines_give_the_text_field_in_file_order_skipping_blank_lines(tmp_path):
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [json.dumps({"text": "first", "id": 1}), "", "  ", json.dumps({"text": "zweite ü"})],
    )
    assert list(read_jsonl(path)) == ["first", "zweite ü"]
    assert list(read_documents(path)) == ["first", "zweite ü"]


def test_the_text_field_is_configurable_and_gzip_is_read(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"body": "a"}) + "\n" + json.dumps({"body": "b"}) + "\n")
    assert list(read_documents(path, field="body")) == ["a", "b"]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        # It read "not valid JSON (Invalid control character at, column 23)": json's reason
        # cut off before its own position, about the line's end.
        (
            '{"text": "unterminated',
            "line 3: not valid JSON at column 10: unterminated string starting here",
        ),
        (
            '{"text": "a",}',
            "line 3: not valid JSON at column 14: expecting property name enclosed in double quotes",
        ),
        ('{"text": "a"} x', "line 3: not valid JSON at column 15: extra data"),
        (
            '["text", "in an array"]',
            "line 3: expected a JSON object holding 'text', got a JSON array",
        ),
        (
            '{"title": "t", "body": "b"}',
            "line 3: no field 'text' in the record (its fields: 'title', 'body')",
        ),
        ('{"text": null}', "line 3: field 'text' is a JSON null, not a string"),
        ('{"text": 12}', "line 3: field 'text' is a JSON number, not a string"),
    ],
)
def test_a_bad_json_line_is_named_by_file_and_line(tmp_path, bad_line, message):
    path = write_lines(tmp_path / "c.jsonl", ['{"text": "ok"}', "", bad_line, '{"text": "after"}'])
    documents = read_jsonl(path)
    assert next(documents) == "ok"  # errors come when the reader gets there
    with pytest.raises(DocumentError, match="line 3") as e:
        next(documents)
    assert str(e.value).startswith(f"{path}, {message}")


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n')
    with pytest.raises(DocumentError, match=r"c\.jsonl, line 2: not UTF-8"):
        list(read_jsonl(path))


def test_an_empty_corpus_and_a_missing_path_are_errors(tmp_path):
    empty = write_lines(tmp_path / "empty.jsonl", ["", "   "])
    with pytest.raises(DocumentError, match="empty.jsonl: no documents"):
        list(read_jsonl(empty))
    missing = tmp_path / "missing.jsonl"
    for read in (read_documents, read_jsonl, read_text, read_dataset):
        with pytest.raises(DocumentError, match="missing.jsonl: no such file or directory"):
            read(missing)
    with pytest.raises(DocumentError, match="a directory, not a JSON Lines file"):
        read_jsonl(tmp_path)
    with pytest.raises(DocumentError, match="unknown document format 'csv'"):
        read_documents(empty, format="csv")


def test_a_text_file_is_one_document(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("line one\nline two\n", encoding="utf-8")
    assert list(read_documents(path)) == ["line one\nline two\n"]


def test_a_directory_gives_one_document_per_txt_file_in_sorted_path_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    files = {"b/2.txt": "b2", "a.txt": "a", "b/1.txt": "b1", "notes.md": "md", ".x.txt": "x"}
    files[".hidden/h.txt"] = "h"
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert list(read_documents(tmp_path)) == ["a", "b1", "b2"]
    assert list(read_text(tmp_path, pattern="*.md")) == ["md"]


def test_a_directory_without_matching_files_says_what_it_holds(tmp_path):
    (tmp_path / "notes.md").write_text("md")
    with pytest.raises(DocumentError, match=r"no file matching '\*\.txt'.*it holds notes\.md"):
        read_text(tmp_path)


def test_a_text_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("one\ntwo\ndrei \xfc\n".encode("latin-1"))
    with pytest.raises(DocumentError, match=r"latin1\.txt, line 3: not UTF-8"):
        list(read_text(tmp_path))


def test_a_saved_dataset_and_a_split_of_a_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the `datasets` package is not installed")
    rows = {"text": ["one", "two", "three"], "n": [1, 2, 3]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    both = datasets.DatasetDict(
        train=datasets.Dataset.from_dict(rows),
        test=datasets.Dataset.from_dict({"body": ["t"], "text": ["held out"]}),
    )
    both.save_to_disk(str(tmp_path / "dd"))
    assert list(read_documents(tmp_path / "ds")) == ["one", "two", "three"]
    assert list(read_documents(tmp_path / "dd")) == ["one", "two", "three"]
    assert list(read_dataset(tmp_path / "dd", split="test", field="body")) == ["t"]
    with pytest.raises(DocumentError, match=r"no column 'body' in the dataset \(it has: text, n\)"):
        read_dataset(tmp_path / "ds", field="body")
    with pytest.raises(DocumentError, match=r"no split 'validation'.*it has: train, test"):
        read_dataset(tmp_path / "dd", split="validation")


def test_a_dataset_row_that_is_not_a_string_is_named(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the `datasets` package is not installed")
    datasets.Dataset.from_dict({"text": ["a", None, "c"]}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DocumentError, match="row 1: column 'text' holds NoneType"):
        list(read_dataset(tmp_path / "ds"))


def test_without_the_datasets_package_the_error_says_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    with pytest.raises(DocumentError, match="needs the `datasets` package"):
        read_dataset(tmp_path, field="text")


def test_the_python_reference_is_a_real_text_corpus_available_offline():
    documents = python_reference_documents()
    assert len(documents) >= 50 and all(isinstance(d, str) and d for d in documents)
    assert sum(len(d.encode()) for d in documents) > 200_000
    assert any("with" in d and "context manager" in d for d in documents)
    assert python_reference_documents() == documents  # the same order every call


def test_hold_out_keeps_every_nth_document_in_order():
    documents = [f"doc {i}" for i in range(45)]
    train, held_out = hold_out(iter(documents), every=20)
    assert held_out == ["doc 19", "doc 39"]
    assert train == [d for d in documents if d not in held_out]
    with pytest.raises(ValueError, match="at least 2"):
        hold_out(documents, every=1)
