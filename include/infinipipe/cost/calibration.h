#pragma once
// Calibration of the cost model's time coefficients from measured layer times (and of the
// all-to-all link from measured all-to-alls, fit_link below): the fit shared by
// the C++ tool `infinipipe-profile` and `python -m infinipipe profile` (the timing itself is
// runtime/layer_profiler.h; this part has no LibTorch).
//
// From samples {tokens s, context c, forward, backward} of one layer it fits
//   T_fwd = a1  * ((c+s)^2 - c^2) + a2  * s + b  + a3  * c   (non-negative least squares)
//   T_bwd = a1' * ((c+s)^2 - c^2) + a2' * s + b' + a3' * c   (the same, on the backward times)
// (a3, the context's per-slice cost, only when the samples have more than one context; else 0)
// and g, the backward over the fitted forward (for the embedding's and the head's backward),
// and r (CostCoefficients::checkpointed_forward_ratio), what checkpointing a layer adds net over
// the fitted forward, when the samples have it: (T_ng + T_rec - T_fwd - T_bwd) / T_fwd, with
// T_ng the layer's forward without autograd (its first forward when checkpointed) and T_rec its
// recorded forward again with its backward at once (its part of the backward); the median of
// that over the points, since as a difference of four times a noisy point may come out near
// zero. Samples without T_rec (measured before it) give r = T_ng / T_fwd. The rest are fitted
// by relative least squares (each residual divided by its measured time), because the
// planner needs the same relative accuracy for a 64-token chunk as for a 4096-token one. A seeded
// fraction of the points is held out of the fit (never the grid's extreme corners, so the fit
// does not extrapolate) and the prediction error on them is reported.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/profile_grid.h"

namespace infinipipe {

// How a point's repeated runs become one time.
enum class Statistic { Min, Median, TrimmedMean };
Statistic parse_statistic(const std::string& name);  // "min", "median", "trimmed_mean"
std::string to_string(Statistic statistic);
// TrimmedMean: the mean of the runs left after dropping a quarter at each end. Error when empty.
double robust_time(std::vector<double> runs, Statistic statistic);

struct LayerSample {
  int64_t tokens = 0;
  int64_t context = 0;
  double forward_s = 0;
  double backward_s = 0;
  // The same forward without autograd, as a checkpointed layer's first forward runs; 0: not
  // measured (then calibrate() leaves r out, and apply_calibration keeps the base model's).
  double checkpointed_forward_s = 0;
  // A checkpointed layer's part of the backward: its recorded forward again and at once its
  // backward, as the executor runs it. 0: not measured (then r is the forward without autograd
  // over the recorded forward, as profiles measured before it).
  double recomputed_s = 0;
};

// Seconds of a part that is linear in tokens (embedding; head with the loss).
struct TokenSample {
  int64_t tokens = 0;
  double seconds = 0;
};

struct CalibrationSamples {
  std::vector<LayerSample> layer;      // one per grid point
  std::vector<TokenSample> embedding;  // empty: not measured (keeps the base model's value)
  std::vector<TokenSample> head;       // empty: not measured
};

struct CalibrationOptions {
  double holdout_fraction = 0.25;  // of the layer samples, in [0, 1)
  uint64_t seed = 0;               // chooses the held-out points
  // Query lengths where the attention kernel changes its tiling (CostCoefficients::
  // attention_query_cuts): a1 and a1' are fitted per regime. A cut is dropped when the fitted
  // points leave a regime of it fewer than two token counts. Empty: one a1 (as before).
  std::vector<int64_t> attention_query_cuts;
};

struct Calibration {
  double a1 = 0, a2 = 0, b = 0, a3 = 0;
  double backward_ratio = 0;
  double backward_a1 = 0, backward_a2 = 0, backward_b = 0, backward_a3 = 0;
  // With query regimes (the cuts the fitted points span): a1 and a1' per regime; a1 and a1'
  // above are then the last regime's (CostCoefficients::a1_by_query).
  std::vector<int64_t> attention_query_cuts;
  std::vector<double> a1_by_query, backward_a1_by_query;
  std::optional<double> embedding_s_per_token;
  std::optional<double> head_s_per_token;
  // r against the fitted forward, over the fitted points; only when every sample measured it.
  std::optional<double> checkpointed_forward_ratio;
  std::vector<int> fit;       // indices into samples.layer used by the fit
  std::vector<int> held_out;  // the others
  // |predicted - measured| / measured over the held-out points; NaN when none is held out.
  double forward_median_error = 0, forward_max_error = 0;
  double backward_median_error = 0, backward_max_error = 0;

  double forward_s(int64_t tokens, int64_t context) const;
  double backward_s(int64_t tokens, int64_t context) const;
};

// The parts of calibrate(), exposed for tests.
// Non-negative relative least squares for {a1, a2, b, a3} over all `samples`' forward (backward)
// times; a3 is 0 when the samples do not determine it beside the others (one context only).
// Error when they do not determine a1, a2, b (fewer than 3 points, or too few distinct token
// counts).
// With `cuts` (query regimes), one a1 per regime first: {a1_0, .., a1_R-1, a2, b, a3}.
std::vector<double> fit_forward(const std::vector<LayerSample>& samples,
                                const std::vector<int64_t>& cuts = {});
std::vector<double> fit_backward(const std::vector<LayerSample>& samples,
                                 const std::vector<int64_t>& cuts = {});
// r minimising sum_i ((y_i - r * x_i) / y_i)^2; x_i, y_i > 0.
double fit_ratio(const std::vector<double>& x, const std::vector<double>& y);
// The held-out indices (sorted): round(fraction * n) points drawn with the seed among the
// points that are not corners of the grid (a point with the lowest or highest token count of its
// context and the lowest or highest context of its token count), leaving at least 3 points to fit.
std::vector<int> held_out_indices(const std::vector<LayerSample>& samples,
                                  const CalibrationOptions& options);

// Validates the samples (Error naming the bad one), splits, fits and measures held-out errors.
Calibration calibrate(const CalibrationSamples& samples, const CalibrationOptions& options = {});

// A link's time per message, as the cost model charges the Ulysses all-to-all
// (cost_model_parallel.cc): t = sent_bytes / bandwidth + latency. Measured on the SP group by
// python/infinipipe/alltoall_profile.py, one sample per message size (its repeats' median).
struct LinkSample {
  double sent_bytes = 0;  // what one rank sends to the others: X (d_s - 1) / d_s
  double seconds = 0;
};

struct LinkFit {
  double bandwidth = 0;  // bytes/s
  double latency_s = 0;
  // |fitted - measured| / measured over the samples (all are fitted: two unknowns).
  double median_error = 0, max_error = 0;
  double seconds(double sent_bytes) const { return sent_bytes / bandwidth + latency_s; }
};

// Non-negative relative least squares of 1/bandwidth and latency (as the layer's fit: each
// residual divided by its measured time, so a 4 KB message counts as much as a 4 MB one). Error
// when a sample is not a positive size and time, when fewer than two sizes differ, or when the
// times do not grow with the size (no bandwidth to fit).
LinkFit fit_link(const std::vector<LinkSample>& samples);

// `base` with the all-to-all link inside a node set to the fit (CostCoefficients::
// alltoall_bandwidth, alltoall_latency_s); everything else, the layout included, kept.
CostModel apply_alltoall_link(const CostModel& base, const LinkFit& link);

// `base` with the calibrated time coefficients (a1, a2, b, a3, the backward's a1', a2', b', a3',
// the backward ratio, and r and the embedding and head per-token times when measured);
// everything else, the layout included, is kept.
CostModel apply_calibration(const CostModel& base, const Calibration& calibration);

// All fields; NaN errors and unmeasured parts are null.
void to_json(nlohmann::json& j, const Calibration& c);
void to_json(nlohmann::json& j, const LinkFit& f);

}  // namespace infinipipe
