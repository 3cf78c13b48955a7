#include "infinipipe/sim/offload.h"

#include <string>

#include "infinipipe/core/error.h"
#include "infinipipe/sim/memory_timeline.h"
#include "memory_walk.h"

namespace infinipipe {

void Offload::validate(int num_stages) const {
  if (static_cast<int>(resident.size()) != num_stages)
    throw Error("offload: " + std::to_string(resident.size()) + " resident counts for " +
                std::to_string(num_stages) + " stages; give one per stage (-1: no offload)");
  bool any = false;
  for (int p = 0; p < num_stages; ++p) {
    if (resident[p] == 0 || resident[p] < -1)
      throw Error("offload: stage " + std::to_string(p) + " keeps " + std::to_string(resident[p]) +
                  " latest forwards; keep at least 1 (a forward's chunk is on the device when it "
                  "ends), or -1 for no offload");
    any = any || resident[p] > 0;
  }
  if (prefetch < 1)
    throw Error("offload: prefetch " + std::to_string(prefetch) +
                "; a chunk must be back at least by its own backward (1)");
  if (any && !(bytes_per_s > 0))
    throw Error("offload: the host link's rate must be positive (Hardware::host_link_bandwidth)");
  if (stages_per_link < 1)
    throw Error("offload: " + std::to_string(stages_per_link) +
                " stages per host link; give at least 1 (Hardware::gpus_per_host_link)");
}

double HostLinkWay::book(double ready, double duration) {
  double start = ready;
  auto it = busy_.begin();
  for (; it != busy_.end(); ++it) {
    if (it->second <= start) continue;         // over before the copy could start
    if (it->first >= start + duration) break;  // the gap before this copy holds it
    start = it->second;
  }
  busy_.insert(it, {start, start + duration});
  return start + duration;
}

OffloadWalk walk_offload(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                         const CostModel& cost, const std::vector<double>& activation, int resident,
                         int prefetch) {
  const int n = static_cast<int>(chunks.size());
  if (static_cast<int>(activation.size()) != n)
    throw Error("walk_offload: " + std::to_string(activation.size()) + " activation sizes for " +
                std::to_string(n) + " chunks");
  const std::vector<Action>& actions = schedule.stages.at(stage);
  // The walk's fixed bytes take a headed chunk's logits off while it is in flight on the last
  // stage: a chunk on the host gives back those bytes, since its activations are not counted.
  std::vector<double> unkept(n, 0.0);
  if (stage == schedule.num_stages() - 1)
    for (const Action& a : actions)
      if ((a.type == ActionType::kHead || a.type == ActionType::kSendHead) && a.chunk >= 0 &&
          a.chunk < n)
        unkept[a.chunk] = cost.head_logits_bytes(chunks[a.chunk]);
  const int num_actions = static_cast<int>(actions.size());
  // The chunks of the stage's backwards in order, and per action the first of them at or after it.
  std::vector<int> backward_chunks;
  std::vector<int> next_backward(num_actions + 1);
  for (const Action& a : actions)
    if (a.type == ActionType::kBackward) backward_chunks.push_back(a.chunk);
  int count = static_cast<int>(backward_chunks.size());
  next_backward[num_actions] = count;
  for (int i = num_actions - 1; i >= 0; --i) {
    if (actions[i].type == ActionType::kBackward) --count;
    next_backward[i] = count;
  }

  OffloadWalk walk;
  walk.copied_out_by.resize(num_actions);
  walk.copied_in_after.resize(num_actions);
  walk.moved_bytes.assign(n, 0.0);
  std::vector<char> in_flight_now(n, 0), kept(n, 0), kept_before(n, 0), seen(n, 0);
  int previous_action = -1;
  for_each_memory_moment(
      schedule, stage, chunks, cost,
      [&](int index, double fixed_bytes, const std::vector<int>& in_flight, double) {
        const int held = static_cast<int>(in_flight.size());
        for (int c : in_flight) in_flight_now[c] = 1;
        for (int k = 0; k < held; ++k) kept[in_flight[k]] = resident < 0 || k >= held - resident;
        const int first = next_backward[index];
        for (int k = first; k < first + prefetch && k < static_cast<int>(backward_chunks.size());
             ++k)
          if (in_flight_now[backward_chunks[k]]) kept[backward_chunks[k]] = 1;
        double bytes = fixed_bytes;
        for (int c : in_flight) {
          bytes += kept[c] ? activation[c] : unkept[c];
          if (!seen[c]) {  // its forward's moment: the chunk was just made on the device
            seen[c] = 1;
            if (!kept[c]) throw Error("walk_offload: a forward's own chunk left at its moment");
          } else if (kept_before[c] && !kept[c]) {
            walk.copied_out_by[index].push_back(c);
            walk.moved_bytes[c] = activation[c] - unkept[c];
            walk.bytes_each_way += walk.moved_bytes[c];
          } else if (!kept_before[c] && kept[c]) {
            walk.copied_in_after[previous_action].push_back(c);
          }
        }
        walk.moment_action.push_back(index);
        walk.bytes.push_back(bytes);
        if (walk.peak_action < 0 || bytes > walk.peak_bytes) {
          walk.peak_bytes = bytes;
          walk.peak_action = index;
        }
        for (int c : in_flight) {
          kept_before[c] = kept[c];
          kept[c] = 0;
          in_flight_now[c] = 0;
        }
        previous_action = index;
      });
  if (walk.peak_action < 0) walk.peak_bytes = stage_model_state_bytes(schedule, stage, cost);
  return walk;
}

}  // namespace infinipipe
