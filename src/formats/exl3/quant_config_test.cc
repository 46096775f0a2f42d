// quantization_config parsing on the ExLlamaV3-written fixture files and on malformed inputs.
#include "formats/exl3/quant_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace dsv4::exl3 {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(DSV4_SOURCE_DIR) + "/tests/data/exl3/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(QuantConfig, ReadsTheFixtureConfigs) {
  for (const char* cb : {"3inst", "mcg", "mul1"}) {
    const std::string path = fixture_path(std::string("quantization_config_") + cb + ".json");
    auto qc = parse_quant_config(read_text(path), path);
    ASSERT_TRUE(qc.ok()) << qc.status().to_string();
    EXPECT_EQ(codebook_name(qc->codebook), cb);
    EXPECT_EQ(qc->version, "1.4.1");
    EXPECT_EQ(qc->head_bits, 6);
    EXPECT_EQ(qc->out_scales, "always");
    EXPECT_DOUBLE_EQ(qc->bits, 3.6);  // fixture README: numel-weighted mean K of the 14 files
    ASSERT_EQ(qc->tensor_storage.size(), 14u);
    for (const auto& [module, storage] : qc->tensor_storage) {
      EXPECT_TRUE(storage.exl3) << module;
      // The module key spells its K: exl3_<cb>_k<K>_<in>x<out>.
      const int k = std::stoi(module.substr(module.find("_k") + 2));
      EXPECT_EQ(storage.bits_per_weight, k) << module;
      const auto& trellis = storage.stored_tensors.at(module + ".trellis");
      EXPECT_EQ(trellis.shape.back(), 16 * k) << module;
      EXPECT_EQ(trellis.dtype, "torch.int16");
      if (std::string(cb) == "3inst") EXPECT_FALSE(storage.codebook.has_value());
      else EXPECT_EQ(codebook_name(*storage.codebook), cb);
    }
  }
}

TEST(QuantConfig, RefusesBadInputNamingTheKey) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto qc = parse_quant_config(text, "config.json");
    ASSERT_FALSE(qc.ok()) << text;
    EXPECT_NE(qc.status().message().find(needle), std::string::npos) << qc.status().message();
  };
  expect_error("{", "not valid JSON");
  expect_error(R"({"quant_method":"fp8","bits":3})", "quant_method");
  expect_error(R"({"quant_method":"exl3"})", "bits");
  expect_error(R"({"quant_method":"exl3","bits":3,"codebook":"e8p"})", "codebook");
  expect_error(R"({"quant_method":"exl3","bits":3,"tensor_storage":{"a":{"stored_tensors":{},
      "quant_format":"exl3","bits_per_weight":9}}})", "tensor_storage.a.bits_per_weight");
  expect_error(R"({"quant_method":"exl3","bits":3,"tensor_storage":{"a":{"stored_tensors":{},
      "quant_format":"exl3","bits_per_weight":3,"mcg_multiplier":12}}})", "mcg_multiplier");
  auto ok = parse_quant_config(R"({"quantization_config":{"quant_method":"exl3","bits":2.9,
      "head_bits":6,"mtp_bits":4,"codebook":"mul1"}})", "config.json");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->mtp_bits.value(), 4);
  EXPECT_EQ(ok->codebook, Codebook::mul1);
}

TEST(QuantConfig, WrittenFormReadsBackAsTheFixture) {
  // ExLlamaV3's own quantization_config.json (fixture) -> our writer -> our reader: same content.
  const std::string path = fixture_path("quantization_config_mul1.json");
  auto a = parse_quant_config(read_text(path), path);
  ASSERT_TRUE(a.ok());
  auto b = parse_quant_config(quant_config_to_json(*a), "written");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->version, a->version);
  EXPECT_EQ(b->bits, a->bits);
  EXPECT_EQ(b->codebook, a->codebook);
  ASSERT_EQ(b->tensor_storage.size(), a->tensor_storage.size());
  for (const auto& [key, m] : a->tensor_storage) {
    const ModuleStorage& n = b->tensor_storage.at(key);
    EXPECT_EQ(n.exl3, m.exl3) << key;
    EXPECT_EQ(n.bits_per_weight, m.bits_per_weight) << key;
    EXPECT_EQ(n.codebook, m.codebook) << key;
    ASSERT_EQ(n.stored_tensors.size(), m.stored_tensors.size()) << key;
    for (const auto& [name, t] : m.stored_tensors) {
      EXPECT_EQ(n.stored_tensors.at(name).shape, t.shape) << name;
      EXPECT_EQ(n.stored_tensors.at(name).n_bytes, t.n_bytes) << name;
      EXPECT_EQ(n.stored_tensors.at(name).dtype, t.dtype) << name;
    }
  }
}

}  // namespace
}  // namespace dsv4::exl3
