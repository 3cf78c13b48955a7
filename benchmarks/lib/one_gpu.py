"""What the one-GPU experiments share (gpu_step_speed, gpu_memory): their start, the fixed
batches they train and how they cut them into chunks."""

from __future__ import annotations

import argparse
import datetime
import os

import torch

# Documents of a packed 16K-token batch: Wikipedia-like lengths (a spread around the corpus's
# median of some hundreds of tokens, a few long ones), fixed so every run trains the same batch.
PACKED = [312, 1490, 205, 688, 97, 2210, 431, 150, 905, 1204, 66, 540,
          3011, 273, 122, 780, 388, 1650, 59, 934, 470, 215, 127, 57]  # fmt: skip
assert sum(PACKED) == 16384


def chunked(lengths: list[int], chunk_tokens: int) -> list[list[tuple[int, int, int]]]:
    """The batch cut into chunks of at most chunk_tokens, in order: documents packed, a longer
    one split into slices (the slices of one document in order, each carrying K/V)."""
    chunks, current, room = [], [], chunk_tokens
    for seq, n in enumerate(lengths):
        start = 0
        while start < n:
            take = min(room, n - start)
            current.append((seq, start, start + take))
            start, room = start + take, room - take
            if room == 0:
                chunks.append(current)
                current, room = [], chunk_tokens
    if current:
        chunks.append(current)
    return chunks


def tokens_of(lengths: list[int], vocab: int, seed: int) -> list[torch.Tensor]:
    """Random token ids of the given lengths, the same for a seed."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lengths]


def start(p: argparse.ArgumentParser) -> tuple[argparse.Namespace, torch.device, torch.dtype, dict]:
    """The arguments (refused without CUDA unless --smoke), this rank's device and dtype (bf16 on
    the GPU, float32 for the smoke run on the CPU), and the result's header; torchrun's
    variables set for a single process where it was started without torchrun."""
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        p.error("torch sees no CUDA device: this measures a GPU (--smoke runs the code path here)")
    for key, value in dict(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1"
    ).items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(29400 + os.getpid() % 1000))
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    header = dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(),
        device=torch.cuda.get_device_name(device) if cuda else "cpu",
        torch=torch.__version__,
        dtype=str(dtype),
    )
    return args, device, dtype, header
