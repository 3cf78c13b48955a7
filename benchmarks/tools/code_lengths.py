"""A code-like corpus of sequence lengths from the source files shipped on this machine, beside the
Wikipedia lengths (the paper evaluates on GitHub and CommonCrawl; this is our stand-in for GitHub):

    .venv/bin/python benchmarks/tools/code_lengths.py [OUTPUT]
    .venv/bin/python benchmarks/tools/fit_length_table.py ../code_lengths.txt --name code

The first writes one length per line to OUTPUT (default ../code_lengths.txt, beside the checkout;
never commit it: ../shared/data/, where the Wikipedia lengths are, is read-only) and prints the
count, median, p90, p99 and max; the second prints the built-in "code" table of
src/data/length_sampler.cc from it.

Documents. One document per file, from three sources walked in this order: the standard library
of the Python running this script (its base interpreter's, without that directory's own
site-packages), the running environment's site-packages, and /usr/include. A file is kept when
its name ends in one of EXTENSIONS, or it has no extension and lies under a directory named
"c++" (libstdc++'s <vector>, <map>, ...). Skipped: empty files (no tokens), files holding a NUL
byte or not valid UTF-8 (binary or another encoding), and any file whose bytes equal a file kept
earlier (SHA-256), so that vendored copies and symlinks count once.

Tokenizer. A byte-level BPE (the GPT-2 family's scheme, every byte in the base alphabet so any
text encodes) trained here with HuggingFace `tokenizers`: vocabulary 32,000 (--vocab-size), pairs
seen at least twice, no special tokens. Training reads a fixed sample rather than all the text,
to keep CPU and memory modest on a shared machine: the documents taken in the order of their
SHA-256 (a shuffle that needs no seed and does not depend on walk order), each added while the
sample stays within --sample-mib MiB (default 8). A document's length is the number of tokens of
its whole text, no end-of-document token.

Deterministic for a given machine: files are walked in sorted order, the sample is fixed by
content, and the trainer's merges do not depend on its thread count (--threads, default 1). The
result does depend on what is installed (the Python version, the packages in the environment,
the system's headers, some of which setup.sh --all installs), so the script prints the Python
version and each source's counts. The committed table's run (Python 3.11.7, tokenizers 0.23.3,
31,469 documents, 365 MiB, 5 minutes on one core) is in
docs/notes/2026-11-29-code-lengths.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from fit_length_table import summary  # noqa: E402
from lib.corpus import CODE_CORPUS  # noqa: E402

# Python (with its stubs and Cython), C, C++ and CUDA sources and headers.
EXTENSIONS = frozenset(
    ".py .pyi .pyx .pxd .pxi .c .h .cc .hh .cpp .hpp .cxx .hxx .cu .cuh .tcc".split()
)


@dataclass
class Document:
    source: str
    path: Path
    digest: bytes  # SHA-256 of the file's bytes
    size: int  # bytes


@dataclass
class SourceCounts:
    kept: int = 0
    duplicate: int = 0
    empty: int = 0
    not_text: int = 0  # a NUL byte, or not valid UTF-8
    bytes: int = 0  # of the kept files


@dataclass
class Corpus:
    documents: list[Document] = field(default_factory=list)
    counts: dict[str, SourceCounts] = field(default_factory=dict)


def machine_sources() -> list[tuple[str, Path, frozenset[str]]]:
    """(name, root, top-level directories to leave out) for the sources this machine ships."""
    stdlib = Path(sysconfig.get_path("stdlib"))
    packages = Path(sysconfig.get_path("purelib"))
    # The base interpreter's own site-packages is neither the standard library nor this
    # environment's packages: whatever happened to be installed globally.
    return [
        ("stdlib", stdlib, frozenset({"site-packages", "dist-packages"})),
        ("site-packages", packages, frozenset()),
        ("include", Path("/usr/include"), frozenset()),
    ]


def is_source(path: Path) -> bool:
    if path.suffix in EXTENSIONS:
        return True
    return path.suffix == "" and "c++" in path.parent.parts


def source_files(root: Path, leave_out: frozenset[str] = frozenset()):
    """The source files under `root` in sorted order (directory symlinks are not followed, so a
    link cannot loop or walk outside the source)."""
    for directory, dirs, files in os.walk(root):
        at_top = Path(directory) == root
        dirs[:] = sorted(d for d in dirs if not (at_top and d in leave_out))
        for name in sorted(files):
            path = Path(directory) / name
            if is_source(path) and path.is_file():
                yield path


def text_bytes(path: Path) -> bytes | None:
    """The file's bytes if they are UTF-8 text (b"" for an empty file), else None."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data


def collect(sources) -> Corpus:
    """Every distinct source file of `sources` ((name, root, leave_out) in walk order); a file
    whose bytes were already seen (in any source) counts as a duplicate of the first."""
    corpus = Corpus()
    seen: set[bytes] = set()
    for name, root, leave_out in sources:
        counts = corpus.counts.setdefault(name, SourceCounts())
        for path in source_files(Path(root), leave_out):
            data = text_bytes(path)
            if data is None:
                counts.not_text += 1
                continue
            if not data:
                counts.empty += 1
                continue
            digest = hashlib.sha256(data).digest()
            if digest in seen:
                counts.duplicate += 1
                continue
            seen.add(digest)
            counts.kept += 1
            counts.bytes += len(data)
            corpus.documents.append(Document(name, path, digest, len(data)))
    return corpus


def training_sample(documents: list[Document], cap_bytes: int) -> list[Document]:
    """Documents in SHA-256 order, each taken while the sample stays within `cap_bytes` (one
    larger than what is left is passed over, so a huge file cannot fill the sample alone)."""
    sample, total = [], 0
    for doc in sorted(documents, key=lambda d: d.digest):
        if total + doc.size <= cap_bytes:
            sample.append(doc)
            total += doc.size
    return sample


def read_text(doc: Document) -> str:
    return doc.path.read_bytes().decode("utf-8")


def train_tokenizer(texts, vocab_size: int):
    """A byte-level BPE tokenizer trained on `texts` (an iterable of documents)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def token_lengths(tokenizer, documents: list[Document], batch: int = 64) -> list[int]:
    """Each document's token count, in the order given; read a batch of files at a time so the
    whole corpus is never in memory at once."""
    # The same ids either way; newer tokenizers' fast batch skips the offsets (1.45x faster here).
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    lengths = []
    for start in range(0, len(documents), batch):
        texts = [read_text(d) for d in documents[start : start + batch]]
        lengths.extend(len(e.ids) for e in encode(texts))
    return lengths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=CODE_CORPUS)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--sample-mib", type=float, default=8.0, help="training text cap")
    parser.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    args = parser.parse_args(argv)
    # Read by the tokenizers library's thread pool when it starts, so before its first use.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    print(f"Python {sys.version.split()[0]}, tokenizers {tokenizers.__version__}")
    sources = machine_sources()
    corpus = collect(sources)
    for name, root, _ in sources:
        counts = corpus.counts[name]
        print(
            f"{name} ({root}): {counts.kept} files kept ({counts.bytes / 2**20:.1f} MiB), "
            f"{counts.duplicate} duplicates, {counts.empty} empty, {counts.not_text} not UTF-8 text"
        )
    sample = training_sample(corpus.documents, int(args.sample_mib * 2**20))
    size = sum(d.size for d in sample)
    print(f"training on {len(sample)} documents ({size / 2**20:.2f} MiB), vocab {args.vocab_size}")
    tokenizer = train_tokenizer((read_text(d) for d in sample), args.vocab_size)
    lengths = token_lengths(tokenizer, corpus.documents)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(f"{n}\n" for n in lengths))
    median, p90, p99, longest = summary(np.array(lengths))
    print(f"wrote {len(lengths)} lengths to {args.output}")
    print(f"median {median}, p90 {p90}, p99 {p99}, max {longest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
