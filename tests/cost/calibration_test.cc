#include "infinipipe/cost/calibration.h"

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

// Magnitudes like the tiny model on one CPU core.
constexpr double kA1 = 3e-9, kA2 = 2e-6, kB = 4e-4, kG = 2.3;

double truth(const GridPoint& p) {
  return kA1 * double(p.tokens) * double(2 * p.context + p.tokens) + kA2 * double(p.tokens) + kB;
}

// The full grid's samples, each time off by a uniform relative error in [-noise, noise].
std::vector<LayerSample> synthetic(double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  std::vector<LayerSample> out;
  for (const GridPoint& p : profile_grid("full").points()) {
    const double t = truth(p);
    out.push_back({p.tokens, p.context, t * (1 + u(rng)), kG * t * (1 + u(rng))});
  }
  return out;
}

using test_support::error_of;

TEST(Calibration, RecoversExactCoefficients) {
  const Calibration cal = calibrate({synthetic(0, 0)});
  EXPECT_NEAR(cal.a1, kA1, 1e-9 * kA1);
  EXPECT_NEAR(cal.a2, kA2, 1e-9 * kA2);
  EXPECT_NEAR(cal.b, kB, 1e-9 * kB);
  EXPECT_NEAR(cal.backward_ratio, kG, 1e-9);
  EXPECT_LT(cal.forward_max_error, 1e-9);
  EXPECT_LT(cal.backward_max_error, 1e-9);
  EXPECT_FALSE(cal.embedding_s_per_token.has_value());
}

TEST(Calibration, WithinNoise) {
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const std::vector<LayerSample> noisy = synthetic(0.05, seed);
    const Calibration cal = calibrate({noisy}, {0.25, seed});
    EXPECT_NEAR(cal.a1, kA1, 0.15 * kA1);
    EXPECT_NEAR(cal.a2, kA2, 0.15 * kA2);
    EXPECT_NEAR(cal.backward_ratio, kG, 0.05 * kG);
    // Predictions of the noise-free times are within the noise, and the held-out errors
    // against the noisy times within twice it.
    for (const GridPoint& p : profile_grid("full").points())
      EXPECT_LT(std::abs(cal.forward_s(p.tokens, p.context) / truth(p) - 1), 0.05);
    EXPECT_LE(cal.forward_median_error, cal.forward_max_error);
    EXPECT_LT(cal.forward_max_error, 0.1);
    EXPECT_LT(cal.backward_max_error, 0.1);
  }
}

TEST(Calibration, BackwardFittedOnItsOwn) {
  // An eager layer's backward: a steeper attention term and no interpreter overhead, so no single
  // ratio to the forward describes it.
  std::vector<LayerSample> samples = synthetic(0, 0);
  auto backward = [](const LayerSample& s) {
    return 3 * kA1 * double(s.tokens) * double(2 * s.context + s.tokens) +
           2 * kA2 * double(s.tokens) + 0.2 * kB;
  };
  for (LayerSample& s : samples) s.backward_s = backward(s);
  const Calibration cal = calibrate({samples});
  EXPECT_NEAR(cal.backward_a1, 3 * kA1, 1e-9 * kA1);
  EXPECT_NEAR(cal.backward_a2, 2 * kA2, 1e-9 * kA2);
  EXPECT_NEAR(cal.backward_b, 0.2 * kB, 1e-9 * kB);
  EXPECT_LT(cal.backward_max_error, 1e-9);
  for (const LayerSample& s : samples)
    EXPECT_NEAR(cal.backward_s(s.tokens, s.context), backward(s), 1e-9 * backward(s));

  const CostModel base =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 2);
  const CostModel got = apply_calibration(base, cal);
  Chunk chunk;
  chunk.slices.push_back(Slice{0, 256, 768, 1024});
  EXPECT_NEAR(got.layer_backward_time(chunk), cal.backward_s(512, 256), 1e-15);
}

TEST(Calibration, ContextTerm) {
  // A slice's context costs a3 per token on top of a1's share (the CPU attention reads it once per
  // slice): recovered exactly, in the forward and the backward, and charged per slice by the
  // cost model.
  constexpr double kA3 = 1.4e-7;
  std::vector<LayerSample> samples = synthetic(0, 0);
  for (LayerSample& s : samples) {
    s.forward_s += kA3 * double(s.context);
    s.backward_s = 2 * s.forward_s;
  }
  const Calibration cal = calibrate({samples});
  EXPECT_NEAR(cal.a1, kA1, 1e-9 * kA1);
  EXPECT_NEAR(cal.a2, kA2, 1e-9 * kA2);
  EXPECT_NEAR(cal.b, kB, 1e-9 * kB);
  EXPECT_NEAR(cal.a3, kA3, 1e-9 * kA3);
  EXPECT_NEAR(cal.backward_a3, 2 * kA3, 1e-9 * kA3);
  EXPECT_LT(cal.forward_max_error, 1e-9);
  nlohmann::json j = cal;
  EXPECT_EQ(j["a3"], cal.a3);
  EXPECT_EQ(j["backward_a3"], cal.backward_a3);

  const CostModel base =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 2);
  const CostModel got = apply_calibration(base, cal);
  EXPECT_EQ(got.coefficients().a3, cal.a3);
  Chunk chunk;  // a slice at context 4096 and a whole sequence
  chunk.slices.push_back(Slice{0, 4096, 4608, 8192});
  chunk.slices.push_back(Slice{1, 0, 300, 300});
  EXPECT_NEAR(got.layer_forward_time(chunk),
              cal.forward_s(512, 4096) + cal.forward_s(300, 0) - cal.b, 1e-15);
  EXPECT_NEAR(got.layer_backward_time(chunk),
              cal.backward_s(512, 4096) + cal.backward_s(300, 0) - cal.backward_b, 1e-15);

  // One context only: a3 is not determined beside b, so it is 0 and the rest still fits.
  std::vector<LayerSample> flat;
  for (const LayerSample& s : samples)
    if (s.context == 1024) flat.push_back(s);
  const std::vector<double> coef = fit_forward(flat);
  ASSERT_EQ(coef.size(), 4u);
  EXPECT_EQ(coef[3], 0);
}

TEST(Calibration, AttentionQueryRegimes) {
  // The CPU attention tiles queries by their number (runtime/layer_profiler.h), so a1 differs
  // below 192, below 768 and from 768 query tokens: with those cuts each regime's a1 (and a1')
  // is recovered exactly, a1 is the last regime's, and the cost model charges each slice its
  // regime's a1.
  const std::vector<int64_t> cuts = {192, 768};
  const double a1[] = {4e-9, 3.5e-9, 3e-9};
  std::vector<LayerSample> samples = synthetic(0, 0);
  for (LayerSample& s : samples) {
    const int r = (s.tokens >= 192) + (s.tokens >= 768);
    s.forward_s += (a1[r] - kA1) * double(s.tokens) * double(2 * s.context + s.tokens);
    s.backward_s = 2 * s.forward_s;
  }
  const Calibration cal = calibrate({samples}, {0.25, 0, cuts});
  ASSERT_EQ(cal.attention_query_cuts, cuts);
  ASSERT_EQ(cal.a1_by_query.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NEAR(cal.a1_by_query[r], a1[r], 1e-9 * a1[r]) << r;
    EXPECT_NEAR(cal.backward_a1_by_query[r], 2 * a1[r], 1e-9 * a1[r]) << r;
  }
  EXPECT_EQ(cal.a1, cal.a1_by_query[2]);
  EXPECT_NEAR(cal.a2, kA2, 1e-9 * kA2);
  EXPECT_NEAR(cal.b, kB, 1e-9 * kB);
  EXPECT_LT(cal.forward_max_error, 1e-9);
  EXPECT_LT(cal.backward_max_error, 1e-9);
  // One a1 for all lengths cannot fit these times.
  EXPECT_GT(calibrate({samples}).forward_max_error, 0.01);

  const CostModel base =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 2);
  const CostModel got = apply_calibration(base, cal);
  EXPECT_EQ(got.coefficients().a1_by_query, cal.a1_by_query);
  for (int64_t tokens : {100, 191, 192, 500, 767, 768, 1500})
    for (int64_t context : {0, 4096}) {
      EXPECT_NEAR(got.slice_layer_time(context, tokens), cal.forward_s(tokens, context) - cal.b,
                  1e-12)
          << tokens << " at " << context;
      Chunk one;
      one.slices.push_back(Slice{0, context, context + tokens, context + tokens});
      EXPECT_NEAR(got.layer_backward_time(one), cal.backward_s(tokens, context), 1e-12);
    }
  // The chunking's prefix cost keeps one a1 (the last regime's), so it grows with the tokens.
  EXPECT_NEAR(got.prefix_layer_time(500), a1[2] * 500.0 * 500.0 + cal.a2 * 500.0, 1e-15);
  nlohmann::json j = cal;
  EXPECT_EQ(j["a1_by_query"].size(), 3u);

  // A regime with fewer than two fitted token counts drops its cut: here below 192 only 128
  // tokens are fitted, so the cut at 192 goes and that regime joins the next.
  std::vector<LayerSample> fewer_lengths;
  for (const LayerSample& s : samples)
    if (s.tokens >= 128) fewer_lengths.push_back(s);
  const Calibration fewer = calibrate({fewer_lengths}, {0.25, 0, cuts});
  EXPECT_EQ(fewer.attention_query_cuts, std::vector<int64_t>{768});
  EXPECT_EQ(fewer.a1_by_query.size(), 2u);
  // The trainer's grid has one token count per regime: one a1.
  std::vector<LayerSample> training;
  for (const LayerSample& s : samples)
    if (s.tokens == 128 || s.tokens == 512 || s.tokens == 2048) training.push_back(s);
  EXPECT_TRUE(calibrate({training}, {0.25, 0, cuts}).attention_query_cuts.empty());
  // And no cut leaves one a1, as before.
  const Calibration plain = calibrate({samples});
  EXPECT_TRUE(plain.attention_query_cuts.empty() && plain.a1_by_query.empty());
  EXPECT_EQ(error_of([&] {
              calibrate({samples}, {0.25, 0, {768, 192}});
            }),
            "calibration: attention_query_cuts must be positive and increasing, got 192 at "
            "position 1");
}

TEST(Calibration, ForwardWithoutAutogradGivesR) {
  // The profiler times each point's forward without autograd too (a checkpointed layer's first
  // forward): r is its ratio to the fitted forward, and the cost model takes it.
  std::vector<LayerSample> samples = synthetic(0, 0);
  Calibration cal = calibrate({samples});
  EXPECT_FALSE(cal.checkpointed_forward_ratio.has_value());  // not measured
  EXPECT_TRUE(nlohmann::json(cal)["checkpointed_forward_ratio"].is_null());
  for (LayerSample& s : samples) s.checkpointed_forward_s = 0.94 * s.forward_s;
  cal = calibrate({samples});
  ASSERT_TRUE(cal.checkpointed_forward_ratio.has_value());
  EXPECT_NEAR(*cal.checkpointed_forward_ratio, 0.94, 1e-9);

  // apply_calibration sets it and keeps everything else, the layout included.
  ParallelLayout layout;
  layout.sequence = 2;
  const ModelShape tiny = ModelShape::builtin("tiny");
  const CostModel base(tiny, {tiny.layers / 2, tiny.layers - tiny.layers / 2},
                       CostCoefficients::analytic(tiny, Hardware::builtin("cpu")), layout);
  const CostModel got = apply_calibration(base, cal);
  EXPECT_NEAR(got.coefficients().checkpointed_forward_ratio, 0.94, 1e-9);
  EXPECT_EQ(got.layout().sequence, 2);

  // Measured on some points only: no r rather than one from part of the grid.
  samples[3].checkpointed_forward_s = 0;
  EXPECT_FALSE(calibrate({samples}).checkpointed_forward_ratio.has_value());
  samples[3].checkpointed_forward_s = -1;
  EXPECT_NE(error_of([&] { calibrate({samples}); }).find("without autograd"), std::string::npos);
}

TEST(Calibration, RecomputeGivesNetR) {
  // With the recompute timed (its recorded forward and at once its backward), r is what
  // checkpointing adds net: forward without autograd + recompute - recorded forward - backward.
  std::vector<LayerSample> samples = synthetic(0, 0);
  for (LayerSample& s : samples) {
    s.checkpointed_forward_s = 0.94 * s.forward_s;
    s.recomputed_s = 0.88 * s.forward_s + 0.95 * s.backward_s;
  }
  const double expected = 0.94 + 0.88 - 1 - 0.05 * kG;  // 0.705
  Calibration cal = calibrate({samples});
  ASSERT_TRUE(cal.checkpointed_forward_ratio.has_value());
  EXPECT_NEAR(*cal.checkpointed_forward_ratio, expected, 1e-9);

  // The median over the points: one wild point does not move it.
  samples[7].recomputed_s *= 5;
  EXPECT_NEAR(*calibrate({samples}).checkpointed_forward_ratio, expected, 1e-9);

  // Measured on some points only: r falls back to the forward without autograd alone.
  samples[3].recomputed_s = 0;
  EXPECT_NEAR(*calibrate({samples}).checkpointed_forward_ratio, 0.94, 1e-9);

  // A net cost that is not positive is noise, not a measurement: a clear error.
  for (LayerSample& s : samples) s.recomputed_s = 0.5 * s.forward_s;
  EXPECT_NE(error_of([&] { calibrate({samples}); }).find("more repeats"), std::string::npos);
  samples[2].recomputed_s = -1;
  EXPECT_NE(error_of([&] { calibrate({samples}); }).find("recomputed layer"), std::string::npos);
}

TEST(Calibration, HeldOutSplit) {
  // The full grid: 8 token counts x 6 contexts without the sequences over 10240 tokens, a
  // staircase whose corners are these.
  const std::vector<LayerSample> samples = synthetic(0, 0);
  ASSERT_EQ(samples.size(), 45u);
  const std::set<std::pair<int64_t, int64_t>> corners = {{64, 0},      {64, 8192},   {2048, 8192},
                                                         {4096, 4096}, {8192, 2048}, {8192, 0}};
  const CalibrationOptions options{0.25, 7};
  const std::vector<int> held = held_out_indices(samples, options);
  EXPECT_EQ(held.size(), 11u);                          // round(0.25 * 45)
  EXPECT_EQ(held, held_out_indices(samples, options));  // deterministic
  EXPECT_TRUE(std::is_sorted(held.begin(), held.end()));
  EXPECT_EQ(std::set<int>(held.begin(), held.end()).size(), held.size());
  for (int i : held)
    EXPECT_FALSE(corners.count({samples[i].tokens, samples[i].context})) << "corner " << i;
  // Every other point is held out by some seed; the corners by none.
  std::set<int> ever;
  for (uint64_t seed = 0; seed < 200; ++seed)
    for (int i : held_out_indices(samples, {0.25, seed})) ever.insert(i);
  EXPECT_EQ(ever.size(), samples.size() - corners.size());
  EXPECT_NE(held, held_out_indices(samples, {0.25, 8}));  // the seed matters
  EXPECT_TRUE(held_out_indices(samples, {0.0, 0}).empty());

  const Calibration cal = calibrate({samples}, options);
  EXPECT_EQ(cal.held_out, held);
  EXPECT_EQ(cal.fit.size() + cal.held_out.size(), samples.size());
  // Without held-out points the errors are unknown (NaN), not zero.
  EXPECT_TRUE(std::isnan(calibrate({samples}, {0.0, 0}).forward_median_error));
  // A small grid keeps at least 3 points to fit.
  const std::vector<LayerSample> four(samples.begin(), samples.begin() + 4);
  EXPECT_GE(four.size() - held_out_indices(four, {0.9, 0}).size(), 3u);
}

TEST(Calibration, NonNegative) {
  // Times with a negative intercept: unconstrained least squares would give b < 0.
  std::vector<LayerSample> samples;
  for (const GridPoint& p : profile_grid("full").points()) {
    const double t = truth(p) - kB - 5e-5;
    samples.push_back({p.tokens, p.context, t, 2 * t});
  }
  const std::vector<double> coef = fit_forward(samples);
  for (double c : coef) EXPECT_GE(c, 0);
  EXPECT_EQ(coef[2], 0);
  EXPECT_GT(coef[0], 0);
  EXPECT_GT(coef[1], 0);
  // With b = 0 the best a1, a2 (at the fitted a3) are the unconstrained fit of their columns, so
  // the fit must be no worse than any other non-negative a1, a2 nearby.
  auto loss = [&](double a1, double a2) {
    double sum = 0;
    for (const LayerSample& s : samples) {
      const double r =
          (a1 * s.tokens * double(2 * s.context + s.tokens) + a2 * s.tokens + coef[3] * s.context) /
              s.forward_s -
          1;
      sum += r * r;
    }
    return sum;
  };
  for (double f : {0.99, 1.01})
    EXPECT_LE(loss(coef[0], coef[1]),
              std::min(loss(f * coef[0], coef[1]), loss(coef[0], f * coef[1])));
}

TEST(Calibration, PerTokenParts) {
  CalibrationSamples samples{synthetic(0, 0), {{64, 64e-7}, {1024, 1024e-7}}, {{100, 3e-4}}};
  const Calibration cal = calibrate(samples);
  EXPECT_NEAR(*cal.embedding_s_per_token, 1e-7, 1e-16);
  EXPECT_NEAR(*cal.head_s_per_token, 3e-6, 1e-15);

  const CostModel base =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 2);
  const CostModel got = apply_calibration(base, cal);
  EXPECT_EQ(got.coefficients().a1, cal.a1);
  EXPECT_EQ(got.coefficients().backward_ratio, cal.backward_ratio);
  EXPECT_EQ(got.coefficients().head_s_per_token, *cal.head_s_per_token);
  EXPECT_EQ(got.coefficients().activation_bytes, base.coefficients().activation_bytes);
  EXPECT_EQ(got.layers_per_stage(), base.layers_per_stage());
  // Unmeasured parts keep the base model's values.
  const CostModel kept = apply_calibration(base, calibrate({synthetic(0, 0)}));
  EXPECT_EQ(kept.coefficients().head_s_per_token, base.coefficients().head_s_per_token);

  const nlohmann::json j = cal;
  EXPECT_EQ(j["held_out"].size(), cal.held_out.size());
  EXPECT_TRUE(nlohmann::json(calibrate({synthetic(0, 0)}))["head_s_per_token"].is_null());
}

TEST(Calibration, Statistics) {
  const std::vector<double> runs{5, 1, 2, 100, 3, 4, 2, 3};
  EXPECT_EQ(robust_time(runs, Statistic::Min), 1);
  EXPECT_EQ(robust_time(runs, Statistic::Median), 3);
  // Sorted 1 2 2 3 3 4 5 100: drops two at each end.
  EXPECT_EQ(robust_time(runs, Statistic::TrimmedMean), (2 + 3 + 3 + 4) / 4.0);
  EXPECT_EQ(parse_statistic(to_string(Statistic::TrimmedMean)), Statistic::TrimmedMean);
  EXPECT_NE(error_of([] { parse_statistic("mean"); }).find("'min', 'median'"), std::string::npos);
  EXPECT_NE(error_of([] { robust_time({}, Statistic::Min); }), "");
}

TEST(Calibration, BadInput) {
  std::vector<LayerSample> samples = synthetic(0, 0);
  EXPECT_NE(error_of([&] {
              calibrate({{samples.begin(), samples.begin() + 2}});
            }).find("fewer than the 3 unknowns"),
            std::string::npos);
  std::vector<LayerSample> bad = samples;
  bad[3].forward_s = 0;
  EXPECT_NE(error_of([&] { calibrate({bad}); }).find("layer sample 3"), std::string::npos);
  bad = samples;
  bad[4].backward_s = -1;
  EXPECT_NE(error_of([&] { calibrate({bad}); }).find("positive time"), std::string::npos);
  bad = samples;
  bad[0].tokens = 0;
  EXPECT_NE(error_of([&] { calibrate({bad}); }).find("tokens must be at least 1"),
            std::string::npos);
  // Two token counts at one context cannot separate a1, a2 and b.
  std::vector<LayerSample> flat;
  for (int64_t s : {64, 128, 64, 128}) flat.push_back({s, 0, 1e-3 * s, 2e-3 * s});
  EXPECT_NE(error_of([&] {
              calibrate({flat}, {0.0, 0});
            }).find("do not determine"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              calibrate({samples}, {1.0, 0});
            }).find("holdout_fraction"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              calibrate({samples, {}, {{10, 0}}});
            }).find("head sample 0"),
            std::string::npos);
}

// Magnitudes like Gloo on loopback: a few GB/s, tens of microseconds.
constexpr double kBandwidth = 2.5e9, kLatency = 6e-5;

std::vector<LinkSample> link_samples(double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  std::vector<LinkSample> out;
  for (double bytes = 2048; bytes <= 4 << 20; bytes *= 4)
    out.push_back({bytes, (bytes / kBandwidth + kLatency) * (1 + u(rng))});
  return out;
}

TEST(LinkFit, RecoversBandwidthAndLatency) {
  const LinkFit fit = fit_link(link_samples(0, 0));
  EXPECT_NEAR(fit.bandwidth / kBandwidth, 1, 1e-9);
  EXPECT_NEAR(fit.latency_s / kLatency, 1, 1e-9);
  EXPECT_LT(fit.max_error, 1e-9);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    // 5% noise: every prediction of the noise-free time within 5%, at sizes between samples.
    const LinkFit noisy = fit_link(link_samples(0.05, seed));
    for (double bytes : {3e3, 1e5, 3e6}) {
      const double truth = bytes / kBandwidth + kLatency;
      EXPECT_NEAR(noisy.seconds(bytes) / truth, 1, 0.05) << bytes;
    }
    EXPECT_LE(noisy.median_error, noisy.max_error);
    EXPECT_LT(noisy.max_error, 0.1);
  }
}

TEST(LinkFit, NonNegativeAndBadInput) {
  // Times below a line through the origin: the latency is held at zero, not fitted negative.
  const LinkFit fit = fit_link({{1e3, 0.5e-6}, {1e6, 1e-3}, {4e6, 4e-3}});
  EXPECT_EQ(fit.latency_s, 0);
  EXPECT_GT(fit.bandwidth, 0);
  EXPECT_NE(error_of([] {
              fit_link({{1e3, 1e-4}, {1e3, 2e-4}});
            }).find("two message sizes"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              fit_link({{1e3, 1e-4}, {0, 2e-4}});
            }).find("link sample 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              fit_link({{1e3, 1e-4}, {1e6, -1}});
            }).find("positive time"),
            std::string::npos);
  // Larger messages no slower: no bandwidth.
  EXPECT_NE(error_of([] {
              fit_link({{1e3, 2e-4}, {1e6, 1e-4}});
            }).find("do not grow"),
            std::string::npos);
}

TEST(LinkFit, AppliedToTheAlltoallOnly) {
  ModelShape shape;
  shape.vocab = 1000, shape.hidden = 256, shape.layers = 4, shape.heads = 4, shape.kv_heads = 2,
  shape.ffn = 512, shape.bytes_per_element = 4;
  ParallelLayout layout;
  layout.sequence = 2;
  layout.gpus_per_node = 2;
  const CostModel base = CostModel::analytic(shape, Hardware::builtin("cpu"), 2, layout);
  const LinkFit link{1e9, 1e-4};
  const CostModel measured = apply_alltoall_link(base, link);
  EXPECT_EQ(measured.layout().sequence, 2);
  const Chunk chunk{{Slice{0, 0, 512, 512}}};
  // Per layer and direction: 4 all-to-alls of q, k, v, o, each rank's 256 rows, half sent.
  const double kv_dim = 2 * 64;
  const double sent = 256 * (2 * 256 + 2 * kv_dim) * 4 / 2.0;
  EXPECT_NEAR(measured.layer_alltoall_time(chunk, 0), sent / 1e9 + 4 * 1e-4, 1e-12);
  EXPECT_NE(base.layer_alltoall_time(chunk, 0), measured.layer_alltoall_time(chunk, 0));
  EXPECT_EQ(base.p2p_time(chunk, 0), measured.p2p_time(chunk, 0));  // sends keep their link
  // The JSON round trip keeps it; a file without it reads as the in-node link.
  const CostModel loaded = nlohmann::json(measured).get<CostModel>();
  EXPECT_EQ(loaded.coefficients().alltoall_bandwidth, 1e9);
  EXPECT_EQ(loaded.coefficients().alltoall_latency_s, 1e-4);
  nlohmann::json plain = nlohmann::json(base);
  EXPECT_FALSE(plain["coefficients"].contains("alltoall_bandwidth"));
  EXPECT_EQ(plain.get<CostModel>().layer_alltoall_time(chunk, 0),
            base.layer_alltoall_time(chunk, 0));
}

}  // namespace
}  // namespace infinipipe
