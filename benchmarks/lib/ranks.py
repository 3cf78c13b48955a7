"""What the torchrun benchmark scripts share: gathering a value from every rank, and leaving."""

import os
import sys

import torch.distributed as dist


def gathered(value):
    """Every rank's `value`, in rank order."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    return everyone


def leave():
    """Ends the rank once everything is written. These scripts' own collectives (gathered, and
    the torch peer's) leave Python-owned tensors with Gloo's worker thread, which can release them
    during interpreter teardown and abort ("terminate called without an active exception") after
    all work is done. The Trainer avoids that (its agreement gathers in C++); here the process
    leaves without teardown."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
