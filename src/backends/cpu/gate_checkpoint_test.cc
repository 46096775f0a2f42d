// The gate weights written as files (`dsv4 synth --profile gate`) load, through load_weights, to the
// weights they were written from, bit for bit, and give the same logits; what cannot be held exactly
// is refused by name. Tiny presets (DSV4_GATE_PRESETS=tiny,small adds small).
#include "family/deepseek_v41/gate_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backends/cpu/forward.h"
#include "backends/cpu/gate.h"
#include "backends/cpu/weights_testing.h"
#include "family/deepseek_v41/gate_weights.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/release_encode.h"
#include "family/deepseek_v41/synthetic_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::cpu {
namespace {

namespace fs = std::filesystem;
using weights_testing::differences;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("dsv4_gate_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<family::Preset> presets() {
  const char* e = std::getenv("DSV4_GATE_PRESETS");
  if (e && std::string(e).find("small") != std::string::npos) return {family::Preset::tiny, family::Preset::small};
  return {family::Preset::tiny};
}

// Logits of every row of the first 16 tokens of gate prompt 0, fed whole to a fresh stream.
std::vector<float> logits(std::shared_ptr<const family::Model> w, Precision p) {
  OracleOptions o;
  o.precision = p;
  o.threads = 2;
  std::vector<int32_t> toks = gate::prompt(0, w->config.vocab_size), rows;
  auto oracle = Oracle::create(std::move(w), o);
  EXPECT_TRUE(oracle.ok()) << oracle.status().to_string();
  if (!oracle.ok()) return {};
  toks.resize(16);
  for (int i = 0; i < 16; ++i) rows.push_back(i);
  auto r = (*oracle)->forward({Piece{(*oracle)->open_stream(), toks, rows}});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? (*r)[0].logits : std::vector<float>{};
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

family::SynthOptions fast() {
  family::SynthOptions o;
  o.sync = false;
  return o;
}

TEST(GateCheckpoint, ReleaseLoadsToTheGateWeights) {
  for (family::Preset p : presets())
    for (family::Variant v : {family::Variant::v41, family::Variant::v4}) {
      const family::Config c = family::preset_config(p, v);
      const std::string title = std::string(family::preset_name(p)) + " " + std::string(family::variant_name(v));
      const std::string dir = temp_dir("release");
      auto r = family::write_gate_checkpoint(c, dir, fast());
      ASSERT_TRUE(r.ok()) << title << ": " << r.status().to_string();
      auto loaded = family::open_model(dir);
      fs::remove_all(dir);
      ASSERT_TRUE(loaded.ok()) << title << ": " << loaded.status().to_string();
      auto written = family::written_gate_weights(c);
      ASSERT_TRUE(written.ok()) << written.status().to_string();
      // Every tensor, the drafter and the Engram hash layout: the weights the files were written from (V4-0731's
      // drafter is written with random values and not run: compared on V4.1 only).
      const auto d = differences(**loaded, **written, {.dspark = v == family::Variant::v41});
      EXPECT_TRUE(d.empty()) << title << ", loaded differs in:\n" << joined(d);
      // Those are the gate weights in every tensor; on V4.1 the Engram hash multipliers are the
      // release's (no file holds the gate weights' own), on V4-0731 they are the gate weights outright.
      const auto gate = family::synthetic_weights(c, family::kGateSeed, false, family::WeightProfile::gate);
      const auto g = differences(**written, *gate, {.dspark = false, .engram_multipliers = false});
      EXPECT_TRUE(g.empty()) << title << ", differs from the gate weights in:\n" << joined(g);
      EXPECT_EQ(c.has_engram(), !differences(**written, *gate, {.dspark = false}).empty()) << title;
      // The forward on the loaded files: the same logits bit for bit (V4-0731: the gate weights' own).
      const auto a = logits(*loaded, Precision::ref32);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == logits(*written, Precision::ref32)) << title;
      // V4-0731: the gate weights' own logits; V4.1: not those (another Engram hash of the same tables).
      EXPECT_EQ(!c.has_engram(), a == logits(gate, Precision::ref32)) << title;
    }
}

TEST(GateCheckpoint, Exl3PackGivesTheExl3GateLogits) {
  for (family::Preset p : presets()) {
    const family::Config c = family::preset_config(p, family::Variant::v41);
    const std::string dir = temp_dir("exl3");
    family::Exl3SynthOptions o;
    o.sync = false;
    o.seed = 12345;  // replaced by the gate's seed
    o.release_dir = dir + "/release-engram";
    auto r = family::write_gate_exl3_pack(c, dir, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto loaded = family::open_model(dir, family::OpenOptions{o.release_dir});
    fs::remove_all(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    auto want = family::written_exl3_gate_weights(c);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    const auto d = differences(**loaded, **want, {.dspark = false});
    EXPECT_TRUE(d.empty()) << "the loaded pack differs from exl3_gate_weights in:\n" << joined(d);
    EXPECT_FALSE((*loaded)->weights.dspark.empty()) << "the pack holds the drafter too";
    for (Precision pr : {Precision::ref32, Precision::ref64}) {
      const auto a = logits(*loaded, pr);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == logits(*want, pr)) << family::preset_name(p);
    }
  }
  // V4-0731 has no pack layout.
  EXPECT_FALSE(family::write_gate_exl3_pack(family::preset_config(family::Preset::tiny, family::Variant::v4),
                                            temp_dir("v4"), family::Exl3SynthOptions{}).ok());
}

TEST(GateCheckpoint, WhatAFileCannotHoldIsRefusedByName) {
  const family::Config c = family::preset_config(family::Preset::tiny, family::Variant::v41);
  // The in-memory gate weights themselves: their Engram hash multipliers are their own.
  auto gate = family::synthetic_weights(c, family::kGateSeed, true, family::WeightProfile::gate);
  auto s = family::release_tensor_source(c, *gate, family::kGateSeed);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("layers.1.engram: hash multipliers"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("layers.4.engram: hash multipliers"), std::string::npos) << s.status().message();

  auto w = family::written_gate_weights(c);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(family::release_tensor_source(c, **w, family::kGateSeed).ok());
  // Linears re-encoded as EXL3 have no release bytes.
  auto x = family::exl3_gate_weights(c);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  s = family::release_tensor_source(c, **x, family::kGateSeed);
  ASSERT_FALSE(s.ok());
  const std::string msg = s.status().message();
  for (const char* n : {"layers.0.attn.wq_a.weight: an EXL3 linear", "layers.5.attn.wo_a.weight: an EXL3 linear",
                        "layers.3.ffn.experts.1.w2.weight: an EXL3 linear", "head.weight: an EXL3 linear"})
    EXPECT_NE(msg.find(n), std::string::npos) << n << " not named in:\n" << msg;
  // A config other than the weights' (another layer count) is refused before anything is encoded.
  family::Config other = c;
  other.num_hidden_layers -= 1;
  other.compress_ratios.erase(other.compress_ratios.begin());
  EXPECT_FALSE(family::release_tensor_source(other, **w, family::kGateSeed).ok());
}

}  // namespace
}  // namespace dsv4::cpu
