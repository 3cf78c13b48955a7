"""Prints torch's version, its CUDA and its NCCL ("none" for either when absent), ';'-separated:
what python/CMakeLists.txt records as the torch infinipipe._C is built against."""

import torch

nccl = "none"
if torch.version.cuda:
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except (RuntimeError, AttributeError):  # a CUDA torch built without NCCL
        pass
print(torch.__version__, torch.version.cuda or "none", nccl, sep=";")
