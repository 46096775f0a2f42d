// with_layers: cut configs validate, keep every kept layer's tensors as the uncut table has them, and
// place the roles by the stated rules.
#include "family/deepseek_v41/with_layers.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {
namespace {

// The backbone layer of a "layers.N." tensor name, else -1.
int32_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoi(name.substr(7));
}

// Checks cut = with_layers(full, n) against the uncut table: the kept layers' tensors, the head, the
// embedding, vision and every DSpark stage's tensors are the uncut ones (name, dtype, shape), except
// main_proj when the stages tap fewer layers; nothing of a layer >= n remains.
void expect_prefix_of(const Config& full, const TensorTable& full_table, int32_t n) {
  SCOPED_TRACE(fmt::format("{} layers of {} ({})", n, full.num_hidden_layers, variant_name(full.variant)));
  auto cut = with_layers(full, n);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  const int32_t kept = std::min(n, full.num_hidden_layers);
  EXPECT_EQ(cut->num_hidden_layers, kept);
  EXPECT_TRUE(validate_config(*cut).ok());
  auto back = parse_config(config_to_json(*cut));  // what a checkpoint's config.json reads back as
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(config_to_json(*back), config_to_json(*cut));
  EXPECT_EQ(cut->num_dspark_stages(), full.num_dspark_stages());
  const TensorTable t = expected_tensors(*cut);
  std::set<int32_t> layers_seen;
  size_t expected_count = 0;
  for (const TensorSpec& s : full_table.tensors)
    if (layer_of(s.name) < kept) ++expected_count;
  EXPECT_EQ(t.tensors.size(), expected_count);
  const bool narrower = cut->dspark_target_layer_ids.size() != full.dspark_target_layer_ids.size();
  for (const TensorSpec& s : t.tensors) {
    const int32_t l = layer_of(s.name);
    EXPECT_LT(l, kept) << s.name;
    if (l >= 0) layers_seen.insert(l);
    const TensorSpec* u = full_table.find(s.name);
    ASSERT_NE(u, nullptr) << s.name << " is not in the uncut table";
    EXPECT_EQ(s.dtype, u->dtype) << s.name;
    const int64_t D = full.hidden_size, b = full.quant.weight_block_in, taps = kept;  // narrower: n < k taps
    if (narrower && s.name == "mtp.0.main_proj.weight")
      EXPECT_EQ(s.shape, (std::vector<int64_t>{D, taps * D}));
    else if (narrower && s.name == "mtp.0.main_proj.scale")
      EXPECT_EQ(s.shape, (std::vector<int64_t>{(D + b - 1) / b, (taps * D + b - 1) / b}));
    else
      EXPECT_EQ(s.shape, u->shape) << s.name;
  }
  EXPECT_EQ(static_cast<int32_t>(layers_seen.size()), kept);
}

TEST(WithLayers, EveryCutOfTheSmallPresetsValidates) {
  for (Variant v : {Variant::v41, Variant::v4})
    for (Preset p : {Preset::tiny, Preset::small}) {
      const Config c = preset_config(p, v);
      const TensorTable t = expected_tensors(c);
      for (int32_t n = 1; n <= c.num_hidden_layers + 1; ++n) expect_prefix_of(c, t, n);
    }
}

TEST(WithLayers, FullCutsValidate) {
  for (Variant v : {Variant::v41, Variant::v4}) {
    const Config c = preset_config(Preset::full, v);
    const TensorTable t = expected_tensors(c);
    for (int32_t n : {1, 2, 3, 15, 20, 21, 37, 38, c.num_hidden_layers - 1}) expect_prefix_of(c, t, n);
  }
}

TEST(WithLayers, V41FullRoleRules) {
  const Config c = v41_flash_config();
  // Below the candidate source (20): no candidates, no re-indexing layers; DSpark taps the top three.
  auto a = with_layers(c, 20);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kv_source_layer_ids, (std::vector<int32_t>{2, 8, 14}));
  EXPECT_EQ(a->index_source_layer_ids, (std::vector<int32_t>{2, 8, 14}));
  EXPECT_EQ(a->candidate_source_layer_id, -1);
  EXPECT_EQ(a->engram_layer_ids, (std::vector<int32_t>{1, 14}));
  EXPECT_EQ(a->engram_num_embeddings, c.engram_num_embeddings);
  EXPECT_EQ(a->dspark_target_layer_ids, (std::vector<int32_t>{17, 18, 19}));
  EXPECT_EQ(a->compress_ratios.size(), 23u);
  EXPECT_EQ(a->compress_ratios[19], 2);
  EXPECT_EQ(a->compress_ratios[20], 0);  // DSpark stage 0
  // 25 layers: the candidate source and the first re-indexing layer (24) stay.
  auto b = with_layers(c, 25);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->candidate_source_layer_id, 20);
  EXPECT_EQ(b->index_source_layer_ids, (std::vector<int32_t>{2, 8, 14, 20, 24}));
  EXPECT_EQ(b->dspark_target_layer_ids, (std::vector<int32_t>{22, 23, 24}));
  // 14 layers: Engram layer 14 and its table go, layer 1's keeps its rows.
  auto e = with_layers(c, 14);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->engram_layer_ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(e->engram_num_embeddings, (std::vector<int64_t>{384006168}));
  // The minimum: one window-only layer, no Engram, one tap (main_proj [D, D]).
  auto one = with_layers(c, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->has_engram());
  EXPECT_TRUE(one->engram_num_embeddings.empty());
  EXPECT_TRUE(one->kv_source_layer_ids.empty());
  EXPECT_EQ(one->dspark_target_layer_ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(expected_tensors(*one).find("mtp.0.main_proj.weight")->shape, (std::vector<int64_t>{5120, 5120}));
  // Taps that all lie below n stay where they are.
  Config low = c;
  low.dspark_target_layer_ids = {3, 4, 5};
  EXPECT_EQ(with_layers(low, 10)->dspark_target_layer_ids, (std::vector<int32_t>{3, 4, 5}));
}

TEST(WithLayers, V4FullRoleRules) {
  const Config c = v4_flash_0731_config();
  auto two = with_layers(c, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->num_hash_layers, 2);
  EXPECT_EQ(two->compress_ratios, (std::vector<int32_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(two->dspark_target_layer_ids, (std::vector<int32_t>{0, 1}));
  auto ten = with_layers(c, 10);
  ASSERT_TRUE(ten.ok());
  EXPECT_EQ(ten->num_hash_layers, 3);
  EXPECT_EQ(ten->dspark_target_layer_ids, (std::vector<int32_t>{7, 8, 9}));
}

TEST(WithLayers, AtOrAboveTheDepthIsNoChange) {
  for (Variant v : {Variant::v41, Variant::v4}) {
    const Config c = preset_config(Preset::full, v);
    for (int32_t n : {c.num_hidden_layers, c.num_hidden_layers + 1, INT32_MAX}) {
      auto r = with_layers(c, n);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(config_to_json(*r), config_to_json(c));
    }
  }
}

TEST(WithLayers, RefusesFewerThanOneLayer) {
  for (int32_t n : {0, -1, INT32_MIN}) {
    auto r = with_layers(preset_config(Preset::tiny, Variant::v41), n);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find("at least 1"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace dsv4::family

namespace dsv4::family {
namespace {

// The first 4 layers of V4.1 then 6 of its decoder (20-25, model-spec.md §2.3): the candidate source becomes
// layer 4, layer 24's re-indexing becomes 8; every kept layer's tensors are the uncut layer's, renumbered.
TEST(WithDecoderLayers, V41FullKeepsTheDecoderRoles) {
  const Config c = v41_flash_config();
  auto r = with_decoder_layers(c, 4, 6);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_hidden_layers, 10);
  EXPECT_EQ(r->compress_ratios, (std::vector<int32_t>{0, 0, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(r->kv_source_layer_ids, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(r->index_source_layer_ids, (std::vector<int32_t>{2, 4, 8}));
  EXPECT_EQ(r->candidate_source_layer_id, 4);
  EXPECT_EQ(r->engram_layer_ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(r->dspark_target_layer_ids, (std::vector<int32_t>{7, 8, 9}));
  const ModelPlan p = build_plan(*r);
  EXPECT_EQ(p.layers[4].attn, AttnKind::full);
  EXPECT_TRUE(p.layers[4].candidate_source);
  EXPECT_EQ(p.layers[8].attn, AttnKind::reindex);
  EXPECT_EQ(p.layers[9].kv_from, 4);
  EXPECT_EQ(p.layers[9].topk_from, 8);
  const TensorTable full = expected_tensors(c), cut = expected_tensors(*r);
  for (int32_t k = 0; k < 6; ++k) {
    const std::string from = fmt::format("layers.{}.", 20 + k), to = fmt::format("layers.{}.", 4 + k);
    size_t n = 0;
    for (const TensorSpec& s : full.tensors) {
      if (s.name.rfind(from, 0) != 0) continue;
      const TensorSpec* t = cut.find(to + s.name.substr(from.size()));
      ASSERT_NE(t, nullptr) << s.name;
      EXPECT_EQ(t->dtype, s.dtype) << s.name;
      EXPECT_EQ(t->shape, s.shape) << s.name;
      ++n;
    }
    EXPECT_GT(n, 0u);
  }
}

TEST(WithDecoderLayers, Refusals) {
  const Config c = v41_flash_config();
  for (auto [n, m] : {std::pair{0, 2}, std::pair{21, 2}, std::pair{4, 0}, std::pair{4, 21}})
    EXPECT_EQ(with_decoder_layers(c, n, m).status().code(), StatusCode::invalid_argument) << n << " " << m;
  EXPECT_TRUE(with_decoder_layers(c, 20, 20).ok());  // the whole model
  EXPECT_EQ(with_decoder_layers(v4_flash_0731_config(), 4, 2).status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace dsv4::family
