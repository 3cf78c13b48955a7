"""The cost model a trainer measures itself: PlanConfig(cost_model="profile").

The analytic cost model's coefficients are published peak figures of a built-in hardware, not
this machine's, so its step times can be several times off (a CPU step predicted at 0.66 s ran
2.6 s). With "profile", the trainer times one decoder layer of its model's shape at the
"training" grid of (tokens, context) points (profile.py; about 7 s for the tiny LLaMA on one
core) on every rank at once, so each runs beside the others as in training, fits the
coefficients and plans with rank 0's fit on every rank (the ranks must plan alike). The cost
JSON is cached by what it depends on: model shape and dtype, layer split, the CPU's model, the
threads per rank, the ranks on the host, the torch and InfiniPipe versions and what the profiler
measures (profile.MEASURES); a later run on the same machine loads it. The cache lives in
$INFINIPIPE_CACHE_DIR, else ~/.cache/infinipipe. It cannot know the load it was measured under,
so the trainer checks a cached profile against its first steps (StaleProfileCheck) and profiles
again when its predictions are more than STALE_ERROR off (docs/runtime.md, "Profiled by the
trainer").

With sequence parallelism (d_s > 1) every rank also times the Ulysses all-to-all over its
sequence group (profiling/alltoall.py: all_to_all_single at 4 KiB to 4 MiB per rank, bandwidth and
latency fitted), and the cost JSON carries the fitted link (alltoall_bandwidth,
alltoall_latency_s), which the cost model charges for every all-to-all inside a host instead of
the "cpu" hardware's send/recv figures. Its cache key then adds d_s and the measurement's
version (the ranks on the host are in it already); without SP the key is what it was.

It profiles the built-in LLaMA layer of the model's shape (a transformers model of the same
shape runs the same operations) on the trainer's device: on a GPU at the "gpu" grid (256 to 16K
tokens, contexts to 96K; about a minute for a LLaMA-7B layer on an H200, measured 2026-11-29 with
`python -m infinipipe profile --device cuda`), over the built-in h100 hardware's analytic
terms, the GPU's model in the cache key.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from .. import __version__
from ..distributed.agreement import digest
from ..models import llama
from ..planning.cost_model import model_shape_json

_log = logging.getLogger("infinipipe")

PROFILE = "profile"  # the PlanConfig.cost_model value asking for it
GRID = "training"  # on the CPU
GPU_GRID = "gpu"  # on a GPU: its chunks are larger and its contexts longer
CPU = torch.device("cpu")
CACHED = "profiled on this machine"  # how a cost model loaded from the cache is named
# Issue 12, item 5: a prediction a user can trust is within 15% of the measured step (medians
# over the run). The check sees only the run's first steps, so it asks for less: on 2026-11-28 the
# README's example passed a check at 15% and its 40 steps' medians came out +16% (0.828 s
# predicted, 0.711 s measured).
STALE_ERROR = 0.10


def cache_dir() -> Path:
    configured = os.environ.get("INFINIPIPE_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "infinipipe"


def grid_for(device: torch.device) -> str:
    return GRID if device.type == "cpu" else GPU_GRID


def cache_path(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    ranks_on_host: int,
    sequence: int = 1,
    device: torch.device = CPU,
) -> Path:
    """Where the cost JSON of this model, split and machine set-up is cached; with `sequence`
    above 1 a profile holding the all-to-all over that many ranks (another key), on a GPU one
    of that GPU's model (another key; the CPU's keys are as before)."""
    from .alltoall import VERSION
    from .layer_profile import MEASURES, cpu_model, device_model

    parts: list = [
        model_shape_json(config, config.dtype),
        list(layers_per_stage),
        cpu_model(),
        platform.machine(),
        torch.get_num_threads(),
        int(ranks_on_host),
        torch.__version__,
        __version__,
        GRID,
        MEASURES,
    ]
    if sequence > 1:
        parts.append(dict(alltoall=VERSION, sequence=int(sequence)))
    if device.type != "cpu":
        parts.append(dict(device=device_model(device), grid=grid_for(device)))
    return cache_dir() / f"cost-{digest(*parts)}.json"


def profile_cost_json(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    link: dict | None = None,
    device: torch.device = CPU,
) -> str:
    """Profiles one layer of the config's shape here, on `device`, and returns the cost JSON
    text, with the all-to-all `link` measured (alltoall.measure) when given."""
    from .alltoall import with_link
    from .layer_profile import cost_json, hardware_of, profile

    measured = profile(config, grid=grid_for(device), progress=False, device=device)
    cost = json.dumps(
        cost_json(
            config,
            layers_per_stage,
            measured["calibration"],
            measured["activation_bytes"],
            hardware_of(device),
        )
    )
    return with_link(cost, link) if link is not None else cost


def write_cache(path: Path, text: str) -> None:
    """Atomically (a reader never sees half a file); a cache that cannot be written only costs
    a profile next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".tmp-{os.getpid()}")
        temporary.write_text(text)
        temporary.replace(path)
    except OSError:
        pass


class AgreedCost(NamedTuple):
    """A profiled cost model every rank agreed on."""

    text: str  # the cost JSON
    name: str  # how the steps' reports name it
    path: Path  # its cache file
    check: bool  # worth checking against the measured steps (StaleProfileCheck)


def agreed_cost_json(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    ranks_on_host: int,
    device: torch.device,
    gather: Callable[[str], list[str]],
    sequence: int = 1,
    measure_link: Callable[[], dict] | None = None,
) -> AgreedCost:
    """The same on every rank: rank 0's cache, or rank 0's fit of a profile every rank runs at
    once. `gather` is the executor's all-gather of text (bounded by the trainer's timeout, a
    lost rank named). With `sequence` above 1, `measure_link` times the all-to-all over this
    rank's sequence group (a collective every rank calls at once, before the layer's profile,
    while the ranks are in step). A cached profile is worth checking unless one measured again
    missed as well (record_check)."""
    if sequence > 1 and measure_link is None:
        raise ValueError("agreed_cost_json: sequence > 1 needs measure_link")
    path = cache_path(config, layers_per_stage, ranks_on_host, sequence, device)
    cached = path.read_text() if path.is_file() else None
    missed = _missed(path) if cached is not None else None
    state = "profile" if cached is None else "cached" if missed is None else f"missed {missed!r}"
    decision = gather(state)[0]
    if decision == "profile":
        text = _profiled_everywhere(
            config, layers_per_stage, gather, sequence, measure_link, device
        )
        write_cache(path, text)
        record_check(path, 0.0)
        name = f"profiled now on this machine ({_what(text, sequence, device)}; cached in {path})"
        return AgreedCost(text, name, path, check=False)
    text = gather(cached if cached is not None else "")[0]  # rank 0's
    if cached is None:
        write_cache(path, text)
    name = f"{CACHED} ({_what(text, sequence, device)}; cached in {path})"
    if decision != "cached":
        error = float(decision.split()[1])
        name += f"; measured again, it still predicted {error:+.0%} off: not checked again"
    return AgreedCost(text, name, path, check=decision == "cached")


def reprofiled_cost_json(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    ranks_on_host: int,
    device: torch.device,
    gather: Callable[[str], list[str]],
    error: float,
    sequence: int = 1,
    measure_link: Callable[[], dict] | None = None,
) -> AgreedCost:
    """As agreed_cost_json, for a cached profile that StaleProfileCheck found `error` off:
    profiled again on every rank at once, rank 0's fit replacing the cache; worth checking in
    turn (whatever the load, a profile can miss steps it does not model: record_check)."""
    path = cache_path(config, layers_per_stage, ranks_on_host, sequence, device)
    text = _profiled_everywhere(config, layers_per_stage, gather, sequence, measure_link, device)
    write_cache(path, text)
    name = (
        f"profiled again on this machine: the cached profile's predictions were {error:+.0%} "
        f"off the measured steps ({_what(text, sequence, device)}; cached in {path})"
    )
    return AgreedCost(text, name, path, check=True)


def record_check(path: Path, error: float) -> None:
    """Notes beside the cache when a profile measured again still predicted `error` beyond
    STALE_ERROR off the steps: the load was not what it missed (for example per-step overheads
    of tiny steps, which the layer's profile does not see), so later runs do not profile again
    for nothing. An error within it removes the note."""
    note = path.with_suffix(".missed")
    if abs(error) <= STALE_ERROR:
        note.unlink(missing_ok=True)
        return
    write_cache(note, repr(error))
    _log.warning(
        "the profile measured again still predicts the steps %+.0f%% off: the load is not what "
        "it misses; later runs will not profile again for it (%s)",
        error * 100,
        note,
    )


def _missed(path: Path) -> float | None:
    try:
        return float(path.with_suffix(".missed").read_text())
    except (OSError, ValueError):
        return None


def _profiled_everywhere(
    config: llama.LlamaConfig,
    layers_per_stage: Sequence[int],
    gather: Callable[[str], list[str]],
    sequence: int,
    measure_link: Callable[[], dict] | None,
    device: torch.device,
) -> str:
    """Every rank profiles at once, so each runs beside the others as in training; rank 0's."""
    link = measure_link() if sequence > 1 and measure_link is not None else None
    return gather(profile_cost_json(config, layers_per_stage, link, device))[0]


def _what(text: str, sequence: int, device: torch.device) -> str:
    where = "" if device.type == "cpu" else f" on {device}"
    if sequence > 1:
        return (
            f"{grid_for(device)} grid{where} and the all-to-all over {sequence} ranks: "
            f"{_link_text(text)}"
        )
    return f"{grid_for(device)} grid{where}"


class StaleProfileCheck:
    """Whether a profile loaded from the cache still predicts this machine's steps. The cache
    cannot know the load it was measured under (docs/runtime.md, "Profiled by the trainer"): a
    profile taken while other work ran predicts every later run slow until it is measured
    again. After `steps` steps (the first one left out: it warms the allocator and its plan is
    never planned ahead), `add` returns the error of the medians, predicted / measured - 1."""

    def __init__(self, steps: int, profiled_again: bool = False) -> None:
        self.steps = steps
        self.profiled_again = profiled_again  # of a profile measured as the cached one missed
        self._measured: list[float] = []
        self._predicted: list[float] = []
        self._skipped = False

    def add(self, measured_s: float, predicted_s: float) -> float | None:
        if not self._skipped:
            self._skipped = True
            return None
        self._measured.append(measured_s)
        self._predicted.append(predicted_s)
        if len(self._measured) < self.steps:
            return None
        return statistics.median(self._predicted) / statistics.median(self._measured) - 1


def _link_text(cost_json_text: str) -> str:
    coefficients = json.loads(cost_json_text)["coefficients"]
    bandwidth = coefficients.get("alltoall_bandwidth", 0.0)
    if not bandwidth:  # a file edited by hand: the in-node link charges it
        return "not in the file"
    latency = coefficients.get("alltoall_latency_s", 0.0)
    return f"{bandwidth / 1e9:.3g} GB/s, {latency * 1e6:.3g} us"
