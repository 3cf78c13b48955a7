#include "infinipipe/cost/hardware.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe {
namespace {

TEST(Hardware, BuiltinsValidateAndRoundTripThroughJson) {
  for (const std::string& name : Hardware::builtin_names()) {
    const Hardware hw = Hardware::builtin(name);
    EXPECT_EQ(hw.name, name);
    EXPECT_NO_THROW(hw.validate());
    const Hardware back = nlohmann::json(hw).get<Hardware>();
    EXPECT_EQ(nlohmann::json(back), nlohmann::json(hw));
    EXPECT_EQ(back.peak_flops, hw.peak_flops);
    EXPECT_EQ(back.link_latency_s, hw.link_latency_s);
  }
  EXPECT_THROW(Hardware::builtin("b200"), Error);
}

TEST(Hardware, ValidateRejectsImpossibleValues) {
  auto message = [](auto edit) {
    Hardware hw = Hardware::builtin("a800");
    edit(hw);
    try {
      hw.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([](Hardware& h) { h.matmul_efficiency = 1.5; }).find("matmul_efficiency"),
            std::string::npos);
  EXPECT_NE(message([](Hardware& h) { h.attention_efficiency = 0; }).find("attention_efficiency"),
            std::string::npos);
  EXPECT_NE(message([](Hardware& h) { h.peak_flops = -1; }).find("peak_flops"), std::string::npos);
  EXPECT_NE(message([](Hardware& h) { h.link_bandwidth = 0; }).find("link_bandwidth"),
            std::string::npos);
  EXPECT_NE(message([](Hardware& h) { h.layer_overhead_s = -1e-6; }).find("layer_overhead_s"),
            std::string::npos);
  EXPECT_EQ(message([](Hardware& h) { h.link_latency_s = 0; }), "(no error)");
  EXPECT_NE(message([](Hardware& h) { h.host_link_bandwidth = -1; }).find("host_link_bandwidth"),
            std::string::npos);
  EXPECT_NE(message([](Hardware& h) { h.gpus_per_host_link = 0; }).find("gpus_per_host_link"),
            std::string::npos);
}

TEST(Hardware, TheHostLinkIsOptionalInJson) {
  // The GPUs' PCIe links, each way, and how many GPUs share one (hardware.cc cites a measurement,
  // a datasheet and a server's topology); the CPU has none.
  EXPECT_EQ(Hardware::builtin("a800").host_link_bandwidth, 26e9);
  EXPECT_EQ(Hardware::builtin("a800").gpus_per_host_link, 2);
  EXPECT_EQ(Hardware::builtin("h100").host_link_bandwidth, 64e9);
  EXPECT_EQ(Hardware::builtin("h100").gpus_per_host_link, 1);
  EXPECT_EQ(Hardware::builtin("cpu").host_link_bandwidth, 0);
  nlohmann::json j = Hardware::builtin("a800");
  EXPECT_EQ(j.at("host_link_bandwidth"), 26e9);
  EXPECT_EQ(j.at("gpus_per_host_link"), 2);
  j.erase("host_link_bandwidth");
  j.erase("gpus_per_host_link");
  const Hardware old = j.get<Hardware>();  // files written before them: no offload, own links
  EXPECT_EQ(old.host_link_bandwidth, 0);
  EXPECT_EQ(old.gpus_per_host_link, 1);
  EXPECT_EQ(nlohmann::json(Hardware::builtin("cpu")).count("host_link_bandwidth"), 0u);
  EXPECT_EQ(nlohmann::json(Hardware::builtin("h100")).count("gpus_per_host_link"), 0u);
}

TEST(Hardware, JsonWithMissingFieldNamesIt) {
  nlohmann::json j = Hardware::builtin("cpu");
  j.erase("link_bandwidth");
  try {
    j.get<Hardware>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing field 'link_bandwidth'"), std::string::npos);
  }
}

TEST(Hardware, InterNodeLinkIsOptionalInJson) {
  const Hardware a800 = Hardware::builtin("a800");
  EXPECT_EQ(a800.inter_node_bandwidth, 25e9);  // one HDR NIC per GPU
  EXPECT_EQ(nlohmann::json(a800).get<Hardware>().inter_node_latency_s, 2e-5);
  // A file written before there were two links describes one node: one link for both.
  nlohmann::json j = a800;
  j.erase("inter_node_bandwidth");
  j.erase("inter_node_latency_s");
  const Hardware old = j.get<Hardware>();
  EXPECT_EQ(old.inter_node_bandwidth, a800.link_bandwidth);
  EXPECT_EQ(old.inter_node_latency_s, a800.link_latency_s);
  j["inter_node_bandwidth"] = 0;
  EXPECT_THROW(j.get<Hardware>(), Error);
}

TEST(Hardware, GpuCurvesAreTheirSourcesPoints) {
  // hardware.cc cites each: XLA's sm_90 matmul table, FlashAttention-2's benchmark bars, the
  // best A100 GEMM of stas00/ml-engineering, the datasheets' peaks.
  const Hardware h100 = Hardware::builtin("h100"), a800 = Hardware::builtin("a800");
  EXPECT_DOUBLE_EQ(h100.matmul_efficiency_by_rows.at(512) * 989e12, 644.12e12);
  EXPECT_DOUBLE_EQ(h100.matmul_efficiency_by_rows.at(4096) * 989e12, 783.33e12);
  EXPECT_DOUBLE_EQ(h100.weight_grad_efficiency_by_rows.at(256) * 989e12, 392.16e12);
  EXPECT_DOUBLE_EQ(h100.attention_efficiency_by_length.at(8192) * 989e12, 308e12);
  EXPECT_DOUBLE_EQ(h100.matmul_efficiency, h100.matmul_efficiency_by_rows.at(1e6));
  EXPECT_DOUBLE_EQ(a800.matmul_efficiency * 312e12, 271.2e12);
  EXPECT_DOUBLE_EQ(a800.matmul_efficiency_by_rows.at(512) * 312e12, 644.12 / 783.33 * 271.2e12);
  EXPECT_DOUBLE_EQ(a800.attention_efficiency_by_length.at(512) * 312e12, 99e12);
  EXPECT_DOUBLE_EQ(a800.attention_efficiency * 312e12, 189e12);
  for (const Hardware& hw : {h100, a800}) {
    for (const SizeCurve* c : {&hw.matmul_efficiency_by_rows, &hw.weight_grad_efficiency_by_rows,
                               &hw.attention_efficiency_by_length})
      for (size_t i = 1; i < c->values.size(); ++i) EXPECT_GT(c->values[i], c->values[i - 1]);
  }
  EXPECT_TRUE(Hardware::builtin("cpu").matmul_efficiency_by_rows.empty());
}

TEST(Hardware, FilesWithFlatFractionsStillLoad) {
  nlohmann::json j = Hardware::builtin("a800");
  for (const char* key : {"matmul_efficiency_by_rows", "weight_grad_efficiency_by_rows",
                          "attention_efficiency_by_length", "memory_bandwidth"})
    j.erase(key);
  j["matmul_efficiency"] = 0.52;
  const Hardware old = j.get<Hardware>();
  EXPECT_EQ(old.matmul_efficiency, 0.52);
  EXPECT_TRUE(old.matmul_efficiency_by_rows.empty());
  EXPECT_EQ(old.memory_bandwidth, 0);
  EXPECT_EQ(nlohmann::json(old).count("memory_bandwidth"), 0u);
}

TEST(Hardware, AFlatFractionBesideItsCurveMustBeTheCurvesLast) {
  Hardware hw = Hardware::builtin("h100");
  hw.attention_efficiency = 0.5;
  try {
    hw.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_efficiency"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("last value"), std::string::npos) << e.what();
  }
  hw = Hardware::builtin("h100");
  hw.weight_grad_efficiency_by_rows.sizes.back() = 8192;
  EXPECT_THROW(hw.validate(), Error);
}

}  // namespace
}  // namespace infinipipe
