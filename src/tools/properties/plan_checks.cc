#include "plan_checks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe::properties {

namespace {

// Sums of many doubles in a different order differ in the last bits; anything larger is real.
bool above(double value, double limit) { return value > limit * (1 + 1e-9) + 1e-6; }

bool differ(double a, double b) { return std::abs(a - b) > 1e-9 * std::max(std::abs(a), 1e-9); }

struct Found {
  std::vector<Violation> list;
  void add(const std::string& kind, const std::string& detail) {
    if (list.size() < 16) list.push_back({kind, detail});
  }
};

std::string slice_text(const Slice& s) {
  return "sequence " + std::to_string(s.seq) + " [" + std::to_string(s.start) + ", " +
         std::to_string(s.end) + ")";
}

// Every token in exactly one slice; returns each sequence's chunks in slice order.
std::vector<std::vector<int>> check_coverage_ourselves(const Plan& plan,
                                                       const std::vector<int64_t>& lengths,
                                                       Found& found) {
  const int n = static_cast<int>(lengths.size());
  if (plan.lengths != lengths) found.add("coverage", "the plan's lengths are not the step's");
  std::vector<std::vector<std::pair<Slice, int>>> pieces(n);
  for (int c = 0; c < static_cast<int>(plan.chunks.size()); ++c) {
    std::set<int> seen;
    if (plan.chunks[c].slices.empty())
      found.add("coverage", "chunk " + std::to_string(c) + " is empty");
    for (const Slice& s : plan.chunks[c].slices) {
      if (s.seq < 0 || s.seq >= n || s.seq_length != lengths[s.seq] || s.start < 0 ||
          s.end <= s.start || s.end > s.seq_length) {
        found.add("coverage", "chunk " + std::to_string(c) + " holds " + slice_text(s) +
                                  " outside its sequence");
        continue;
      }
      if (!seen.insert(s.seq).second)
        found.add("coverage", "chunk " + std::to_string(c) + " holds two slices of sequence " +
                                  std::to_string(s.seq));
      pieces[s.seq].push_back({s, c});
    }
  }
  std::vector<std::vector<int>> order(n);
  for (int i = 0; i < n; ++i) {
    auto& p = pieces[i];
    std::sort(p.begin(), p.end(),
              [](const auto& a, const auto& b) { return a.first.start < b.first.start; });
    int64_t covered = 0;
    for (const auto& [slice, chunk] : p) {
      if (slice.start != covered)
        found.add("coverage", "sequence " + std::to_string(i) + ": tokens from " +
                                  std::to_string(std::min(covered, slice.start)) +
                                  (slice.start > covered ? " are in no slice" : " are in two"));
      covered = std::max(covered, slice.end);
      order[i].push_back(chunk);
    }
    if (covered != lengths[i])
      found.add("coverage", "sequence " + std::to_string(i) + " is covered to " +
                                std::to_string(covered) + " of " + std::to_string(lengths[i]));
  }
  // A wave holds whole chains: every chunk in one wave, a sequence's chunks in the same one.
  std::vector<int> wave_of(plan.chunks.size(), -1);
  for (int w = 0; w < static_cast<int>(plan.waves.size()); ++w)
    for (int c : plan.waves[w]) {
      if (c < 0 || c >= static_cast<int>(wave_of.size()) || wave_of[c] != -1)
        found.add("coverage", "chunk " + std::to_string(c) + " is in no wave or in two");
      else
        wave_of[c] = w;
    }
  for (int c = 0; c < static_cast<int>(wave_of.size()); ++c)
    if (wave_of[c] == -1) found.add("coverage", "chunk " + std::to_string(c) + " is in no wave");
  for (int i = 0; i < n; ++i)
    for (size_t k = 1; k < order[i].size(); ++k)
      if (wave_of[order[i][k]] != wave_of[order[i][0]])
        found.add("coverage", "sequence " + std::to_string(i) + " spans two waves");
  return order;
}

// On every stage each chunk forwards once then backwards once, a sequence's slices forward in
// ascending and backward in descending order.
void check_slice_order(const Plan& plan, const std::vector<std::vector<int>>& order, Found& found) {
  const int chunks = static_cast<int>(plan.chunks.size());
  for (int p = 0; p < plan.schedule.num_stages(); ++p) {
    std::vector<int> fwd(chunks, -1), bwd(chunks, -1);
    const auto& actions = plan.schedule.stages[p];
    for (int a = 0; a < static_cast<int>(actions.size()); ++a) {
      const Action& act = actions[a];
      if (!act.is_compute()) continue;
      if (act.chunk < 0 || act.chunk >= chunks) {
        found.add("slice order", "stage " + std::to_string(p) + " runs unknown chunk " +
                                     std::to_string(act.chunk));
        continue;
      }
      // H and W follow their chunk's F and B: the validator checks them, slice order does not.
      if (act.type != ActionType::kForward && act.type != ActionType::kBackward) continue;
      int& at = act.type == ActionType::kForward ? fwd[act.chunk] : bwd[act.chunk];
      if (at != -1)
        found.add("slice order", "stage " + std::to_string(p) + " runs " + act.text() + " twice");
      at = a;
    }
    for (int c = 0; c < chunks; ++c)
      if (fwd[c] == -1 || bwd[c] == -1 || bwd[c] < fwd[c])
        found.add("slice order", "stage " + std::to_string(p) + ": chunk " + std::to_string(c) +
                                     " is not forwarded then backwarded");
    for (size_t i = 0; i < order.size(); ++i)
      for (size_t k = 1; k < order[i].size(); ++k) {
        const int earlier = order[i][k - 1], later = order[i][k];
        if (fwd[later] < fwd[earlier] || bwd[later] > bwd[earlier])
          found.add("slice order", "stage " + std::to_string(p) + ", sequence " +
                                       std::to_string(i) + ": chunk " + std::to_string(later) +
                                       " runs out of slice order with chunk " +
                                       std::to_string(earlier));
      }
  }
}

// Memory we count without the simulator's walk, after every forward: the model state, the
// activations of every chunk between its forward and its backward, and the K/V buffer of every
// split sequence from its first forward to the backward of its first slice. The simulator counts
// more (dK/dV and the backward's workspace), never less.
std::vector<double> count_peaks(const Plan& plan, const CostModel& cost) {
  std::vector<double> peaks;
  for (int p = 0; p < plan.schedule.num_stages(); ++p) {
    std::set<int> in_flight;
    std::map<int, int64_t> buffers;  // split sequence -> its length
    double peak = cost.model_state_bytes(p);
    // Each chunk's bytes looked up once: one long sequence's thousands of slices are all in
    // flight together, and the sum below runs at every forward.
    std::vector<double> held(plan.chunks.size());
    for (size_t c = 0; c < plan.chunks.size(); ++c)
      held[c] = cost.activation_bytes(plan.chunks[c], p,
                                      recompute_layers(plan.recompute, p, static_cast<int>(c)));
    for (const Action& a : plan.schedule.stages[p]) {
      if (a.type == ActionType::kForward) {
        in_flight.insert(a.chunk);
        for (const Slice& s : plan.chunks[a.chunk].slices)
          if (!s.whole()) buffers[s.seq] = s.seq_length;
        double bytes = cost.model_state_bytes(p);
        for (int c : in_flight) bytes += held[c];
        for (const auto& [seq, length] : buffers) bytes += cost.kv_buffer_bytes(length, p);
        peak = std::max(peak, bytes);
      } else if (a.type == ActionType::kBackward) {
        in_flight.erase(a.chunk);
        for (const Slice& s : plan.chunks[a.chunk].slices)
          if (!s.whole() && s.start == 0) buffers.erase(s.seq);
      }
    }
    peaks.push_back(peak);
  }
  return peaks;
}

template <typename F>
bool throws(F f, std::string& message) {
  try {
    f();
    return false;
  } catch (const std::exception& e) {
    message = e.what();
    if (message.size() > 2000) message = message.substr(0, 2000) + " ...";
    return true;
  }
}

}  // namespace

const std::vector<std::string>& violation_kinds() {
  static const std::vector<std::string> kinds = {
      "validate",   "schedule",   "coverage",      "slice order", "deadlock", "memory",
      "accounting", "prediction", "planner threw", "timed out",   "crashed"};
  return kinds;
}

std::vector<Violation> check_plan(const Plan& plan, const std::vector<int64_t>& lengths,
                                  const CostModel& cost, double budget_bytes) {
  Found found;
  std::string message;
  if (throws([&] { plan.validate(); }, message)) found.add("validate", message);
  if (throws([&] { validate_schedule(plan.schedule, plan.chunks); }, message))
    found.add("schedule", message);
  const auto order = check_coverage_ourselves(plan, lengths, found);
  const bool shaped =
      plan.schedule.num_stages() == cost.num_stages() &&
      (plan.recompute.empty() || static_cast<int>(plan.recompute.size()) == cost.num_stages());
  if (!shaped) {
    found.add("validate", "the schedule or recompute table does not have the cost model's stages");
    return found.list;
  }
  check_slice_order(plan, order, found);
  if (!found.list.empty()) return found.list;  // the simulator assumes a well-formed plan

  SimOptions options;
  options.memory_budget_bytes = budget_bytes;
  options.record_events = false;
  SimResult sim;
  if (throws([&] { sim = simulate(plan.schedule, plan.chunks, cost, plan.recompute, options); },
             message)) {
    found.add("deadlock", message);
    return found.list;
  }
  const std::vector<double> counted = count_peaks(plan, cost);
  for (int p = 0; p < cost.num_stages(); ++p) {
    const std::string stage = "stage " + std::to_string(p) + ": ";
    if (above(sim.peak_memory_bytes[p], budget_bytes))
      found.add("memory", stage + "simulated peak " + std::to_string(sim.peak_memory_bytes[p]) +
                              " bytes over the budget " + std::to_string(budget_bytes));
    if (above(counted[p], budget_bytes))
      found.add("memory", stage + "counted " + std::to_string(counted[p]) +
                              " bytes over the budget " + std::to_string(budget_bytes));
    if (above(counted[p], sim.peak_memory_bytes[p]))
      found.add("accounting", stage + "counted " + std::to_string(counted[p]) +
                                  " bytes, the simulator's peak is " +
                                  std::to_string(sim.peak_memory_bytes[p]));
    if (p < static_cast<int>(plan.peak_memory_bytes.size()) &&
        differ(plan.peak_memory_bytes[p], sim.peak_memory_bytes[p]))
      found.add("prediction",
                stage + "the plan predicts a peak of " + std::to_string(plan.peak_memory_bytes[p]) +
                    " bytes, its simulation " + std::to_string(sim.peak_memory_bytes[p]));
  }
  if (sim.over_budget) found.add("memory", sim.over_budget_message);
  if (differ(plan.step_time_s, sim.step_time_s))
    found.add("prediction", "the plan predicts " + std::to_string(plan.step_time_s) +
                                " s, its simulation " + std::to_string(sim.step_time_s) + " s");
  return found.list;
}

nlohmann::json violations_json(const std::vector<Violation>& violations) {
  // Built as explicit arrays: a braced {kind, detail} of two strings would become an object.
  nlohmann::json out = nlohmann::json::array();
  for (const Violation& v : violations)
    out.push_back(nlohmann::json::array({v.kind, v.detail.substr(0, 600)}));
  return out;
}

}  // namespace infinipipe::properties
