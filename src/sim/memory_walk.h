#pragma once
// The walk behind memory_moments, for callers that only need to look at each moment once: the
// simulator visits thousands of moments per plan and should not copy every in-flight list.
// Templates, so the visitors inline into the walk (through std::function, calling them was a
// tenth of the walk's time).
//
// for_each_memory_moment calls visit(int action_index, double fixed_bytes,
// const std::vector<int>& in_flight, double weight_sum) once per moment, in action order, with
// what memory_moments would store in it; `in_flight` is only valid during the call. With
// `weights` (one per chunk), `weight_sum` is their running sum over the chunks in flight, added
// as chunks come and subtracted as they go: off from the sum in list order by rounding only (see
// Simulation::measure_memory); 0 without.
//
// for_each_binding_moment is binding_moments without copying: it calls visit(int action_index,
// double fixed_bytes, const int* first, const int* last, double weight_sum), the chunks in flight
// being [first, last), valid during the call.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

namespace memory_walk {

// Life of a split sequence's buffers on one stage. Once closed a buffer never reopens: its
// first slice's backward is the last backward that touches the sequence.
enum class BufferState : unsigned char { kNone, kKv, kKvAndGrad, kClosed };

struct SplitSequence {
  int seq = 0;
  double bytes = 0;  // CostModel::kv_buffer_bytes of its length
};

}  // namespace memory_walk

template <class Visit>
void for_each_memory_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                            const CostModel& cost, Visit&& visit, const double* weights = nullptr) {
  using memory_walk::BufferState;
  using memory_walk::SplitSequence;
  if (stage < 0 || stage >= schedule.num_stages())
    throw Error("memory_moments: stage " + std::to_string(stage) + " is not in the schedule (" +
                std::to_string(schedule.num_stages()) + " stages)");
  const std::vector<Action>& actions = schedule.stages[stage];
  const int num_chunks = static_cast<int>(chunks.size());

  int max_seq = -1;
  for (const Chunk& chunk : chunks)
    for (const Slice& s : chunk.slices) max_seq = std::max(max_seq, s.seq);
  std::vector<char> is_split(max_seq + 1, 0);
  std::vector<double> seq_buffer_bytes(max_seq + 1, 0);  // one K/V buffer (or its gradient)
  for (const Chunk& chunk : chunks)
    for (const Slice& s : chunk.slices)
      if (!s.whole() && !is_split[s.seq]) {
        is_split[s.seq] = 1;
        seq_buffer_bytes[s.seq] = cost.kv_buffer_bytes(s.seq_length, stage);
      }
  std::vector<BufferState> state(max_seq + 1, BufferState::kNone);

  // Kept in opening order so the sums below add the same terms in the same order every time.
  std::vector<SplitSequence> kv_open;
  std::vector<SplitSequence> grad_open;
  std::vector<int> in_flight;
  std::vector<int> times_held(num_chunks, 0);  // per chunk, its entries in in_flight
  std::vector<int> pushed_as(num_chunks, 0);   // per chunk, the number of its latest push
  int pushes = 0;
  bool repeated = false;  // a chunk was pushed while in flight: the numbers do not sort the list
  double weight_sum = 0;
  // On the last stage, chunks with an H keep no logits from F to B (the H holds them while it
  // runs): `unkept` is their share of activation_bytes for the chunks in flight, taken off the
  // fixed bytes (activation_bytes counts logits on the last stage whatever the recompute).
  // Those are the chunks the last stage runs an H or a SEND_H for.
  std::vector<char> headed(num_chunks, 0);
  if (stage == schedule.num_stages() - 1)
    for (const Action& a : actions)
      if ((a.type == ActionType::kHead || a.type == ActionType::kSendHead) && a.chunk >= 0 &&
          a.chunk < num_chunks)
        headed[a.chunk] = 1;
  double unkept = 0;
  // Zero bubble: a chunk with a W on this stage keeps, from its B (which frees each recorded
  // graph's other saved tensors as it finishes it) until its W, what the nodes feeding parameters
  // saved (CostModel::weight_input_bytes) and the gradients W starts from
  // (weight_gradient_bytes), whatever its recompute: fixed bytes (`awaiting_weights`). Its B's
  // moment holds them on top of what a whole backward holds.
  std::vector<char> has_weight_action(num_chunks, 0);
  for (const Action& a : actions)
    if (a.type == ActionType::kWeight && a.chunk >= 0 && a.chunk < num_chunks)
      has_weight_action[a.chunk] = 1;
  std::vector<double> awaiting(num_chunks, 0.0);  // per chunk: its bytes from B to W
  double awaiting_weights = 0;

  const double model_state = stage_model_state_bytes(schedule, stage, cost);
  // Whole numbers of bytes (the analytic model's are) add up exactly in any order while every
  // partial sum stays below 2^53: then a running sum, added to as buffers open and subtracted
  // from as they close, equals the sum in opening order bit for bit. Otherwise the open buffers
  // are summed again, in opening order, whenever one opens or closes. (With hundreds of split
  // sequences open, wikipedia at batch 2048 on 32 stages, re-summing them at every moment was
  // most of the walk.)
  auto whole = [](double bytes) { return bytes >= 0 && std::floor(bytes) == bytes; };
  bool exact = whole(model_state);
  double most = model_state;
  for (int seq = 0; seq <= max_seq; ++seq)
    if (is_split[seq]) {
      exact = exact && whole(seq_buffer_bytes[seq]);
      most += 2 * seq_buffer_bytes[seq];
    }
  exact = exact && most < 9007199254740992.0;  // 2^53
  double buffers = model_state;
  bool buffers_changed = false;
  auto buffer_bytes = [&]() {
    if (buffers_changed) {
      buffers = model_state;
      for (const SplitSequence& s : kv_open) buffers += s.bytes;
      for (const SplitSequence& s : grad_open) buffers += s.bytes;
      buffers_changed = false;
    }
    return buffers;
  };
  auto open = [&](std::vector<SplitSequence>& list, int seq) {
    if (exact) {
      buffers += seq_buffer_bytes[seq];
    } else {
      list.push_back({seq, seq_buffer_bytes[seq]});
      buffers_changed = true;
    }
  };
  auto erase_seq = [](std::vector<SplitSequence>& list, int seq) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [seq](const SplitSequence& s) { return s.seq == seq; }),
               list.end());
  };
  auto close = [&](int seq) {  // before its state becomes kClosed
    if (!exact) {
      erase_seq(kv_open, seq);
      erase_seq(grad_open, seq);
      buffers_changed = true;
      return;
    }
    if (state[seq] == BufferState::kKv || state[seq] == BufferState::kKvAndGrad)
      buffers -= seq_buffer_bytes[seq];
    if (state[seq] == BufferState::kKvAndGrad) buffers -= seq_buffer_bytes[seq];
  };

  // Posted receives: each holds its message's buffer (CostModel::message_bytes) from its RECV
  // until its compute takes it: a forward's input and a backward's gradient before their
  // moments (the chunk's activations and the backward's workspace count them from there on), an
  // H's hidden state after its moment. `receiving` is their sum; per chunk and kind (an F's
  // input, a B's gradient, an H's hidden state), what its compute releases.
  enum Received { kForwardInput, kBackwardGradient, kHeadInput };
  std::vector<double> posted(3 * static_cast<size_t>(num_chunks), 0.0);
  double receiving = 0;
  auto release = [&](Received kind, int chunk) {
    double& bytes = posted[kind * static_cast<size_t>(num_chunks) + chunk];
    receiving -= bytes;
    bytes = 0;
  };

  for (int index = 0; index < static_cast<int>(actions.size()); ++index) {
    const Action& action = actions[index];
    if (action.is_recv() && action.chunk >= 0 && action.chunk < num_chunks) {
      const Received kind = action.type == ActionType::kRecvForward ? kForwardInput
                            : action.type == ActionType::kRecvHead  ? kHeadInput
                                                                    : kBackwardGradient;
      const double bytes = cost.message_bytes(chunks[action.chunk]);
      posted[kind * static_cast<size_t>(num_chunks) + action.chunk] += bytes;
      receiving += bytes;
    }
    if (!action.is_compute()) continue;
    if (action.chunk < 0 || action.chunk >= num_chunks)
      throw Error("memory_moments: stage " + std::to_string(stage) + " action " + action.text() +
                  " names chunk " + std::to_string(action.chunk) + " but there are only " +
                  std::to_string(num_chunks) + " chunks");
    const Chunk& chunk = chunks[action.chunk];

    if (action.type == ActionType::kForward) {
      for (const Slice& s : chunk.slices)
        if (is_split[s.seq] && state[s.seq] == BufferState::kNone) {
          state[s.seq] = BufferState::kKv;
          open(kv_open, s.seq);
        }
      in_flight.push_back(action.chunk);
      repeated = repeated || times_held[action.chunk] > 0;
      ++times_held[action.chunk];
      pushed_as[action.chunk] = pushes++;
      if (weights) weight_sum += weights[action.chunk];
      if (headed[action.chunk]) unkept += cost.head_logits_bytes(chunk);
      release(kForwardInput, action.chunk);
      visit(index,
            buffer_bytes() - unkept + awaiting_weights + receiving +
                cost.forward_workspace_bytes(chunk, stage),
            in_flight, weight_sum);
      continue;
    }

    // H: the chunk's logits and loss are held while it runs, nothing in flight changes.
    if (action.type == ActionType::kHead) {
      visit(index,
            buffer_bytes() - unkept + awaiting_weights + receiving + cost.head_logits_bytes(chunk),
            in_flight, weight_sum);
      release(kHeadInput, action.chunk);
      continue;
    }
    // W: what its B left is held while it runs, then freed.
    if (action.type == ActionType::kWeight) {
      visit(index, buffer_bytes() - unkept + awaiting_weights + receiving, in_flight, weight_sum);
      awaiting_weights -= awaiting[action.chunk];
      awaiting[action.chunk] = 0;
      continue;
    }

    // Backward: dK/dV of its split sequences appear at its start; the chunk is still held.
    for (const Slice& s : chunk.slices)
      if (is_split[s.seq] && state[s.seq] == BufferState::kKv) {
        state[s.seq] = BufferState::kKvAndGrad;
        open(grad_open, s.seq);
      }
    // Split: besides what a whole backward holds, the B keeps what its W needs, which the chunk
    // then holds as fixed bytes until its W.
    double kept = 0;
    if (has_weight_action[action.chunk] && times_held[action.chunk] > 0)
      kept = cost.weight_input_bytes(chunk, stage, !headed[action.chunk]) +
             cost.weight_gradient_bytes(chunk, stage, !headed[action.chunk]);
    release(kBackwardGradient, action.chunk);
    visit(index,
          buffer_bytes() - unkept + awaiting_weights + receiving +
              cost.backward_workspace_bytes(chunk, stage) + kept,
          in_flight, weight_sum);
    awaiting[action.chunk] = kept;
    awaiting_weights += kept;

    // The chunk's latest entry leaves. The list is in forward order, so while no chunk has been
    // in it twice (a valid schedule's case) the entry is found by its forward's number.
    if (times_held[action.chunk] > 0) {
      const auto held =
          !repeated
              ? std::lower_bound(in_flight.begin(), in_flight.end(), action.chunk,
                                 [&](int a, int b) { return pushed_as[a] < pushed_as[b]; })
              : std::next(std::find(in_flight.rbegin(), in_flight.rend(), action.chunk)).base();
      in_flight.erase(held);
      --times_held[action.chunk];
      if (weights) weight_sum -= weights[action.chunk];
      if (headed[action.chunk]) unkept -= cost.head_logits_bytes(chunk);
    }
    for (const Slice& s : chunk.slices)
      if (is_split[s.seq] && s.start == 0 && state[s.seq] != BufferState::kClosed) {
        close(s.seq);
        state[s.seq] = BufferState::kClosed;
      }
  }
}

template <class Visit>
void for_each_binding_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                             const CostModel& cost, Visit&& visit,
                             const double* weights = nullptr) {
  // Chunks join the in-flight set only at forwards and leave only right after backwards (H and W
  // moments are treated as backwards': they change no set), so:
  // a forward's moment holds a subset of the next moment's set (rule 1), and a backward's moment
  // a subset of every moment since the last forward (rule 2). A moment whose set is a subset of
  // another's and whose fixed bytes are no larger never holds more bytes, whatever the
  // recompute: drop it. Ties with a forward's moment keep the later moment, so a dropped moment
  // always has a kept one above it. A forward's moment is decided at the next moment, whose list
  // then shows its set (without the chunk a next forward added), so nothing is copied.
  const std::vector<Action>& actions = schedule.stages[stage];
  bool pending = false;  // the previous moment was a forward's, not yet kept or dropped
  int pending_index = -1;
  double forward_fixed = 0;                 // fixed bytes of the last forward's moment
  double most_backward_since_forward = -1;  // largest of the backwards' since then
  int last_compute = -1;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i)
    if (actions[i].is_compute()) last_compute = i;
  for_each_memory_moment(
      schedule, stage, chunks, cost,
      [&](int action_index, double fixed_bytes, const std::vector<int>& in_flight,
          double weight_sum) {
        const bool forward = actions[action_index].type == ActionType::kForward;
        if (pending && fixed_bytes < forward_fixed)
          visit(pending_index, forward_fixed, in_flight.data(),
                in_flight.data() + in_flight.size() - (forward ? 1 : 0),
                forward && weights ? weight_sum - weights[in_flight.back()] : weight_sum);
        pending = false;
        if (forward) {
          forward_fixed = fixed_bytes;
          most_backward_since_forward = -1;
          if (action_index == last_compute) {  // nothing after it to compare with
            visit(action_index, fixed_bytes, in_flight.data(), in_flight.data() + in_flight.size(),
                  weight_sum);
            return;
          }
          pending = true;
          pending_index = action_index;
          return;
        }
        // Ties with an earlier backward drop this one; with the forward they keep it, since
        // rule 1 has dropped that forward's moment for this run's first backward.
        const bool dominated =
            forward_fixed > fixed_bytes || most_backward_since_forward >= fixed_bytes;
        most_backward_since_forward = std::max(most_backward_since_forward, fixed_bytes);
        if (!dominated)
          visit(action_index, fixed_bytes, in_flight.data(), in_flight.data() + in_flight.size(),
                weight_sum);
      },
      weights);
}

}  // namespace infinipipe
