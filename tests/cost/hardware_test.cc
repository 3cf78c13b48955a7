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
  EXPECT_THROW(Hardware::builtin("h100"), Error);
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

}  // namespace
}  // namespace infinipipe
