"""Documents in, batches out: variable-length batches of token sequences by a token budget.

`TokenBatches(documents, tokenizer, tokens_per_batch=..., context=...)` is an iterator of
batches as `Trainer.step` takes them: lists of 1-D int64 tensors of different lengths, never
padded. What it does, in order:

1. Tokenize every document once, on first use (the first batch, `stats` or `state_dict`), and
   append the tokenizer's end-of-document id (`eos_id`, when it is not None) to each: the model
   learns where a document ends, and the id is the last target of each document.
2. Cut a sequence longer than `context` tokens: `cut="truncate"` keeps its first `context`
   tokens (the end-of-document id is then cut too), `cut="split"` cuts it into disjoint pieces
   of `context` tokens and a shorter last piece, each trained as a sequence of its own (the
   target across a cut is lost: one per cut).
3. Drop sequences shorter than 2 tokens (an empty document, a 1-token last piece): they hold
   no target. How many were dropped is in `stats` and logged once as a warning.
4. Per epoch, shuffle the sequences with `seed + epoch` (torch.randperm with its own
   generator: the same batches on every rank and every run with the same torch) and walk them
   in that order, adding each to the batch while the batch's tokens stay within
   `tokens_per_batch`; the sequence that does not fit starts the next batch. A sequence longer
   than the budget (possible when `context > tokens_per_batch`) is a batch of its own. The last
   batch of an epoch may be short; batches never mix two epochs.

`state_dict()` is the epoch and the position in its order, plus what the batches depend on
(seed, budget, context, cut, and a fingerprint of the tokenized corpus);
`load_state_dict(state)` on a `TokenBatches` built the same way continues with exactly the
batches the uninterrupted run would have yielded, and refuses a state of other settings or
another corpus.

Memory: the documents' text is not kept. The tokens of all kept sequences live in one int32
buffer (4 bytes a token: 1 GiB for 268M tokens; only what a sequence keeps: a truncated
document's cut-off tail is not stored), plus 12 bytes a sequence (start and length) and 8
bytes a sequence for the current epoch's order. Each rank holds its own copy, since each
rank's trainer gets the whole batch. A yielded tensor is a fresh int64 copy of its sequence.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from .documents import DocumentError
from .tokenizer import PretrainedTokenizer

logger = logging.getLogger(__name__)

CUTS = ("truncate", "split")
_ENCODE_GROUP = 256  # documents handed to a tokenizer's encode_many at once


@dataclass(frozen=True)
class CorpusStats:
    """What tokenizing the corpus gave."""

    documents: int
    sequences: int  # kept: at least 2 tokens each
    tokens: int  # in the kept sequences
    dropped_sequences: int  # shorter than 2 tokens
    dropped_tokens: int  # their tokens
    truncated_tokens: int  # cut off by cut="truncate"


class TokenBatches:
    """Variable-length batches of at most `tokens_per_batch` tokens (one sequence longer than
    that is a batch alone), sequences of at most `context` tokens, shuffled per epoch with
    `seed + epoch`, for `epochs` epochs (None: without end).

    `documents`: any iterable of strings (read once, lazily). `tokenizer`: `encode(text)` and
    `eos_id` as in `infinipipe.data.tokenizer` (a transformers tokenizer is wrapped in
    `PretrainedTokenizer`). `shuffle=False` keeps the corpus order (every epoch the same).
    An iterator: iterating it again continues where it stopped."""

    def __init__(
        self,
        documents: Iterable[str],
        tokenizer,
        *,
        tokens_per_batch: int,
        context: int,
        cut: str = "split",
        seed: int = 0,
        epochs: int | None = 1,
        shuffle: bool = True,
    ) -> None:
        if cut not in CUTS:
            raise ValueError(f"cut must be one of {', '.join(map(repr, CUTS))}, got {cut!r}")
        for name, value, least in (
            ("tokens_per_batch", tokens_per_batch, 1),
            ("context", context, 2),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if epochs is not None and (not isinstance(epochs, int) or epochs < 1):
            raise ValueError(f"epochs must be a positive integer or None, got {epochs!r}")
        if isinstance(documents, str):
            raise TypeError("documents must be an iterable of strings, got one string")
        if not hasattr(tokenizer, "eos_id") and hasattr(tokenizer, "eos_token_id"):
            tokenizer = PretrainedTokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.tokens_per_batch = tokens_per_batch
        self.context = context
        self.cut = cut
        self.seed = int(seed)
        self.epochs = epochs
        self.shuffle = shuffle
        # Where the walk stands: at index `position` of epoch `epoch`'s order (the next batch
        # starts there; at the end of the order, the next batch starts the next epoch).
        self.epoch = 0
        self.position = 0
        self._documents: Iterable[str] | None = documents
        self._tokenized = False
        self._order: tuple[int, array] | None = None  # (epoch, its order)

    # -- the corpus ------------------------------------------------------------------------------

    @property
    def stats(self) -> CorpusStats:
        self._tokenize()
        return self._stats

    @property
    def fingerprint(self) -> str:
        """A hash of the kept sequences' tokens and lengths (tokenizes the corpus on first use)."""
        self._tokenize()
        return self._fingerprint

    def _tokenize(self) -> None:
        if self._tokenized:
            return
        eos = getattr(self.tokenizer, "eos_id", None)
        tokens = array("i")  # int32: every vocabulary in use fits
        starts, lengths = array("q"), array("i")
        documents = dropped = dropped_tokens = truncated = 0
        for ids in self._encoded(self._documents):
            documents += 1
            ids = list(ids)
            if eos is not None:
                ids.append(eos)
            if self.cut == "truncate" and len(ids) > self.context:
                truncated += len(ids) - self.context
                ids = ids[: self.context]
            for a in range(0, len(ids), self.context):
                piece = ids[a : a + self.context]
                if len(piece) < 2:
                    dropped += 1
                    dropped_tokens += len(piece)
                    continue
                starts.append(len(tokens))
                lengths.append(len(piece))
                tokens.extend(piece)
            if not ids:  # an empty document with no end-of-document id: nothing at all
                dropped += 1
        self._documents = None  # the text is not kept
        if not lengths:
            raise DocumentError(
                f"no sequence of at least 2 tokens in the corpus ({documents} documents)"
            )
        if dropped:
            logger.warning(
                "dropped %d of %d sequences shorter than 2 tokens (no target; %d tokens)",
                dropped,
                dropped + len(lengths),
                dropped_tokens,
            )
        digest = hashlib.blake2b(digest_size=8)
        digest.update(lengths.tobytes())
        digest.update(tokens.tobytes())
        self._fingerprint = digest.hexdigest()
        self._buffer = tokens  # kept alive: the tensor below shares its memory
        self._tokens = torch.frombuffer(tokens, dtype=torch.int32)
        self._starts, self._lengths = starts, lengths
        self._stats = CorpusStats(
            documents, len(lengths), len(tokens), dropped, dropped_tokens, truncated
        )
        self._tokenized = True

    def _encoded(self, documents: Iterable[str]) -> Iterator[list[int]]:
        encode_many = getattr(self.tokenizer, "encode_many", None)
        if encode_many is None:
            for text in documents:
                yield self.tokenizer.encode(_text(text))
            return
        group: list[str] = []
        for text in documents:
            group.append(_text(text))
            if len(group) == _ENCODE_GROUP:
                yield from encode_many(group)
                group = []
        if group:
            yield from encode_many(group)

    # -- batches ---------------------------------------------------------------------------------

    def __iter__(self) -> TokenBatches:
        return self

    def __next__(self) -> list[torch.Tensor]:
        self._tokenize()
        while True:
            if self.epochs is not None and self.epoch >= self.epochs:
                raise StopIteration
            order = self._order_of(self.epoch)
            if self.position < len(order):
                break
            self.epoch, self.position = self.epoch + 1, 0
        batch, total = [], 0
        while self.position < len(order):
            i = order[self.position]
            start, length = self._starts[i], self._lengths[i]
            if batch and total + length > self.tokens_per_batch:
                break
            batch.append(self._tokens[start : start + length].to(torch.int64))
            total += length
            self.position += 1
        return batch

    def _order_of(self, epoch: int) -> array:
        if self._order is None or self._order[0] != epoch:
            n = len(self._lengths)
            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed + epoch)
                order = array("q", torch.randperm(n, generator=generator).numpy().tobytes())
            else:
                order = array("q", range(n))
            self._order = (epoch, order)
        return self._order[1]

    # -- resuming --------------------------------------------------------------------------------

    def _settings(self) -> dict:
        return {
            "seed": self.seed,
            "tokens_per_batch": self.tokens_per_batch,
            "context": self.context,
            "cut": self.cut,
            "shuffle": self.shuffle,
            "sequences": self.stats.sequences,
            "tokens": self.stats.tokens,
            "fingerprint": self.fingerprint,
        }

    def state_dict(self) -> dict:
        """Where the next batch starts (epoch, position), and the settings and corpus it holds
        for: plain Python values, for torch.save or JSON."""
        return {"epoch": self.epoch, "position": self.position, **self._settings()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` (from `state_dict()` of batches over the same corpus, tokenizer
        and settings; `epochs` may differ). A `ValueError` lists what differs otherwise."""
        differ = [
            f"{key} {state.get(key)!r} (saved) vs {value!r} (here)"
            for key, value in self._settings().items()
            if state.get(key) != value
        ]
        if differ:
            raise ValueError(
                "the batch state was saved for other settings or another corpus: "
                + "; ".join(differ)
            )
        epoch, position = state.get("epoch"), state.get("position")
        if not (isinstance(epoch, int) and epoch >= 0):
            raise ValueError(f"the batch state's epoch must be an integer >= 0, got {epoch!r}")
        if not (isinstance(position, int) and 0 <= position <= self.stats.sequences):
            raise ValueError(
                f"the batch state's position must be in [0, {self.stats.sequences}], got {position!r}"
            )
        self.epoch, self.position = epoch, position


def _text(document) -> str:
    if not isinstance(document, str):
        raise DocumentError(f"a document must be a string, got {type(document).__name__}")
    return document
