// infinipipe._C.plan's calibration: the fit behind `python -m infinipipe profile` and
// infinipipe-profile (cost/calibration.h), and the profile grids. No LibTorch here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/calibration.h"

namespace py = pybind11;

namespace infinipipe::python {

void bind_calibration(py::module_& m) {
  py::class_<Calibration>(m, "Calibration", "Fitted time coefficients and their held-out errors.")
      .def_readonly("a1", &Calibration::a1)
      .def_readonly("a2", &Calibration::a2)
      .def_readonly("b", &Calibration::b)
      .def_readonly("backward_ratio", &Calibration::backward_ratio)
      .def_readonly("backward_a1", &Calibration::backward_a1)
      .def_readonly("backward_a2", &Calibration::backward_a2)
      .def_readonly("backward_b", &Calibration::backward_b)
      .def_readonly("attention_query_cuts", &Calibration::attention_query_cuts)
      .def_readonly("a1_by_query", &Calibration::a1_by_query)
      .def_readonly("backward_a1_by_query", &Calibration::backward_a1_by_query)
      .def_readonly("embedding_s_per_token", &Calibration::embedding_s_per_token)
      .def_readonly("head_s_per_token", &Calibration::head_s_per_token)
      .def_readonly("checkpointed_forward_ratio", &Calibration::checkpointed_forward_ratio)
      .def_readonly("fit", &Calibration::fit, "Indices of the layer samples fitted.")
      .def_readonly("held_out", &Calibration::held_out, "Indices of the layer samples held out.")
      .def_readonly("forward_median_error", &Calibration::forward_median_error)
      .def_readonly("forward_max_error", &Calibration::forward_max_error)
      .def_readonly("backward_median_error", &Calibration::backward_median_error)
      .def_readonly("backward_max_error", &Calibration::backward_max_error)
      .def("forward_s", &Calibration::forward_s, py::arg("tokens"), py::arg("context"))
      .def("backward_s", &Calibration::backward_s, py::arg("tokens"), py::arg("context"))
      .def("to_json", [](const Calibration& c) { return nlohmann::json(c).dump(); });
  m.def(
      "calibrate",
      [](const std::vector<py::tuple>& layer,
         const std::vector<std::pair<int64_t, double>>& embedding,
         const std::vector<std::pair<int64_t, double>>& head, double holdout_fraction,
         uint64_t seed, const std::vector<int64_t>& attention_query_cuts) {
        CalibrationSamples samples;
        for (const py::tuple& t : layer) {
          check(t.size() >= 4 && t.size() <= 6,
                "calibrate: a layer sample is (tokens, context, forward_s, backward_s[, "
                "checkpointed_forward_s[, recomputed_s]]), got " +
                    std::to_string(t.size()) + " values");
          auto optional = [&](size_t i) { return t.size() > i ? t[i].cast<double>() : 0.0; };
          samples.layer.push_back({t[0].cast<int64_t>(), t[1].cast<int64_t>(), t[2].cast<double>(),
                                   t[3].cast<double>(), optional(4), optional(5)});
        }
        for (const auto& [s, t] : embedding) samples.embedding.push_back({s, t});
        for (const auto& [s, t] : head) samples.head.push_back({s, t});
        return calibrate(samples, {holdout_fraction, seed, attention_query_cuts});
      },
      py::arg("layer"), py::arg("embedding") = std::vector<std::pair<int64_t, double>>{},
      py::arg("head") = std::vector<std::pair<int64_t, double>>{},
      py::arg("holdout_fraction") = CalibrationOptions{}.holdout_fraction,
      py::arg("seed") = CalibrationOptions{}.seed,
      py::arg("attention_query_cuts") = std::vector<int64_t>{},
      "Fits a1 (one per query regime of attention_query_cuts, when given), a2, b, a3 and the "
      "backward's a1', a2', b', a3' (non-negative) and the backward "
      "ratio to layer samples (tokens, context, forward_s, backward_s[, "
      "checkpointed_forward_s[, recomputed_s]]), r (checkpointed_forward_ratio) when every "
      "sample has the fifth value (net of the sixth when every sample has it too: "
      "cost/calibration.h), and per-token times to embedding and head samples (tokens, seconds), "
      "holding out a seeded fraction of the layer samples.");
  m.def("apply_calibration", &apply_calibration, py::arg("cost"), py::arg("calibration"),
        "The cost model with the calibrated time coefficients; everything else kept.");
  py::class_<LinkFit>(m, "LinkFit", "A link's fitted bandwidth (bytes/s) and latency (s).")
      .def_readonly("bandwidth", &LinkFit::bandwidth)
      .def_readonly("latency_s", &LinkFit::latency_s)
      .def_readonly("median_error", &LinkFit::median_error)
      .def_readonly("max_error", &LinkFit::max_error)
      .def("seconds", &LinkFit::seconds, py::arg("sent_bytes"))
      .def("to_json", [](const LinkFit& f) { return nlohmann::json(f).dump(); });
  m.def(
      "fit_link",
      [](const std::vector<std::pair<double, double>>& samples) {
        std::vector<LinkSample> s;
        for (const auto& [bytes, seconds] : samples) s.push_back({bytes, seconds});
        return fit_link(s);
      },
      py::arg("samples"),
      "Fits bandwidth and latency (non-negative relative least squares) to (sent_bytes, "
      "seconds) samples of one link, as the cost model charges an all-to-all.");
  m.def("apply_alltoall_link", &apply_alltoall_link, py::arg("cost"), py::arg("link"),
        "The cost model with its in-node all-to-all link set to the fit; everything else kept.");
  m.def(
      "robust_time",
      [](const std::vector<double>& runs, const std::string& statistic) {
        return robust_time(runs, parse_statistic(statistic));
      },
      py::arg("runs"), py::arg("statistic") = "median",
      "One time from repeated runs: 'min', 'median' or 'trimmed_mean'.");
  m.def(
      "profile_grid",
      [](const std::string& name) {
        const ProfileGrid g = profile_grid(name);
        std::vector<std::pair<int64_t, int64_t>> points;
        for (const GridPoint& p : g.points()) points.emplace_back(p.tokens, p.context);
        return py::make_tuple(points, g.repeats, g.min_timed_tokens);
      },
      py::arg("name"),
      "([(tokens, context)], repeats, min_timed_tokens) of the grid 'quick', 'training', 'full' "
      "or 'gpu' (cost/profile_grid.h).");
}

}  // namespace infinipipe::python
