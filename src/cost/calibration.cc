// Over 400 lines for a reason: one fit (the layer's forward and backward coefficients by
// non-negative least squares, per query regime, r, the held-out errors), whose steps share the
// grid's samples; the grid is profile_grid.cc.
#include "infinipipe/cost/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The regressors of a1, a2, b and a3: (c+s)^2 - c^2 (as s(2c+s), as the cost model), s, 1, c;
// with cuts, one a1 column per query regime, the slice's own holding s(2c+s) and the others 0.
std::vector<double> regressors(int64_t tokens, int64_t context,
                               const std::vector<int64_t>& cuts = {}) {
  const double s = double(tokens), c = double(context);
  std::vector<double> x(cuts.size() + 1, 0.0);
  x[query_regime(tokens, cuts)] = s * (2 * c + s);
  x.insert(x.end(), {s, 1.0, c});
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// min |A x - y| with A given by its columns, by modified Gram-Schmidt (the columns differ by
// orders of magnitude, which normal equations would square). nullopt when a column is
// (numerically) a combination of the earlier ones.
std::optional<std::vector<double>> least_squares(std::vector<std::vector<double>> cols,
                                                 std::vector<double> y) {
  const size_t k = cols.size();
  std::vector<std::vector<double>> r(k, std::vector<double>(k, 0.0));
  std::vector<double> z(k);
  for (size_t j = 0; j < k; ++j) {
    const double original = std::sqrt(dot(cols[j], cols[j]));
    for (size_t i = 0; i < j; ++i) {
      r[i][j] = dot(cols[i], cols[j]);
      for (size_t n = 0; n < y.size(); ++n) cols[j][n] -= r[i][j] * cols[i][n];
    }
    r[j][j] = std::sqrt(dot(cols[j], cols[j]));
    if (!(r[j][j] > 1e-9 * original)) return std::nullopt;
    for (double& v : cols[j]) v /= r[j][j];
    z[j] = dot(cols[j], y);
    for (size_t n = 0; n < y.size(); ++n) y[n] -= z[j] * cols[j][n];
  }
  std::vector<double> x(k);
  for (size_t j = k; j-- > 0;) {
    double v = z[j];
    for (size_t i = j + 1; i < k; ++i) v -= r[j][i] * x[i];
    x[j] = v / r[j][j];
  }
  return x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void check_positive_time(double seconds, const std::string& what) {
  check(std::isfinite(seconds) && seconds > 0,
        "calibration: " + what + " must be a positive time, got " + std::to_string(seconds));
}

// Per-token time through the origin, as the cost model charges the embedding and the head.
std::optional<double> fit_per_token(const std::vector<TokenSample>& samples, const char* part) {
  if (samples.empty()) return std::nullopt;
  std::vector<double> tokens, seconds;
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string what = std::string(part) + " sample " + std::to_string(i);
    check(samples[i].tokens >= 1,
          "calibration: " + what + " has " + std::to_string(samples[i].tokens) + " tokens");
    check_positive_time(samples[i].seconds, what);
    tokens.push_back(double(samples[i].tokens));
    seconds.push_back(samples[i].seconds);
  }
  return fit_ratio(tokens, seconds);
}

}  // namespace

Statistic parse_statistic(const std::string& name) {
  if (name == "min") return Statistic::Min;
  if (name == "median") return Statistic::Median;
  if (name == "trimmed_mean") return Statistic::TrimmedMean;
  throw Error("statistic must be 'min', 'median' or 'trimmed_mean', got '" + name + "'");
}

std::string to_string(Statistic statistic) {
  switch (statistic) {
    case Statistic::Min:
      return "min";
    case Statistic::Median:
      return "median";
    case Statistic::TrimmedMean:
      return "trimmed_mean";
  }
  return "?";
}

double robust_time(std::vector<double> runs, Statistic statistic) {
  check(!runs.empty(), "robust_time: no runs");
  std::sort(runs.begin(), runs.end());
  switch (statistic) {
    case Statistic::Min:
      return runs.front();
    case Statistic::Median:
      return median(runs);
    case Statistic::TrimmedMean: {
      const size_t cut = runs.size() / 4;
      double sum = 0;
      for (size_t i = cut; i < runs.size() - cut; ++i) sum += runs[i];
      return sum / double(runs.size() - 2 * cut);
    }
  }
  return kNaN;
}

double Calibration::forward_s(int64_t tokens, int64_t context) const {
  const std::vector<double> x = regressors(tokens, context);
  const double attention = a1_for_query(a1, a1_by_query, tokens, attention_query_cuts);
  return attention * x[0] + a2 * x[1] + b * x[2] + a3 * x[3];
}

double Calibration::backward_s(int64_t tokens, int64_t context) const {
  const std::vector<double> x = regressors(tokens, context);
  const double attention =
      a1_for_query(backward_a1, backward_a1_by_query, tokens, attention_query_cuts);
  return attention * x[0] + backward_a2 * x[1] + backward_b * x[2] + backward_a3 * x[3];
}

namespace {

// Non-negative least squares of cols * x = 1 (relative least squares: each row already divided
// by its measured time). With so few unknowns the optimum is the unconstrained optimum on its
// support, so try every support and keep the best feasible one (clamping a negative coefficient
// to zero afterwards would not be optimal for the others). Never empty when some column is
// positive: one positive column alone has a positive solution.
std::vector<double> nonnegative_fit(const std::vector<std::vector<double>>& cols) {
  const int k = int(cols.size());
  const std::vector<double> ones(cols.at(0).size(), 1.0);
  std::vector<double> best;
  double best_residual = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < (1 << k); ++mask) {
    std::vector<std::vector<double>> sub;
    for (int j = 0; j < k; ++j)
      if (mask & (1 << j)) sub.push_back(cols[j]);
    const auto solution = least_squares(sub, ones);
    if (!solution || *std::min_element(solution->begin(), solution->end()) < 0) continue;
    std::vector<double> coef(k, 0.0);
    for (int j = 0, i = 0; j < k; ++j)
      if (mask & (1 << j)) coef[j] = (*solution)[i++];
    double residual = 0;
    for (size_t n = 0; n < ones.size(); ++n) {
      double r = 0;
      for (int j = 0; j < k; ++j) r += cols[j][n] * coef[j];
      r -= 1;
      residual += r * r;
    }
    if (residual < best_residual) best_residual = residual, best = coef;
  }
  return best;
}

// Non-negative relative least squares of a1, a2, b, a3 against the times `time_of(sample)`; a3
// only when the samples determine it beside the other three (else 0).
template <typename TimeOf>
std::vector<double> fit_layer_time(const std::vector<LayerSample>& samples, TimeOf time_of,
                                   const std::vector<int64_t>& cuts) {
  check(samples.size() >= 3, "calibration: " + std::to_string(samples.size()) +
                                 " samples are fewer than the 3 unknowns a1, a2, b");
  // Relative least squares: row i is divided by its measured time, so the target is all ones.
  const size_t k = cuts.size() + 4;
  std::vector<std::vector<double>> cols(k);
  const std::vector<double> ones(samples.size(), 1.0);
  for (const LayerSample& s : samples) {
    const std::vector<double> x = regressors(s.tokens, s.context, cuts);
    for (size_t j = 0; j < k; ++j) cols[j].push_back(x[j] / time_of(s));
  }
  if (samples.size() >= k && least_squares(cols, ones).has_value()) return nonnegative_fit(cols);
  cols.pop_back();
  check(least_squares(cols, ones).has_value(),
        "calibration: the samples do not determine a1, a2 and b: profile at least three "
        "different token counts, or two with more than one context");
  std::vector<double> coef = nonnegative_fit(cols);
  coef.push_back(0.0);
  return coef;
}

}  // namespace

std::vector<double> fit_forward(const std::vector<LayerSample>& samples,
                                const std::vector<int64_t>& cuts) {
  return fit_layer_time(
      samples, [](const LayerSample& s) { return s.forward_s; }, cuts);
}

std::vector<double> fit_backward(const std::vector<LayerSample>& samples,
                                 const std::vector<int64_t>& cuts) {
  return fit_layer_time(
      samples, [](const LayerSample& s) { return s.backward_s; }, cuts);
}

namespace {

// The cuts whose every regime holds two token counts or more: a cut that leaves a regime fewer is
// dropped, that regime joining the next. A regime's a1 is then told apart from a2 and b by its
// own lengths, not only from a3 by its contexts (the trainer's "training" grid has one token
// count per regime: one a1, as before).
std::vector<int64_t> spanned_cuts(const std::vector<LayerSample>& samples,
                                  std::vector<int64_t> cuts) {
  check_query_cuts(cuts, "calibration");
  for (size_t r = 0; r <= cuts.size();) {
    std::set<int64_t> lengths;
    for (const LayerSample& s : samples)
      if (query_regime(s.tokens, cuts) == int(r)) lengths.insert(s.tokens);
    const bool held = lengths.size() >= 2;
    if (held) {
      ++r;
      continue;
    }
    cuts.erase(cuts.begin() + (r < cuts.size() ? r : r - 1));
    if (cuts.empty()) break;
  }
  return cuts;
}

}  // namespace

double fit_ratio(const std::vector<double>& x, const std::vector<double>& y) {
  check(!x.empty() && x.size() == y.size(), "fit_ratio: x and y must be non-empty, equal sizes");
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    check(x[i] > 0 && y[i] > 0, "fit_ratio: values must be positive");
    const double q = x[i] / y[i];
    num += q;
    den += q * q;
  }
  return num / den;
}

std::vector<int> held_out_indices(const std::vector<LayerSample>& samples,
                                  const CalibrationOptions& options) {
  check(options.holdout_fraction >= 0 && options.holdout_fraction < 1,
        "calibration: holdout_fraction must be in [0, 1), got " +
            std::to_string(options.holdout_fraction));
  if (samples.empty()) return {};
  // The lowest and highest token count at each context (a row of the grid), and context at each
  // token count (a column). A corner ends both its row and its column: on a product grid the four
  // corners, on one without the longest sequences each step of its staircase as well.
  using Range = std::pair<int64_t, int64_t>;
  std::map<int64_t, Range> row, column;
  auto widen = [](std::map<int64_t, Range>& ranges, int64_t key, int64_t x) {
    auto [it, fresh] = ranges.try_emplace(key, x, x);
    if (!fresh) it->second = {std::min(it->second.first, x), std::max(it->second.second, x)};
  };
  for (const LayerSample& p : samples) {
    widen(row, p.context, p.tokens);
    widen(column, p.tokens, p.context);
  }
  auto at_an_end = [](const Range& range, int64_t x) {
    return x == range.first || x == range.second;
  };
  std::vector<int> candidates;
  for (int i = 0; i < int(samples.size()); ++i) {
    const LayerSample& p = samples[i];
    if (!(at_an_end(row[p.context], p.tokens) && at_an_end(column[p.tokens], p.context)))
      candidates.push_back(i);
  }
  const int n = int(samples.size());
  int count = int(std::lround(options.holdout_fraction * n));
  count = std::max(0, std::min({count, int(candidates.size()), n - 3}));
  // Fisher-Yates with mt19937_64 (whose output the standard fixes; std::shuffle's use of it is
  // not), so a seed holds out the same points everywhere.
  std::mt19937_64 rng(options.seed);
  for (int i = int(candidates.size()) - 1; i > 0; --i)
    std::swap(candidates[i], candidates[rng() % uint64_t(i + 1)]);
  std::vector<int> held(candidates.begin(), candidates.begin() + count);
  std::sort(held.begin(), held.end());
  return held;
}

Calibration calibrate(const CalibrationSamples& samples, const CalibrationOptions& options) {
  const auto& layer = samples.layer;
  for (size_t i = 0; i < layer.size(); ++i) {
    const LayerSample& s = layer[i];
    const std::string what = "layer sample " + std::to_string(i) + " (tokens " +
                             std::to_string(s.tokens) + ", context " + std::to_string(s.context) +
                             ")";
    check(s.tokens >= 1 && s.context >= 0,
          "calibration: " + what + ": tokens must be at least 1 and context at least 0");
    check_positive_time(s.forward_s, what + " forward");
    check_positive_time(s.backward_s, what + " backward");
    if (s.checkpointed_forward_s != 0)
      check_positive_time(s.checkpointed_forward_s, what + " forward without autograd");
    if (s.recomputed_s != 0) check_positive_time(s.recomputed_s, what + " recomputed layer");
  }
  check(layer.size() >= 3, "calibration: " + std::to_string(layer.size()) +
                               " layer samples are fewer than the 3 unknowns a1, a2, b; profile "
                               "at least 3 grid points");
  Calibration cal;
  cal.held_out = held_out_indices(layer, options);
  std::vector<LayerSample> fit;
  for (int i = 0, h = 0; i < int(layer.size()); ++i) {
    if (h < int(cal.held_out.size()) && cal.held_out[h] == i) {
      ++h;
      continue;
    }
    cal.fit.push_back(i);
    fit.push_back(layer[i]);
  }
  const std::vector<int64_t> cuts = spanned_cuts(fit, options.attention_query_cuts);
  const size_t regimes = cuts.size() + 1;
  const std::vector<double> coef = fit_forward(fit, cuts);
  const std::vector<double> back = fit_backward(fit, cuts);
  cal.a1 = coef[regimes - 1], cal.a2 = coef[regimes], cal.b = coef[regimes + 1];
  cal.a3 = coef[regimes + 2];
  cal.backward_a1 = back[regimes - 1], cal.backward_a2 = back[regimes];
  cal.backward_b = back[regimes + 1], cal.backward_a3 = back[regimes + 2];
  if (!cuts.empty()) {
    cal.attention_query_cuts = cuts;
    cal.a1_by_query.assign(coef.begin(), coef.begin() + regimes);
    cal.backward_a1_by_query.assign(back.begin(), back.begin() + regimes);
  }
  // g against the fitted forward (not the measured one): the planner predicts the embedding's
  // and the head's backward as g times their predicted forward.
  std::vector<double> predicted, backward;
  for (const LayerSample& s : fit) {
    predicted.push_back(cal.forward_s(s.tokens, s.context));
    backward.push_back(s.backward_s);
  }
  cal.backward_ratio = fit_ratio(predicted, backward);
  // r against the fitted forward too: the planner charges a checkpointed layer r of it net.
  auto every = [&](auto measured) {
    return std::all_of(layer.begin(), layer.end(),
                       [&](const LayerSample& s) { return measured(s) > 0; });
  };
  const bool have_no_grad = every([](const LayerSample& s) { return s.checkpointed_forward_s; });
  if (have_no_grad && every([](const LayerSample& s) { return s.recomputed_s; })) {
    std::vector<double> net;
    for (size_t i = 0; i < fit.size(); ++i) {
      const LayerSample& s = fit[i];
      net.push_back((s.checkpointed_forward_s + s.recomputed_s - s.forward_s - s.backward_s) /
                    predicted[i]);
    }
    const double r = median(net);
    check(r > 0 && r <= 2,
          "calibration: checkpointing a layer measured as adding " + std::to_string(r) +
              " of its forward net (its forward without autograd and its recompute with its "
              "backward, less its recorded forward and backward), outside (0, 2]: the runs are "
              "too noisy; profile again with more repeats on a quieter machine");
    cal.checkpointed_forward_ratio = r;
  } else if (have_no_grad) {
    std::vector<double> no_grad;
    for (const LayerSample& s : fit) no_grad.push_back(s.checkpointed_forward_s);
    cal.checkpointed_forward_ratio = fit_ratio(predicted, no_grad);
  }

  std::vector<double> fwd_err, bwd_err;
  for (int i : cal.held_out) {
    const LayerSample& s = layer[i];
    fwd_err.push_back(std::abs(cal.forward_s(s.tokens, s.context) - s.forward_s) / s.forward_s);
    bwd_err.push_back(std::abs(cal.backward_s(s.tokens, s.context) - s.backward_s) / s.backward_s);
  }
  const bool any = !fwd_err.empty();
  cal.forward_median_error = any ? median(fwd_err) : kNaN;
  cal.forward_max_error = any ? *std::max_element(fwd_err.begin(), fwd_err.end()) : kNaN;
  cal.backward_median_error = any ? median(bwd_err) : kNaN;
  cal.backward_max_error = any ? *std::max_element(bwd_err.begin(), bwd_err.end()) : kNaN;

  cal.embedding_s_per_token = fit_per_token(samples.embedding, "embedding");
  cal.head_s_per_token = fit_per_token(samples.head, "head");
  return cal;
}

LinkFit fit_link(const std::vector<LinkSample>& samples) {
  std::vector<double> sizes;
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string what = "link sample " + std::to_string(i);
    check(std::isfinite(samples[i].sent_bytes) && samples[i].sent_bytes > 0,
          "calibration: " + what + " must send a positive number of bytes, got " +
              std::to_string(samples[i].sent_bytes));
    check_positive_time(samples[i].seconds, what);
    sizes.push_back(samples[i].sent_bytes);
  }
  std::sort(sizes.begin(), sizes.end());
  const auto distinct = std::unique(sizes.begin(), sizes.end()) - sizes.begin();
  check(distinct >= 2,
        "calibration: the link's bandwidth and latency need at least two message sizes, got " +
            std::to_string(samples.size()) + " samples of " + std::to_string(distinct));
  // Relative least squares of t = bytes * (1 / bandwidth) + latency.
  std::vector<std::vector<double>> cols(2);
  for (const LinkSample& s : samples) {
    cols[0].push_back(s.sent_bytes / s.seconds);
    cols[1].push_back(1.0 / s.seconds);
  }
  const std::vector<double> coef = nonnegative_fit(cols);
  check(!coef.empty() && coef[0] > 0,
        "calibration: the link's times do not grow with the message size, so no bandwidth "
        "fits them: measure larger messages");
  LinkFit fit;
  fit.bandwidth = 1.0 / coef[0];
  fit.latency_s = coef[1];
  std::vector<double> errors;
  for (const LinkSample& s : samples)
    errors.push_back(std::abs(fit.seconds(s.sent_bytes) - s.seconds) / s.seconds);
  fit.median_error = median(errors);
  fit.max_error = *std::max_element(errors.begin(), errors.end());
  return fit;
}

CostModel apply_alltoall_link(const CostModel& base, const LinkFit& link) {
  CostCoefficients c = base.coefficients();
  c.alltoall_bandwidth = link.bandwidth;
  c.alltoall_latency_s = link.latency_s;
  return CostModel(base.shape(), base.layers_per_stage(), c, base.layout());
}

CostModel apply_calibration(const CostModel& base, const Calibration& calibration) {
  CostCoefficients c = base.coefficients();
  c.a1 = calibration.a1;
  c.a2 = calibration.a2;
  c.b = calibration.b;
  c.a3 = calibration.a3;
  c.backward_ratio = calibration.backward_ratio;
  c.backward_a1 = calibration.backward_a1;
  c.backward_a2 = calibration.backward_a2;
  c.backward_b = calibration.backward_b;
  c.backward_a3 = calibration.backward_a3;
  c.attention_query_cuts = calibration.attention_query_cuts;
  c.a1_by_query = calibration.a1_by_query;
  c.backward_a1_by_query = calibration.backward_a1_by_query;
  if (calibration.embedding_s_per_token)
    c.embedding_s_per_token = *calibration.embedding_s_per_token;
  if (calibration.head_s_per_token) c.head_s_per_token = *calibration.head_s_per_token;
  if (calibration.checkpointed_forward_ratio)
    c.checkpointed_forward_ratio = *calibration.checkpointed_forward_ratio;
  return CostModel(base.shape(), base.layers_per_stage(), c, base.layout());
}

void to_json(nlohmann::json& j, const Calibration& c) {
  auto number = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  j = nlohmann::json{{"a1", c.a1},
                     {"a2", c.a2},
                     {"b", c.b},
                     {"a3", c.a3},
                     {"backward_ratio", c.backward_ratio},
                     {"backward_a1", c.backward_a1},
                     {"backward_a2", c.backward_a2},
                     {"backward_b", c.backward_b},
                     {"backward_a3", c.backward_a3},
                     {"embedding_s_per_token", optional(c.embedding_s_per_token)},
                     {"head_s_per_token", optional(c.head_s_per_token)},
                     {"checkpointed_forward_ratio", optional(c.checkpointed_forward_ratio)},
                     {"fit", c.fit},
                     {"held_out", c.held_out},
                     {"forward_heldout_median", number(c.forward_median_error)},
                     {"forward_heldout_max", number(c.forward_max_error)},
                     {"backward_heldout_median", number(c.backward_median_error)},
                     {"backward_heldout_max", number(c.backward_max_error)}};
  if (!c.attention_query_cuts.empty()) {
    j["attention_query_cuts"] = c.attention_query_cuts;
    j["a1_by_query"] = c.a1_by_query;
    j["backward_a1_by_query"] = c.backward_a1_by_query;
  }
}

void to_json(nlohmann::json& j, const LinkFit& f) {
  j = nlohmann::json{{"bandwidth", f.bandwidth},
                     {"latency_s", f.latency_s},
                     {"median_error", f.median_error},
                     {"max_error", f.max_error}};
}

}  // namespace infinipipe
