"""Data for training: documents in, batches out.

documents.py         read_documents, hold_out, read_jsonl, read_text, read_dataset, DocumentError
python_reference.py  python_reference_documents: a real-text corpus every Python has offline
tokenizer.py         ByteTokenizer, load_tokenizer (a local transformers tokenizer), TokenizerError
batches.py           TokenBatches: variable-length batches by a token budget, resumable
synthetic.py         synthetic_batch: learnable synthetic tokens of given lengths
"""

from .batches import CorpusStats, TokenBatches
from .documents import DocumentError, hold_out, read_dataset, read_documents, read_jsonl, read_text
from .python_reference import python_reference_documents
from .synthetic import synthetic_batch
from .tokenizer import ByteTokenizer, PretrainedTokenizer, TokenizerError, load_tokenizer

__all__ = [
    "ByteTokenizer",
    "CorpusStats",
    "DocumentError",
    "PretrainedTokenizer",
    "TokenBatches",
    "TokenizerError",
    "hold_out",
    "load_tokenizer",
    "python_reference_documents",
    "read_dataset",
    "read_documents",
    "read_jsonl",
    "read_text",
    "synthetic_batch",
]
