// layer_sources: each layer's cross-layer reads in the released plans, and the closure a cut needs.
#include "family/deepseek_v41/layer_sources.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

std::vector<int32_t> source_layers(const ModelPlan& p, int32_t id) {
  std::vector<int32_t> out;
  for (const LayerSource& s : layer_sources(p, id)) out.push_back(s.layer);
  return out;
}

TEST(LayerSources, V41Full) {
  const ModelPlan p = build_plan(v41_flash_config());
  EXPECT_TRUE(source_layers(p, 0).empty());  // window only
  EXPECT_TRUE(source_layers(p, 1).empty());  // the first Engram layer
  EXPECT_TRUE(source_layers(p, 2).empty());  // owns its rows, keys and top-k
  EXPECT_EQ(source_layers(p, 3), (std::vector<int32_t>{2}));
  EXPECT_EQ(source_layers(p, 14), (std::vector<int32_t>{1}));  // Engram primes continue after layer 1's
  EXPECT_EQ(layer_sources(p, 14)[0].what, "Engram primes");
  EXPECT_EQ(source_layers(p, 23), (std::vector<int32_t>{20}));
  EXPECT_EQ(layer_sources(p, 23)[0].what, "compressed KV rows");
  EXPECT_EQ(source_layers(p, 24), (std::vector<int32_t>{20}));  // KV rows, index keys and candidates of 20
  EXPECT_EQ(source_layers(p, 25), (std::vector<int32_t>{20, 24}));
  EXPECT_EQ(source_layers(p, 39), (std::vector<int32_t>{20, 36}));
  EXPECT_EQ(source_layers(p, 36), (std::vector<int32_t>{20}));
  EXPECT_EQ(source_layers(p, 35), (std::vector<int32_t>{20, 32}));
}

TEST(LayerSources, V4HasNone) {
  const ModelPlan p = build_plan(v4_flash_0731_config());
  for (int32_t l = 0; l < p.n_layers; ++l) EXPECT_TRUE(layer_sources(p, l).empty()) << l;
}

TEST(LayerSources, Closure) {
  const ModelPlan p = build_plan(v41_flash_config());
  EXPECT_EQ(*close_layer_ids(p, {23}), (std::vector<int32_t>{20, 23}));
  EXPECT_EQ(*close_layer_ids(p, {25, 3, 25}), (std::vector<int32_t>{2, 3, 20, 24, 25}));
  EXPECT_EQ(*close_layer_ids(p, {14}), (std::vector<int32_t>{1, 14}));
  EXPECT_EQ(*close_layer_ids(p, {0}), (std::vector<int32_t>{0}));
  EXPECT_EQ(close_layer_ids(p, {40}).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(close_layer_ids(p, {-1}).status().code(), StatusCode::invalid_argument);
  const ModelPlan v4 = build_plan(v4_flash_0731_config());
  EXPECT_EQ(*close_layer_ids(v4, {10, 2}), (std::vector<int32_t>{2, 10}));
  // Every single layer's closure is closed, and contains the layer.
  for (const ModelPlan* q : {&p, &v4})
    for (int32_t l = 0; l < q->n_layers; ++l) {
      auto c = close_layer_ids(*q, {l});
      ASSERT_TRUE(c.ok());
      EXPECT_TRUE(std::count(c->begin(), c->end(), l));
      EXPECT_TRUE(check_layer_ids_closed(*q, *c).ok()) << l;
    }
}

TEST(LayerSources, CheckNamesTheLayerAndTheDroppedSource) {
  const ModelPlan p = build_plan(v41_flash_config());
  const Status s = check_layer_ids_closed(p, {23});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("layer 23 reads its compressed KV rows from layer 20"), std::string::npos) << s.message();
  const Status t = check_layer_ids_closed(p, {20, 25});
  EXPECT_NE(t.message().find("layer 25 reads its top-k from layer 24"), std::string::npos) << t.message();
  EXPECT_TRUE(check_layer_ids_closed(p, {20, 24, 25}).ok());
}

}  // namespace
}  // namespace dsv4::family
