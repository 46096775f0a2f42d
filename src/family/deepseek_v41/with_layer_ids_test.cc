// with_layer_ids: a cut to any closed set of layers keeps each kept layer's tensors and roles under its new
// number, equals with_layers / with_decoder_layers on their sets, and names what an open set drops.
#include "family/deepseek_v41/with_layers.h"

#include <gtest/gtest.h>

#include <string>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/layer_roles.h"
#include "family/deepseek_v41/layer_sources.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {
namespace {

// The backbone layer of a "layers.N." tensor name, else -1.
int32_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoi(name.substr(7));
}

// cut = with_layer_ids(full, ids): validates, round-trips config.json, kept layer k's tensors are uncut layer
// ids[k]'s (name renumbered, dtype, shape) and nothing else of a layer remains; the other tensors are the uncut
// ones except main_proj when the stages tap fewer layers; every kept layer has its uncut role.
void expect_cut(const Config& full, const std::vector<int32_t>& ids) {
  SCOPED_TRACE(fmt::format("{} layers {}", variant_name(full.variant), fmt::join(ids, ",")));
  auto cut = with_layer_ids(full, ids);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  EXPECT_EQ(cut->num_hidden_layers, static_cast<int32_t>(ids.size()));
  auto back = parse_config(config_to_json(*cut));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(config_to_json(*back), config_to_json(*cut));
  const TensorTable ft = expected_tensors(full), ct = expected_tensors(*cut);
  size_t expected = 0;
  for (const TensorSpec& s : ft.tensors) {
    const int32_t l = layer_of(s.name);
    const auto at = std::find(ids.begin(), ids.end(), l);
    if (l >= 0 && at == ids.end()) continue;
    ++expected;
    std::string name = s.name;
    if (l >= 0) {
      const std::string from = fmt::format("layers.{}.", l);
      name = fmt::format("layers.{}.", at - ids.begin()) + s.name.substr(from.size());
    }
    const TensorSpec* t = ct.find(name);
    ASSERT_NE(t, nullptr) << name << " (uncut " << s.name << ")";
    EXPECT_EQ(t->dtype, s.dtype) << name;
    if (s.name.rfind("mtp.0.main_proj.", 0) != 0 ||
        cut->dspark_target_layer_ids.size() == full.dspark_target_layer_ids.size())
      EXPECT_EQ(t->shape, s.shape) << name;
  }
  EXPECT_EQ(ct.tensors.size(), expected);
  const ModelPlan fp = build_plan(full), cp = build_plan(*cut);
  for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ(layer_role(cp.layers[k]), layer_role(fp.layers[ids[k]])) << ids[k];
}

TEST(WithLayerIds, V41FullSingleRoles) {
  const Config c = v41_flash_config();
  expect_cut(c, {20, 23});
  expect_cut(c, {20, 24, 25});
  expect_cut(c, {1, 14});
  expect_cut(c, {0, 2, 3, 20, 21, 24});
  auto r = with_layer_ids(c, {20, 24, 25});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->compress_ratios, (std::vector<int32_t>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(r->kv_source_layer_ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(r->index_source_layer_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r->candidate_source_layer_id, 0);
  EXPECT_FALSE(r->has_engram());
  EXPECT_EQ(r->dspark_target_layer_ids, (std::vector<int32_t>{0, 1, 2}));
  const ModelPlan p = build_plan(*r);
  EXPECT_EQ(p.layers[1].attn, AttnKind::reindex);
  EXPECT_EQ(p.layers[1].candidate_from, 0);
  EXPECT_EQ(p.layers[2].kv_from, 0);
  EXPECT_EQ(p.layers[2].topk_from, 1);
  // Engram layer 14 keeps its table rows behind layer 1's.
  auto e = with_layer_ids(c, {1, 14});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->engram_layer_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(e->engram_num_embeddings, c.engram_num_embeddings);
}

TEST(WithLayerIds, V4FullHashPrefix) {
  const Config c = v4_flash_0731_config();
  expect_cut(c, {2, 3, 10});
  expect_cut(c, {0, 2, 3, 4});
  auto r = with_layer_ids(c, {2, 3, 10});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_hash_layers, 1);
  EXPECT_EQ(r->compress_ratios, (std::vector<int32_t>{4, 128, 4, 0, 0, 0}));
  EXPECT_EQ(with_layer_ids(c, {5, 6})->num_hash_layers, 0);
}

TEST(WithLayerIds, EqualsThePrefixAndDecoderCuts) {
  for (Variant v : {Variant::v41, Variant::v4})
    for (Preset pr : {Preset::tiny, Preset::small, Preset::full}) {
      const Config c = preset_config(pr, v);
      for (int32_t n = 1; n < c.num_hidden_layers; ++n) {
        std::vector<int32_t> ids;
        for (int32_t i = 0; i < n; ++i) ids.push_back(i);
        auto a = with_layer_ids(c, ids);
        ASSERT_TRUE(a.ok()) << a.status().to_string();
        EXPECT_EQ(config_to_json(*a), config_to_json(*with_layers(c, n))) << n;
      }
    }
  const Config c = v41_flash_config();
  std::vector<int32_t> ids = {0, 1, 2, 3, 20, 21, 22, 23, 24, 25};
  EXPECT_EQ(config_to_json(*with_layer_ids(c, ids)), config_to_json(*with_decoder_layers(c, 4, 6)));
}

TEST(WithLayerIds, EveryClosedSingleLayerCuts) {
  for (Variant v : {Variant::v41, Variant::v4})
    for (Preset pr : {Preset::tiny, Preset::full}) {
      const Config c = preset_config(pr, v);
      const ModelPlan p = build_plan(c);
      for (int32_t l = 0; l < c.num_hidden_layers; ++l) expect_cut(c, *close_layer_ids(p, {l}));
    }
}

TEST(WithLayerIds, Refusals) {
  const Config c = v41_flash_config();
  auto open = with_layer_ids(c, {23});
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(open.status().message().find("layer 23 reads its compressed KV rows from layer 20"), std::string::npos)
      << open.status().message();
  auto engram = with_layer_ids(c, {14});
  EXPECT_NE(engram.status().message().find("Engram primes from layer 1"), std::string::npos)
      << engram.status().message();
  auto cand = with_layer_ids(c, {2, 24});
  EXPECT_NE(cand.status().message().find("layer 24"), std::string::npos) << cand.status().message();
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{}, {3, 2}, {2, 2}, {40}, {-1}})
    EXPECT_EQ(with_layer_ids(c, bad).status().code(), StatusCode::invalid_argument) << fmt::format("{}", fmt::join(bad, ","));
}

}  // namespace
}  // namespace dsv4::family
