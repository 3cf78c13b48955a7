#pragma once
// One setting of EPP's search and what the search knows of it (internal to the plan part): its
// chunks, cheap bounds on time and memory, the key it is ranked by, and, once evaluated, its
// waves, schedule, recompute and simulation (docs/design.md, "The EPP search").
#include <vector>

#include "infinipipe/plan/plan.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe::planning {

struct Candidate {
  Setting setting;  // an EPP setting (Setting::chunker says whose chunking)
  std::vector<Chunk> chunks;
  // From pipeline_bound, per stage: the stage's compute, the first chunk's forward through the
  // stages before it, the last chunk's backward through them, and how many bytes one second of
  // recompute can save there at most.
  std::vector<double> busy, fill, drain, saving_rate;
  double bound = 0;  // no one-wave plan of these chunks without recompute is faster
  double optimistic =
      0;  // one wave without recompute, simulated with memory ignored (or the bound)
  std::vector<double> excess;  // bytes over the budget per stage, at least (0 when it may fit)
  std::vector<double>
      recompute_floor;  // seconds of recompute per stage that one wave needs at least
  // Over the budget without recompute for sure: pipeline_bound's floor plus the K/V buffers of
  // the split sequences in flight exceeds it on some stage (a simulation would find as much).
  bool never_fits_as_is = false;
  // The same floor with every layer recomputed (the least any recompute holds), at the moments
  // after forwards and at the backwards that follow them (with their workspace and the dK/dV
  // buffers they open): no recompute makes the one wave fit, so the search skips its recompute
  // search and the grouping DP its solve (their answer would be the same).
  bool never_fits_recomputed = false;
  int never_fits_stage = -1;  // the first stage where it is over, when never_fits_recomputed
  double key = 0;             // what the search ranks by: see search_key
  bool simulated = false;
  // The plan, once evaluated.
  std::vector<Wave> waves;
  Schedule schedule;
  RecomputeResult checkpoint;
  SimResult sim;
};

// The bound of pipeline_bound with `extra` seconds of compute per stage.
double bound_with(const Candidate& cand, const std::vector<double>& extra);
bool over_budget(const Candidate& cand);
// One wave with recompute: the optimistic time, and the bound with each stage's least recompute.
double one_wave_key(const Candidate& cand);
// Several waves: the optimistic time plus one more fill and drain (a second wave repeats them).
// An estimate, not a bound.
double waves_key(const Candidate& cand);
// The time the search expects at best from a candidate. While it may fit: its bound. Once known
// not to fit: the lesser of one wave with recompute and several waves.
double search_key(const Candidate& cand);

// A bound the simulator can only meet, for the chunks in one wave without recompute: stage p
// computes busy_p in all; it cannot start before the first chunk has gone forward through
// stages 0..p-1, and after its last backward (the last chunk's) that chunk still goes backward
// through them. Point-to-point time counts on every hop. Cheap (no simulation), and exact when
// the pipeline never stalls in its steady state, so it ranks candidates well.
// Also the memory the simulator must find at least: after each forward, the activations of the
// chunks in flight under 1F1B (stage p runs w_p = (d-1-p) + (k_max-1) warm-up forwards, k_max
// the first chain's length, then one forward one backward); K/V buffers and backward
// workspaces only add to that; never_fits_as_is adds the K/V buffers of the split sequences
// with a slice in flight (open from their first slice's forward to its backward, which comes
// last) and tells whether that is over the budget; never_fits_recomputed whether that, with every
// layer recomputed, or the backward after it, is.
void pipeline_bound(Candidate& cand, const CostModel& cost, int num_stages, double budget_bytes);

// pipeline_bound's never_fits_as_is alone, the same answer bit for bit, for a fraction of its
// cost when it is true: it stops at the first moment over the budget and computes nothing else.
bool never_fits_as_is(const std::vector<Chunk>& chunks, const CostModel& cost, int num_stages,
                      double budget_bytes);

}  // namespace infinipipe::planning
