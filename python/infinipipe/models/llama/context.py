"""The chunk context a stage's methods receive: one type with the executor's.

`ChunkContext` is infinipipe._C.runtime.ChunkContext (runtime/chunk_context.h): the chunk's
slices (`Slice`: seq, start, end) laid out in the rows back to back, `positions` (each row's
position in its sequence), `num_tokens`, and `attention(local_layer, q, k, v)`, the chunk
attention over the stage's K/V buffers. Outside the executor, `ChunkContext(slices)` or
`ChunkContext.packed(lengths)` serves whole sequences on any layer. Python code may keep
per-chunk state as attributes on it (the model caches rotary tables there; a test attention
keeps its `state` dict there).
"""

from __future__ import annotations

from collections.abc import Iterator

from ... import _C

ChunkContext = _C.runtime.ChunkContext
Slice = _C.Slice


def slice_rows(ctx: ChunkContext) -> Iterator[tuple[int, Slice]]:
    """(first row, slice) of each of the chunk's slices, in row order."""
    row = 0
    for s in ctx.slices:
        yield row, s
        row += s.length
