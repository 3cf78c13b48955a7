#include "infinipipe/cost/model_shape.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

int64_t total_params(const ModelShape& s) {
  // Layers, embedding, untied LM head, final norm.
  return s.layers * s.params_per_layer() + 2 * s.embedding_params() + s.hidden;
}

using test_support::error_of;

TEST(ModelShape, Llama7bParametersMatchHandCount) {
  const ModelShape s = ModelShape::builtin("llama-7b");
  // 4 * 4096^2 (q,k,v,o) + 3 * 4096 * 11008 (SwiGLU) + 2 * 4096 (norms) = 202,383,360.
  EXPECT_EQ(s.params_per_layer(), 202383360);
  // 32 layers + 2 * 32000 * 4096 (embedding, LM head) + 4096 = 6,738,415,616: the "6.7B" of
  // Touvron et al. 2023, Table 2.
  EXPECT_EQ(total_params(s), 6738415616);
}

TEST(ModelShape, LargerLlamasMatchPublishedSizes) {
  // Table 2 of the LLaMA paper: 13.0B and 32.5B.
  EXPECT_NEAR(total_params(ModelShape::builtin("llama-13b")) / 1e9, 13.0, 0.05);
  EXPECT_NEAR(total_params(ModelShape::builtin("llama-30b")) / 1e9, 32.5, 0.05);
  // LLaMA-3-8B's released checkpoint: 8,030,261,248 parameters (untied LM head).
  EXPECT_EQ(total_params(ModelShape::builtin("llama3-8b")), 8030261248);
}

TEST(ModelShape, TinyUsesGroupedQueryAttentionInFp32) {
  const ModelShape s = ModelShape::builtin("tiny");
  EXPECT_NO_THROW(s.validate());
  EXPECT_EQ(s.head_dim(), 32);
  EXPECT_LT(s.kv_heads, s.heads);
  EXPECT_EQ(s.bytes_per_element, 4);
  // q, o: 128x128; k, v: 128x64 (2 KV heads of 32); gate, up, down: 128x352; two norms.
  EXPECT_EQ(s.params_per_layer(), 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352 + 2 * 128);
}

TEST(ModelShape, BuiltinsValidateAndUnknownNameListsKnownOnes) {
  for (const std::string& name : ModelShape::builtin_names()) {
    EXPECT_EQ(ModelShape::builtin(name).name, name);
    EXPECT_NO_THROW(ModelShape::builtin(name).validate());
  }
  const std::string message = error_of([] { ModelShape::builtin("gpt-5"); });
  EXPECT_NE(message.find("gpt-5"), std::string::npos);
  EXPECT_NE(message.find("llama-13b"), std::string::npos);
}

TEST(ModelShape, ValidateNamesTheBadField) {
  auto broken = [](auto edit) {
    ModelShape s = ModelShape::builtin("tiny");
    edit(s);
    return error_of([&] { s.validate(); });
  };
  EXPECT_NE(broken([](ModelShape& s) { s.layers = 0; }).find("layers"), std::string::npos);
  EXPECT_NE(broken([](ModelShape& s) { s.heads = 3; }).find("heads (3) must divide hidden"),
            std::string::npos);
  EXPECT_NE(broken([](ModelShape& s) { s.kv_heads = 3; }).find("kv_heads"), std::string::npos);
  EXPECT_NE(broken([](ModelShape& s) { s.vocab = -1; }).find("vocab"), std::string::npos);
  EXPECT_NE(broken([](ModelShape& s) { s.bytes_per_element = 3; }).find("bytes_per_element"),
            std::string::npos);
}

TEST(ModelShape, JsonRoundTripAndErrors) {
  for (const std::string& name : ModelShape::builtin_names()) {
    const ModelShape s = ModelShape::builtin(name);
    const ModelShape back = nlohmann::json(s).get<ModelShape>();
    EXPECT_EQ(nlohmann::json(back), nlohmann::json(s));
    EXPECT_EQ(back.params_per_layer(), s.params_per_layer());
  }
  nlohmann::json j = ModelShape::builtin("tiny");
  EXPECT_FALSE(j.contains("lean_layer"));  // written only when set
  ModelShape lean = ModelShape::builtin("tiny");
  lean.lean_layer = true;
  EXPECT_TRUE(nlohmann::json(lean).get<ModelShape>().lean_layer);
  nlohmann::json missing = j;
  missing.erase("ffn");
  EXPECT_NE(error_of([&] { missing.get<ModelShape>(); }).find("missing field 'ffn'"),
            std::string::npos);
  nlohmann::json misspelt = j;
  misspelt["hiden"] = 3;
  EXPECT_NE(error_of([&] { misspelt.get<ModelShape>(); }).find("unknown field 'hiden'"),
            std::string::npos);
  nlohmann::json fractional = j;
  fractional["layers"] = 7.5;
  EXPECT_NE(error_of([&] { fractional.get<ModelShape>(); }).find("'layers' must be an integer"),
            std::string::npos);
  nlohmann::json impossible = j;
  impossible["kv_heads"] = 3;
  EXPECT_THROW(impossible.get<ModelShape>(), Error);
}

TEST(EvenLayerSplit, CoversAllLayersAndDiffersByAtMostOne) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int stages = std::uniform_int_distribution<int>(1, 32)(rng);
    const int layers = std::uniform_int_distribution<int>(stages, 128)(rng);
    const std::vector<int> split = even_layer_split(layers, stages);
    ASSERT_EQ(static_cast<int>(split.size()), stages);
    EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), layers);
    const auto [lo, hi] = std::minmax_element(split.begin(), split.end());
    EXPECT_GE(*lo, 1);
    EXPECT_LE(*hi - *lo, 1);
  }
}

TEST(EvenLayerSplit, FewerLayersThanStagesIsAnError) {
  EXPECT_THROW(even_layer_split(3, 4), Error);
  EXPECT_THROW(even_layer_split(3, 0), Error);
  EXPECT_EQ(even_layer_split(4, 4), std::vector<int>(4, 1));
}

// nlohmann narrows silently: 4294967297 layers would read as 1, a plausible model.
TEST(ModelShape, IntegersBeyondIntAreErrorsNotWrapped) {
  nlohmann::json j = ModelShape::builtin("tiny");
  j["layers"] = 4294967297LL;
  const std::string message = error_of([&] { j.get<ModelShape>(); });
  EXPECT_NE(message.find("'layers' is out of range: 4294967297"), std::string::npos) << message;
  j["layers"] = -4294967295LL;
  EXPECT_NE(error_of([&] { j.get<ModelShape>(); }).find("'layers' is out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace infinipipe
