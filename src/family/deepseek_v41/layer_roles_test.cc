// layer_roles: the released plans' roles and representatives; every role of every preset is listed once.
#include "family/deepseek_v41/layer_roles.h"

#include <gtest/gtest.h>

#include <set>

#include "family/deepseek_v41/layer_sources.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4::family {
namespace {

std::vector<std::pair<std::string, int32_t>> pairs(const std::vector<RoleLayer>& r) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const RoleLayer& x : r) out.emplace_back(x.role, x.layer);
  return out;
}

TEST(LayerRoles, V41Full) {
  const ModelPlan p = build_plan(v41_flash_config());
  EXPECT_EQ(pairs(plan_roles(p)), (std::vector<std::pair<std::string, int32_t>>{{"window", 0},
                                                                                 {"window+engram", 1},
                                                                                 {"full-r2", 2},
                                                                                 {"reuse-r2", 3},
                                                                                 {"full-r2+engram", 14},
                                                                                 {"full-r1+cand-src", 20},
                                                                                 {"reuse-r1", 21},
                                                                                 {"reindex-r1+cand", 24},
                                                                                 {"dspark", 40}}));
}

TEST(LayerRoles, V4Full) {
  const ModelPlan p = build_plan(v4_flash_0731_config());
  EXPECT_EQ(pairs(plan_roles(p)), (std::vector<std::pair<std::string, int32_t>>{{"window+hash", 0},
                                                                                 {"csa-r4+hash", 2},
                                                                                 {"hca-r128", 3},
                                                                                 {"csa-r4", 4},
                                                                                 {"dspark", 43}}));
}

// Every layer's role is listed, each once, with its first layer; the closed backbone representatives cut.
TEST(LayerRoles, EveryPresetEveryLayer) {
  for (Variant v : {Variant::v41, Variant::v4})
    for (Preset pr : {Preset::tiny, Preset::small, Preset::full}) {
      const Config c = preset_config(pr, v);
      const ModelPlan p = build_plan(c);
      const std::vector<RoleLayer> roles = plan_roles(p);
      std::set<std::string> names;
      std::vector<int32_t> backbone;
      for (const RoleLayer& r : roles) {
        EXPECT_TRUE(names.insert(r.role).second) << r.role;
        EXPECT_EQ(layer_role(p.layer(r.layer)), r.role);
        if (r.layer < p.n_layers) backbone.push_back(r.layer);
      }
      for (const LayerPlan& l : p.layers) {
        auto it = std::find_if(roles.begin(), roles.end(), [&](const RoleLayer& r) { return r.role == layer_role(l); });
        ASSERT_NE(it, roles.end()) << l.id;
        EXPECT_LE(it->layer, l.id);
      }
      auto closed = close_layer_ids(p, backbone);
      ASSERT_TRUE(closed.ok());
      auto cut = with_layer_ids(c, *closed);
      EXPECT_TRUE(cut.ok()) << cut.status().to_string();
    }
}

}  // namespace
}  // namespace dsv4::family
