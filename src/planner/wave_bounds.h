#pragma once
// pipeline_bound (candidate.h) of any wave of a candidate's whole chains, from per-chunk costs
// computed once for the candidate (internal to the plan part). The grouping DP bounds every wave
// it may weigh (wave_grouping.cc: least_time); each bound was the wave's chunks copied, their
// chains and 1F1B order found again and every chunk costed again on every stage: on uniform's
// steps a fifth of the planner's instructions. Here a wave's bound is one walk over its chunks.
#include <vector>

#include "candidate.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/scheduler.h"

namespace infinipipe::planning {

class WaveBounds {
 public:
  // `chunks` must outlive this object.
  WaveBounds(const std::vector<Chunk>& chunks, const CostModel& cost, int num_stages);

  // Fills out's bounds (busy, fill, drain, saving_rate, bound, optimistic, excess,
  // recompute_floor, the never_fits flags and key) as pipeline_bound does for the chunks of
  // `wave` alone, renumbered in ascending order of their ids, bit for bit. `wave`: ascending chunk
  // ids of whole chains (throws Error otherwise); out.chunks is left as it is.
  void bound(const Wave& wave, Candidate& out, double budget_bytes);

  // The candidate's chains in order_wave's order (longest first, equal lengths by their first
  // chunk), cut where the length changes: chains runs[g] .. runs[g + 1] - 1 have one length, the
  // grouping DP's group g. The last entry is the number of chains.
  std::vector<int> length_runs() const;
  // The bounds of the waves of chains first_chain .. end_chains[k] - 1 (in that order), into
  // out[k], as bound() gives them, with one walk for all: a wave's moments are the first of a
  // longer one's that starts with the same chains. end_chains ascending, above first_chain.
  void bound_runs(int first_chain, const std::vector<int>& end_chains, std::vector<Candidate>& out,
                  double budget_bytes);

 private:
  const std::vector<Chunk>& chunks_;
  const CostModel& cost_;
  int num_stages_;
  // Chains longest first, equal lengths by their first chunk (order_wave's order): chain i's
  // forward order is chain_ids_[chain_start_[i] .. chain_start_[i + 1]).
  std::vector<int> chain_start_, chain_ids_;
  std::vector<int> chain_of_;  // chunk -> its chain's place in that order
  // Split sequences, numbered over the candidate: chunk c's are split_seqs_[split_of_[c] ..
  // split_of_[c + 1]); split_lengths_[s] the sequence's length.
  std::vector<int> split_of_, split_seqs_;
  std::vector<int64_t> split_lengths_;
  // k_max when chunk c leads the wave (its last split sequence's slice count, else 1).
  std::vector<int> k_max_of_;
  // Per stage class (a stage whose chunk costs differ from the previous stage's starts one):
  // class_of_[p], and per class and chunk (at class * n + c): forward plus backward time, the
  // best saving rate, the activation bytes held without and with every layer recomputed, and the
  // backward workspace.
  std::vector<int> class_of_;
  std::vector<double> compute_, saving_rate_, activation_, least_activation_, workspace_;
  std::vector<double> kv_bytes_;  // at p * split_lengths_.size() + s
  // The bounds of the waves of forward_'s first ends[k] chunks (ids[k]: those, ascending), into
  // *out[k]; forward_ and backward_ hold the longest one's order.
  void walk(const std::vector<int>& ends, const std::vector<const Wave*>& ids,
            Candidate* const* out, double budget_bytes);

  // Scratch for bound(), sized by the candidate.
  std::vector<char> in_wave_, marked_;
  std::vector<int> place_, open_chunks_, forward_, backward_, flying_;
};

}  // namespace infinipipe::planning
