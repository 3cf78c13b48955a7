"""A real-text corpus available offline wherever Python is: the language reference's topics.

`pydoc_data.topics` (part of CPython's standard library, PSF licensed) holds the text `help()`
shows for keywords and topics ("assert", "class", "typesseq", ...): sections of the Python
language reference and library manual as plain English with code. In CPython 3.11 that is 79
documents, 466 KB of UTF-8 (from 202 to 62,522 characters each): enough for a small model's
loss to fall visibly, and nothing to download.
"""

from __future__ import annotations

from .documents import DocumentError


def python_reference_documents() -> list[str]:
    """The topic texts of `pydoc_data.topics`, in sorted topic order (the same on every rank)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise DocumentError(
            "this Python has no pydoc_data (a standard library part some distributions package "
            "separately); install the Python's full standard library"
        ) from None
    return [topics[name] for name in sorted(topics)]
