// The parts of infinipipe._C, each bound in its own file (module.cc calls them).
#pragma once

#include <pybind11/pybind11.h>

namespace infinipipe::python {

// infinipipe._C.plan: cost models, plans and the planner; also registers infinipipe._C.Error.
void bind_plan(pybind11::module_& m);
// Inside infinipipe._C.plan (bind_plan calls it): calibration fits and profile grids.
void bind_calibration(pybind11::module_& plan);
// infinipipe._C.runtime: chunk contexts, Python stage modules and the executor.
void bind_runtime(pybind11::module_& m);
// infinipipe._C.models: C++ stage modules (after bind_runtime, which registers their base).
void bind_models(pybind11::module_& m);

}  // namespace infinipipe::python
