"""How a rank runs its stage (RuntimeConfig): the Trainer's settings that are neither the plan's
(planning/config.py) nor the layout's (distributed/layout.py)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from .mixed_precision import default_master_dtype

# master_dtype's default: float32 masters for a 16-bit model, none otherwise (mixed_precision.py).
DEFAULT = "default"
# The longest wait for a peer timeout_s may ask for.
MAX_TIMEOUT_S = 365 * 24 * 3600


@dataclass(frozen=True)
class RuntimeConfig:
    """dtype: the model's (None: the model config's). master_dtype: the dtype of the master
        weights the optimizer steps (mixed_precision.py); "default" is float32 for a
        bfloat16/float16 model and none (the optimizer steps the model's own parameters)
        otherwise.
    timeout_s: how long any rank waits for a peer before declaring it lost (seconds, at most a
        year: a finite wait, which every backend can keep).
    seed: the model's initialisation (every layer split holds the same weights).
    attention_backend: the chunk attention's kernels ("auto", "flash", "varlen", "math";
        kernels/chunk_attention.h).
    flush_denormal: True sets torch.set_flush_denormal(True) for this process: on the CPU,
        numbers below the normal range (1.2e-38 in float32) become zero. Recommended for
        training on a CPU (the example and the benchmarks set it): without it, an Intel Xeon ran
        the README example's steps up to 6x slower once training had made some values denormal
        (from about step 23 of 40). Off by default because the setting is the whole process's,
        Python's own float arithmetic included (docs/runtime.md, "Denormal numbers on the CPU").
    pause_gc: True turns Python's garbage collector off while the pipeline runs (a step's
        forwards and backwards, an evaluation) and back on when the run ends, so that what is
        due is collected outside the pipeline: a collection in the middle of an action stalls
        every rank waiting for this one (torchtitan's gc_freq and Megatron-LM's --manual-gc take
        it out of the step for that reason). Off by default: on a 2-core CPU it changed the
        step by 0.99-1.04x (docs/runtime.md, "Python's garbage collector"). A collector the
        caller turned off stays off.
    max_nonfinite_skips: how many optimizer steps in a row may be skipped because the loss or
        a gradient was NaN or infinite on some rank (every rank skips such a step together,
        with a warning) before the trainer raises NonfiniteError; 0 raises at the first.
        5 lets a rare bad batch pass and stops a run that has diverged within a few steps
        (Megatron-LM's --check-for-nan-in-loss-and-grad raises at the first; DeepSpeed's fp16
        loss scaler skips steps until its scale reaches a floor).
    share_gpus: True lets a node run more ranks than it has GPUs, rank r on GPU r % count, over
        Gloo with every pipeline message staged through host memory (NCCL refuses two ranks on
        one GPU): for testing a multi-stage layout on one GPU, not for speed. Off by default:
        more ranks than GPUs is then an error, as it is most often a launch mistake.
    """

    dtype: torch.dtype | None = None
    master_dtype: torch.dtype | None | str = DEFAULT
    timeout_s: float = 300.0
    seed: int = 0
    attention_backend: str = "auto"
    flush_denormal: bool = False
    pause_gc: bool = False
    max_nonfinite_skips: int = 5
    share_gpus: bool = False

    def __post_init__(self) -> None:
        skips = self.max_nonfinite_skips
        if isinstance(skips, bool) or not isinstance(skips, int) or skips < 0:
            raise ValueError(f"max_nonfinite_skips must be a whole number >= 0, got {skips!r}")
        try:
            timeout = float(self.timeout_s)
        except (TypeError, ValueError):
            timeout = math.nan
        # The waits become timedeltas, C++ milliseconds and deadlines on the backends' clocks
        # (int64 nanoseconds: 292 years): inf overflows them all, so a wait without end is a
        # long finite one.
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(
                f"timeout_s must be a positive number of seconds up to {MAX_TIMEOUT_S:,} (a "
                f"year), got {self.timeout_s!r}; for a wait without end give a long one (e.g. "
                "86400, a day)"
            )

    def resolved(self, model_dtype: torch.dtype) -> RuntimeConfig:
        """This config with its defaults filled in for a model of `model_dtype`."""
        dtype = self.dtype if self.dtype is not None else model_dtype
        master = self.master_dtype
        return dataclasses.replace(
            self,
            dtype=dtype,
            master_dtype=default_master_dtype(dtype) if master == DEFAULT else master,
        )
