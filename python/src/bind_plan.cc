// Over 400 lines for a reason: one face of _C, the planning core: cost models, plans, the
// planner's options and entry point, sharing the JSON conversions; calibration is its own file.
// infinipipe._C.plan: the planning core as the Python trainer needs it. No LibTorch here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/chunk.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/data/length_sampler.h"
#include "infinipipe/plan/plan.h"
#include "infinipipe/planner/data_split.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/stage_balance.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/memory_timeline.h"
#include "infinipipe/sim/simulator.h"

namespace py = pybind11;

namespace infinipipe::python {

namespace {

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON: " + e.what());
  }
}

// "cpu", "a800" or a hardware description in JSON text.
ParallelLayout layout_of(int sequence, int data, int zero, int gpus_per_node) {
  ParallelLayout layout;
  layout.sequence = sequence;
  layout.data = data;
  layout.zero = zero;
  layout.gpus_per_node = gpus_per_node;
  layout.validate();
  return layout;
}

Hardware hardware_from(const std::string& spec) {
  if (!spec.empty() && spec.front() == '{') {
    Hardware hw = parse_json(spec, "hardware").get<Hardware>();
    hw.validate();
    return hw;
  }
  return Hardware::builtin(spec);
}

std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> chunk_list(const Plan& plan) {
  std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> out;
  for (const Chunk& c : plan.chunks) {
    out.emplace_back();
    for (const Slice& s : c.slices) out.back().emplace_back(s.seq, s.start, s.end);
  }
  return out;
}

std::vector<std::vector<std::string>> schedule_text(const Plan& plan) {
  std::vector<std::vector<std::string>> out;
  for (const auto& stage : plan.schedule.stages) {
    out.emplace_back();
    for (const Action& a : stage) out.back().push_back(a.text());
  }
  return out;
}

py::dict summary(const Plan& plan) {
  py::dict d;
  d["method"] = to_string(plan.method);
  d["setting"] = describe(plan.method, plan.setting);
  d["hash"] = plan.hash();
  d["sequences"] = plan.lengths.size();
  d["tokens"] = plan.tokens();
  d["chunks"] = plan.chunks.size();
  std::map<std::string, int> kinds{{"packed", 0}, {"split", 0}, {"hybrid", 0}};
  for (const Chunk& c : plan.chunks) ++kinds[to_string(c.kind())];
  d["chunk_kinds"] = kinds;
  d["waves"] = plan.waves.size();
  // Per stage, the chunks whose LM head and loss run there (the last stage's F runs every head
  // the plan does not spread: docs/design.md, "Spread head").
  std::vector<int> heads(plan.schedule.num_stages(), 0);
  for (int stage : plan.schedule.head_stages(static_cast<int>(plan.chunks.size())))
    ++heads[stage >= 0 ? stage : static_cast<int>(heads.size()) - 1];
  d["heads_per_stage"] = heads;
  d["waves_overlap"] = waves_overlap(plan.schedule, plan.waves);
  int recomputed = 0;
  for (const auto& stage : plan.recompute)
    for (int layers : stage) recomputed += layers;
  d["recomputed_layer_chunks"] = recomputed;
  d["predicted_step_s"] = plan.step_time_s;
  d["predicted_recompute_s"] = plan.recompute_s;
  d["predicted_bubble_fraction"] = plan.bubble_fraction;
  d["predicted_busy_s"] = plan.busy_s;  // per stage, recompute included
  d["predicted_peak_memory_bytes"] = plan.peak_memory_bytes;
  d["checkpoint_solver"] = plan.checkpoint_solver;
  d["plan_ms"] = plan.plan_ms;
  // The planner's report (plan/planner_report.h): what the planning call did and the step
  // time's lower bound.
  py::dict planner;
  planner["cpu_ms"] = plan.planner.cpu_ms;
  planner["candidates"] = plan.planner.candidates;
  planner["tried"] = plan.planner.tried;
  planner["pruned"] = plan.planner.pruned;
  planner["recomputed"] = plan.planner.recomputed;
  planner["step_time_lower_bound_s"] = plan.planner.step_time_lower_bound_s;
  planner["predicted_over_bound"] = plan.planner.predicted_over_bound;
  planner["work"] = plan.planner.work;
  planner["budget_exhausted"] = plan.planner.budget_exhausted;
  d["planner"] = planner;
  return d;
}

// fn() on a worker thread while the caller, without the GIL, checks for Python signals every
// 50 ms: on Ctrl-C the planner is told to stop (`cancelled`, looked at between its candidates)
// and KeyboardInterrupt raised once it has. A long plan stays interruptible.
template <class Fn>
auto interruptible(Fn fn, std::atomic<bool>& cancelled) {
  auto result = std::async(std::launch::async, std::move(fn));
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      cancelled = true;
      result.wait();
      throw py::error_already_set();
    }
  }
  return result.get();
}

// The names of a field table (Options::visit_fields).
template <class Options>
std::set<std::string> field_names() {
  std::set<std::string> names;
  Options::visit_fields([&](const char* name, auto, const char*) { names.insert(name); });
  return names;
}

// Each keyword set by name on the planner's options or on the step's setting: the keywords are
// those two field tables' names, so nothing is listed twice.
void set_by_name(const py::kwargs& knobs, PlannerOptions& options, Setting& setting) {
  static const std::set<std::string> kPlanner = field_names<PlannerOptions>();
  static const std::set<std::string> kSetting = field_names<Setting>();
  py::object planner = py::cast(&options, py::return_value_policy::reference);
  py::object step = py::cast(&setting, py::return_value_policy::reference);
  for (const auto& [key, value] : knobs) {
    const std::string name = py::str(key);
    if (kPlanner.count(name)) {
      py::setattr(planner, key, value);
    } else if (kSetting.count(name)) {
      py::setattr(step, key, value);
    } else {
      std::string known;
      for (const auto& n : kSetting) known += " " + n;
      for (const auto& n : kPlanner) known += " " + n;
      throw Error("plan_step: no setting named '" + name + "'; the settings are:" + known);
    }
  }
}

// plan_step from Python: PlannerOptions::for_training with the keywords set, the GIL released
// while it plans.
Plan plan_step_with(const std::vector<int64_t>& lengths, const CostModel& cost,
                    double memory_budget_bytes, const std::string& method,
                    const py::kwargs& knobs) {
  PlannerOptions options = PlannerOptions::for_training(cost.num_stages(), memory_budget_bytes);
  Setting setting;
  set_by_name(knobs, options, setting);
  check(options.search_work_limit >= 0,
        "plan_step: search_work_limit is a count of chunk-stages, 0 for no limit; got " +
            std::to_string(options.search_work_limit));
  const Method parsed = parse_method(method);
  std::atomic<bool> cancelled{false};
  options.cancelled = &cancelled;
  py::gil_scoped_release release;
  return interruptible([&] { return plan_step(parsed, lengths, cost, options, setting); },
                       cancelled);
}

// A field table as Python properties of `cls`, and as `fields()`: (name, default, doc) with the
// defaults of `defaults`.
template <class Options>
void bind_fields(py::class_<Options>& cls, const Options& defaults) {
  Options::visit_fields([&](const char* name, auto member, const char* doc) {
    cls.def_readwrite(name, member, doc);
  });
  cls.def_static(
      "fields",
      [defaults] {
        py::list out;
        Options::visit_fields([&](const char* name, auto member, const char* doc) {
          out.append(py::make_tuple(name, py::cast(defaults.*member), doc));
        });
        return out;
      },
      "(name, default, doc) of every field a user sets, in the C++ table's order.");
  cls.def("__repr__", [](const Options& o) {
    std::string text = "(";
    Options::visit_fields([&](const char* name, auto member, const char*) {
      if (text.size() > 1) text += ", ";
      text += std::string(name) + "=" + std::string(py::repr(py::cast(o.*member)));
    });
    return text + ")";
  });
}

// A plan from given chunks and waves (for tests and experiments): scheduled by the 1F1B chunk
// scheduler, validated, and predicted by the simulator.
Plan build_plan(const std::vector<int64_t>& lengths,
                const std::vector<std::vector<std::tuple<int, int64_t, int64_t>>>& chunk_slices,
                const std::vector<std::vector<int>>& waves, const CostModel& cost,
                const Recompute& recompute, bool overlap_waves, const std::string& zero_bubble) {
  check_lengths(lengths);
  Plan plan;
  plan.method = Method::kEpp;
  plan.lengths = lengths;
  for (const auto& slices : chunk_slices) {
    Chunk chunk;
    for (const auto& [seq, start, end] : slices) {
      check(seq >= 0 && seq < static_cast<int>(lengths.size()),
            "build_plan: sequence " + std::to_string(seq) + " is not in the batch");
      chunk.slices.push_back(Slice{seq, start, end, lengths[seq]});
    }
    plan.chunks.push_back(std::move(chunk));
  }
  check_coverage(plan.chunks, plan.lengths);
  plan.waves = waves;
  ScheduleOptions options;
  options.num_stages = cost.num_stages();
  options.overlap_waves = overlap_waves;
  options.zero_bubble = parse_zero_bubble(zero_bubble);
  plan.setting.zero_bubble = options.zero_bubble;
  plan.schedule = build_schedule(plan.chunks, plan.waves, options);
  plan.layers_per_stage = cost.layers_per_stage();
  plan.recompute = recompute.empty()
                       ? Recompute(cost.num_stages(), std::vector<int>(plan.chunks.size(), 0))
                       : recompute;
  plan.checkpoint_solver = "given";
  plan.validate();
  SimOptions sim_options;
  sim_options.record_events = false;
  const SimResult sim = simulate(plan.schedule, plan.chunks, cost, plan.recompute, sim_options);
  plan.set_prediction(sim);
  return plan;
}

// Peak memory the simulator predicts for each stage when the plan runs on `cost`.
std::vector<double> predicted_peaks(const Plan& plan, const CostModel& cost) {
  SimOptions sim_options;
  sim_options.record_events = false;
  return simulate(plan.schedule, plan.chunks, cost, plan.recompute, sim_options).peak_memory_bytes;
}

// Per stage, the part of that peak a run's MemoryMeter can observe (sim/memory_timeline.h).
std::vector<double> predicted_activation_peaks(const Plan& plan, const CostModel& cost) {
  std::vector<double> peaks;
  for (int p = 0; p < plan.schedule.num_stages(); ++p)
    peaks.push_back(
        observable_activation_peak(plan.schedule, p, plan.chunks, cost, plan.recompute));
  return peaks;
}

// Every compute action the simulator times when the plan runs on `cost`, in its order:
// (stage, action text, category, seconds), a B's recompute apart from the rest of it.
std::vector<std::tuple<int, std::string, std::string, double>> predicted_actions(
    const Plan& plan, const CostModel& cost) {
  SimOptions sim_options;
  sim_options.record_events = true;
  std::vector<std::tuple<int, std::string, std::string, double>> out;
  for (const SimEvent& e :
       simulate(plan.schedule, plan.chunks, cost, plan.recompute, sim_options).events)
    if (e.category != "send" && e.category != "recv")
      out.emplace_back(e.stage, e.name, e.category, e.end_s - e.start_s);
  return out;
}

}  // namespace

void bind_plan(py::module_& root) {
  py::register_exception<Error>(root, "Error", PyExc_RuntimeError);
  py::module_ m = root.def_submodule("plan", "Cost models, plans and the planner");

  py::class_<CostModel>(m, "CostModel",
                        "Time and memory of chunks on pipeline stages (cost/cost_model.h).")
      .def_static(
          "analytic",
          [](const std::string& shape_json, const std::string& hardware,
             const std::vector<int>& layers_per_stage, int sequence, int data, int zero,
             int gpus_per_node) {
            ModelShape shape = parse_json(shape_json, "model shape").get<ModelShape>();
            shape.validate();
            const Hardware hw = hardware_from(hardware);
            return CostModel(shape, layers_per_stage, CostCoefficients::analytic(shape, hw),
                             layout_of(sequence, data, zero, gpus_per_node));
          },
          py::arg("shape_json"), py::arg("hardware"), py::arg("layers_per_stage"),
          py::arg("sequence") = 1, py::arg("data") = 1, py::arg("zero") = 1,
          py::arg("gpus_per_node") = 8,
          "Analytic coefficients from a model shape (JSON text with the fields of ModelShape) "
          "and a hardware ('cpu', 'a800' or JSON text); the parallel layout (cost/"
          "parallel_layout.h): sequence = d_s Ulysses ranks per stage, data = d_r replicas, "
          "zero = ZeRO level, gpus_per_node. Times and bytes are then one rank's.")
      .def_static("load", &load_cost_model, py::arg("path"), "A cost model JSON file.")
      .def_static(
          "from_json",
          [](const std::string& text) { return parse_json(text, "cost model").get<CostModel>(); },
          py::arg("text"))
      .def("to_json", [](const CostModel& c) { return nlohmann::json(c).dump(); })
      .def_property_readonly("num_stages", &CostModel::num_stages)
      .def_property_readonly("layers_per_stage", &CostModel::layers_per_stage)
      .def_property_readonly("shape_json",
                             [](const CostModel& c) { return nlohmann::json(c.shape()).dump(); })
      .def("model_state_bytes", &CostModel::model_state_bytes, py::arg("stage"))
      .def(
          "with_layout",
          [](const CostModel& c, int sequence, int data, int zero, int gpus_per_node) {
            ParallelLayout layout;
            layout.sequence = sequence;
            layout.data = data;
            layout.zero = zero;
            layout.gpus_per_node = gpus_per_node;
            return CostModel(c.shape(), c.layers_per_stage(), c.coefficients(), layout);
          },
          py::arg("sequence") = 1, py::arg("data") = 1, py::arg("zero") = 1,
          py::arg("gpus_per_node") = 8,
          "This cost model for one rank of the parallel layout (cost/parallel_layout.h): d_s "
          "sequence ranks per stage, d_r replicas, the ZeRO level; Error when d_s does not "
          "divide the heads and KV heads.")
      .def_property_readonly("layout", [](const CostModel& c) {
        const ParallelLayout& l = c.layout();
        return py::dict(py::arg("sequence") = l.sequence, py::arg("data") = l.data,
                        py::arg("zero") = l.zero, py::arg("gpus_per_node") = l.gpus_per_node);
      });
  m.def(
      "split_over_replicas", &split_over_replicas, py::arg("lengths"), py::arg("cost"),
      py::arg("replicas"),
      "The batch split over data-parallel replicas by predicted cost (planner/data_split.h): each "
      "replica's sequence indices, ascending; the same on every rank.");

  py::class_<Plan>(m, "Plan", "One training step's plan (plan/plan.h).")
      .def("hash", &Plan::hash, "16 hex digits over the executable part (not predictions).")
      .def("summary", &summary,
           "A dict: method, setting, hash, chunks, waves, predictions, and the planner's report "
           "(\"planner\": cpu_ms, candidates, tried, pruned, recomputed, step_time_lower_bound_s, "
           "predicted_over_bound, work, budget_exhausted).")
      .def("to_json", [](const Plan& p) { return nlohmann::json(p).dump(); })
      .def_static(
          "from_json", [](const std::string& text) { return parse_json(text, "plan").get<Plan>(); },
          py::arg("text"))
      .def("validate", &Plan::validate, "Error unless coverage, schedule and recompute are valid.")
      .def("__copy__", [](const Plan& p) { return Plan(p); })
      .def(
          "__deepcopy__", [](const Plan& p, py::dict) { return Plan(p); }, py::arg("memo"))
      .def_property_readonly("method", [](const Plan& p) { return to_string(p.method); })
      .def_property_readonly(
          "k",
          [](const Plan& p) {
            const bool own = p.method == Method::kEpp && p.setting.chunker == Method::kEpp;
            return own ? p.setting.epp_k : p.setting.k;
          },
          "EPP's K on its own chunks, else the setting's k (Seq1F1B's slices per micro-batch).")
      .def_property_readonly("lengths", [](const Plan& p) { return p.lengths; })
      .def_property_readonly("layers_per_stage", [](const Plan& p) { return p.layers_per_stage; })
      .def_property_readonly("num_chunks", [](const Plan& p) { return p.chunks.size(); })
      .def_property_readonly("chunks", &chunk_list,
                             "Per chunk, its slices as (sequence, start, end).")
      .def_property_readonly("chunk_kinds",
                             [](const Plan& p) {
                               std::vector<std::string> kinds;
                               for (const Chunk& c : p.chunks) kinds.push_back(to_string(c.kind()));
                               return kinds;
                             })
      .def_property_readonly("waves", [](const Plan& p) { return p.waves; })
      .def_property_readonly("schedule", &schedule_text, "Per stage, its actions' text forms.")
      .def_property(
          "recompute", [](const Plan& p) { return p.recompute; },
          [](Plan& p, const Recompute& r) {
            Recompute old = std::move(p.recompute);
            p.recompute = r;
            try {
              p.validate();
            } catch (...) {
              p.recompute = std::move(old);
              throw;
            }
          },
          "recompute[stage][chunk]: layers of the stage the chunk checkpoints. Settable (it "
          "changes the hash; predictions are not updated).")
      .def_property_readonly("peak_memory_bytes", [](const Plan& p) { return p.peak_memory_bytes; })
      .def_property_readonly("step_time_s", [](const Plan& p) { return p.step_time_s; })
      .def("predicted_peaks", &predicted_peaks, py::arg("cost"),
           "Per stage, the peak memory the simulator predicts with the plan's current recompute.")
      .def("predicted_actions", &predicted_actions, py::arg("cost"),
           "Every compute action the simulator times with `cost`: (stage, text, category, "
           "seconds), category forward, recompute (a B's, before the rest of it), backward or "
           "head.")
      .def("predicted_activation_peaks", &predicted_activation_peaks, py::arg("cost"),
           "Per stage, the part of the predicted peak that saved-tensor hooks and the "
           "executor's held buffers can observe: no model state, no backward workspace beyond "
           "its saved tensors (docs/runtime.md, 'Memory').")
      .def("__repr__", [](const Plan& p) {
        return "<Plan " + std::string(to_string(p.method)) + " " + describe(p.method, p.setting) +
               ", " + std::to_string(p.chunks.size()) + " chunks, " +
               std::to_string(p.waves.size()) + " waves, hash " + p.hash() + ">";
      });

  // The planner's options and a method's knobs, each defined once in C++ (visit_fields):
  // PlanConfig's fields and plan_step's keywords come from these tables.
  py::class_<PlannerOptions> planner_options(
      m, "PlannerOptions", "The planner's options (planner/planner.h); defaults: the plan tool's.");
  planner_options.def(py::init<>())
      .def_static("for_training", &PlannerOptions::for_training, py::arg("num_stages"),
                  py::arg("memory_budget_bytes"),
                  "The options a trainer plans with: every rank alike (no CBC), K up to 32.");
  bind_fields(planner_options, PlannerOptions::for_training(1, 1));
  py::class_<Setting> setting(m, "Setting", "A method's knobs (plan/plan.h).");
  setting.def(py::init<>());
  bind_fields(setting, Setting{});
  m.def("plan_step", &plan_step_with, py::arg("lengths"), py::arg("cost"),
        py::arg("memory_budget_bytes"), py::arg("method") = "epp",
        "Plans one step of sequences with these lengths: 'epp' searches (K up to max_k, the "
        "baselines' chunkings too unless baseline_chunkings is False), a baseline ('batch', "
        "'seq1f1b', 'chunkflow') plans at the setting given. Keywords: any field of "
        "PlannerOptions or Setting (their fields() say what each does), over "
        "PlannerOptions.for_training. Error when nothing fits the budget.");
  m.def(
      "balanced_layer_split",
      [](const std::vector<std::vector<int64_t>>& steps, const CostModel& cost) {
        return balanced_layer_split(steps, cost);
      },
      py::arg("steps"), py::arg("cost"),
      "Layers per stage with the least busiest stage's compute over the steps (each a list of "
      "sequence lengths) on the cost model's stages, the first embedding and the last running "
      "the head (planner/stage_balance.h); the cost model's own split is not used.");
  m.def(
      "choose_layer_split",
      [](const std::vector<std::vector<int64_t>>& steps, const CostModel& cost,
         double memory_budget_bytes) {
        const LayerSplitChoice choice = choose_layer_split(
            steps, cost, PlannerOptions::for_training(cost.num_stages(), memory_budget_bytes));
        py::list candidates;
        for (const LayerSplitCandidate& c : choice.candidates) {
          py::dict d;
          d["name"] = c.name;
          d["layers_per_stage"] = c.split;
          d["bound_s"] = c.bound_s;
          d["planned"] = c.planned;
          d["feasible_steps"] = c.feasible_steps;
          d["mean_step_s"] = c.mean_step_s;
          d["reason"] = c.reason;
          candidates.append(d);
        }
        py::dict out;
        out["layers_per_stage"] = choice.split;
        out["name"] = choice.name;
        out["candidates"] = candidates;
        return out;
      },
      py::arg("steps"), py::arg("cost"), py::arg("memory_budget_bytes"),
      "The layer split EPP (the trainer's options) plans the steps fastest on, among the even "
      "split, the balanced one and its neighbours (planner/stage_balance.h): a dict with "
      "layers_per_stage, name and every candidate weighed.");
  m.def("build_plan", &build_plan, py::arg("lengths"), py::arg("chunks"), py::arg("waves"),
        py::arg("cost"), py::arg("recompute") = Recompute{}, py::arg("overlap_waves") = false,
        py::arg("zero_bubble") = "off",
        "A plan from explicit chunks (lists of (sequence, start, end)) and waves (lists of chunk "
        "ids), scheduled 1F1B (each wave starting during the previous one's cool-down with "
        "overlap_waves; backwards split into B and W with zero_bubble 'h1', on ZB-H2's longer "
        "warm-up with 'h2') and validated; for "
        "tests and experiments.");
  m.def(
      "epp_chunks",
      [](const std::vector<int64_t>& lengths, int k, const CostModel& cost) {
        Plan holder;
        holder.chunks = epp_chunks(lengths, k, cost);
        return chunk_list(holder);
      },
      py::arg("lengths"), py::arg("k"), py::arg("cost"),
      "EPP's chunking at slice count k: per chunk, its slices as (sequence, start, end) "
      "(with build_plan, an EPP plan at a fixed K).");
  m.def(
      "hardware_json",
      [](const std::string& spec) { return nlohmann::json(hardware_from(spec)).dump(); },
      py::arg("spec"), "A built-in hardware ('cpu', 'a800') or hardware JSON, validated.");
  m.def(
      "describe_setting",
      [](const std::string& method, const std::string& setting_json) {
        const Method m = parse_method(method);
        return describe(m, setting_from_json(m, nlohmann::json::parse(setting_json)));
      },
      py::arg("method"), py::arg("setting_json"),
      "The text of a method's setting given as plan JSON ('K=24 cap=1024 strict', 'cap=98304 "
      "k=2 recompute=3'): the same text as Plan.summary()['setting'] and the plan tool's "
      "setting_text.");
  m.def("sample_lengths", &sample_lengths, py::arg("distribution"), py::arg("batch"),
        py::arg("context"), py::arg("seed"),
        "Sequence lengths of one step from a built-in sampler (distribution_names()), each in "
        "[1, context].");
  m.def("distribution_names", &distribution_names);
  m.def("check_cost_file_split", &check_cost_file_split, py::arg("file"), py::arg("path"),
        py::arg("planned"), py::arg("whose"),
        "Error unless a cost model file's layer split is the one planned (cost/cost_model.h): "
        "the rule the plan tool applies too.");

  bind_calibration(m);
  m.def("methods", [] {
    std::vector<std::string> names;
    for (Method method : all_methods()) names.push_back(to_string(method));
    return names;
  });
}

}  // namespace infinipipe::python
