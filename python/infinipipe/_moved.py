"""0.1's module names (infinipipe.trainer, infinipipe.layout, ...) as aliases of the modules that
hold their contents now, with a DeprecationWarning on import; they go in 0.2."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

# old module -> the modules its public names live in now (first match wins)
MOVED = {
    "agreement": ["distributed.agreement"],
    "alltoall_profile": ["profiling.alltoall"],
    "checkpoint": ["state.checkpoint"],
    "checkpoint_files": ["state.files"],
    "checkpoint_state": ["state.contents"],
    "collector": ["training.gc_pause"],
    "cost": ["planning.cost_model"],
    "failure_board": ["distributed.failure_board"],
    "layout": ["distributed.layout"],
    "memory_meter": ["training.memory_meter"],
    "metrics": ["training.metrics"],
    "mixed_precision": ["training.mixed_precision"],
    "plan_config": ["planning.config"],
    "planning_ahead": ["planning.ahead"],
    "profile": ["profiling.layer_profile", "profiling.neighbours"],
    "profile_cli": ["profiling.cli"],
    "profiled_cost": ["profiling.profiled_cost"],
    "rendezvous": ["distributed.rendezvous", "distributed.exit_hooks"],
    "results": ["training.results"],
    "stage_adapter": ["models.stage_protocol"],
    "stage_balance": ["planning.stage_balance"],
    "stage_group": ["distributed.gradient_group"],
    "step_input": ["training.step_input"],
    "trainer": ["training.trainer", "training.results"],
}
_PACKAGE = __name__.rpartition(".")[0]


class _Alias(types.ModuleType):
    """Reads each name from the modules that hold it now."""

    def __init__(self, name: str, targets: list[str]) -> None:
        super().__init__(name)
        self._targets = [f"{_PACKAGE}.{t}" for t in targets]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for t in self._targets for n in dir(importlib.import_module(t))})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        package, _, old = fullname.rpartition(".")
        if package == _PACKAGE and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        old = spec.name.rpartition(".")[2]
        new = ", ".join(f"{_PACKAGE}.{t}" for t in MOVED[old])
        warnings.warn(
            f"{spec.name} is deprecated and goes in 0.2: import from {new} (or from "
            f"{_PACKAGE} itself for its public names)",
            DeprecationWarning,
            stacklevel=2,
        )
        return _Alias(spec.name, MOVED[old])

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
