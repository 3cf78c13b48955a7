"""Tokenizers: text to token ids.

Every tokenizer here has `encode(text) -> list[int]` (no special tokens added), `decode(ids)`,
`vocab_size` (ids lie in `[0, vocab_size)`; the model's vocabulary must be at least as large)
and `eos_id`, the end-of-document id `TokenBatches` appends to each document (None: nothing is
appended).

`encode_many(texts)`, when a tokenizer has it, encodes several texts at once (faster for the
transformers tokenizers).

- `ByteTokenizer`: a document's UTF-8 bytes are its ids (0-255) and 256 ends a document:
  vocab_size 257, nothing to download or train.
- `load_tokenizer(directory)`: a transformers / tokenizers tokenizer saved in a local directory
  (`save_pretrained`, or a model's files copied there), loaded with `local_files_only=True`:
  nothing is fetched from the network. transformers is imported only then.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import Error


class TokenizerError(Error, ValueError):
    """A tokenizer that cannot be loaded (missing directory or files, an unreadable file)."""


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255, and `eos_id` 256 ending a document."""

    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of the byte ids; the end-of-document id is left out, a broken UTF-8 sequence
        shows as U+FFFD."""
        return bytes(b for b in map(int, ids) if b != self.eos_id).decode("utf-8", errors="replace")


class PretrainedTokenizer:
    """A transformers tokenizer behind this module's interface. `encode` adds no special token
    (no BOS): documents are separated by the end-of-document id, the tokenizer's EOS token."""

    def __init__(self, tokenizer, source: str = "") -> None:
        self.tokenizer = tokenizer  # the transformers tokenizer, for anything else
        self.source = source
        self.vocab_size = len(tokenizer)  # added tokens included
        self.eos_id = tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, in one call (the tokenizers backend encodes them together)."""
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def __repr__(self) -> str:
        return f"PretrainedTokenizer({self.source!r}, vocab_size={self.vocab_size}, eos_id={self.eos_id})"


# What a saved tokenizer consists of: any one of these, with the files it needs beside it.
_TOKENIZER_FILES = {
    "tokenizer.json": (),  # tokenizers' serialization (fast tokenizers)
    "tokenizer.model": (),  # sentencepiece (needs the sentencepiece package)
    "vocab.json": ("merges.txt",),  # byte-level BPE (GPT-2 style)
    "vocab.txt": (),  # WordPiece (BERT style)
}


def load_tokenizer(directory: str | os.PathLike) -> PretrainedTokenizer:
    """The tokenizer saved in `directory`, through `transformers.AutoTokenizer` with
    `local_files_only=True`. A missing directory, or one without tokenizer files (expected:
    tokenizer.json, or tokenizer.model, vocab.json with merges.txt, vocab.txt; next to them
    tokenizer_config.json names the class and special tokens), is a `TokenizerError`."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "not a directory" if directory.exists() else "no such directory"
        raise TokenizerError(
            f"tokenizer directory {directory}: {what} (expected a directory holding tokenizer.json, "
            "as tokenizer.save_pretrained(directory) writes)"
        )
    present = [name for name in _TOKENIZER_FILES if (directory / name).is_file()]
    if not present:
        found = ", ".join(sorted(p.name for p in directory.iterdir())[:10]) or "nothing"
        raise TokenizerError(
            f"tokenizer directory {directory}: no tokenizer file (expected tokenizer.json, or "
            f"tokenizer.model, vocab.json with merges.txt, or vocab.txt; found {found})"
        )
    for name in present:
        for needed in _TOKENIZER_FILES[name]:
            if not (directory / needed).is_file():
                raise TokenizerError(
                    f"tokenizer directory {directory}: {name} without {needed} (expected both)"
                )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerError(
            f"loading the tokenizer in {directory} needs the transformers package "
            "(pip install transformers)"
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TokenizerError(
            f"tokenizer directory {directory}: transformers could not load it from "
            f"{', '.join(present)}: {first}"
        ) from e
    return PretrainedTokenizer(tokenizer, str(directory))
