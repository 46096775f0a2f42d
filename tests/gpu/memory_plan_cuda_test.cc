// The memory plan's device numbers against the CUDA backend's own: per-stream caches (cuda::StreamCaches) and
// scratch (attention_scratch_bytes, dspark_scratch_bytes), on every preset. Host arithmetic only: no kernel runs.
#include <gtest/gtest.h>

#include "family/deepseek_v41/layer_plan.h"
#include "backends/cuda/forward/attention.h"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/forward/dspark_device.h"
#include "engine/scratch_estimate.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/state_geometry.h"

namespace dsv4::cuda {
namespace {

using family::Preset;
using family::Variant;

TEST(StateGeometryCuda, PoolBytesEqualTheFamilyLayout) {
  for (Preset p : {Preset::tiny, Preset::small, Preset::full}) {
    for (Variant v : {Variant::v41, Variant::v4}) {
      for (int64_t context : {int64_t{4096}, int64_t{100001}, int64_t{1} << 20}) {
        for (int64_t rollback : {0, 128}) {
          const family::Config c = family::preset_config(p, v);
          SCOPED_TRACE(std::string(family::preset_name(p)) + " " + std::string(family::variant_name(v)) + " context " +
                       std::to_string(context) + " rollback " + std::to_string(rollback));
          auto g = device_state_geometry(family::build_plan(c), context, rollback);
          ASSERT_TRUE(g.ok()) << g.status().to_string();
          EXPECT_EQ(g->ring_capacity, family::build_plan(c).window + rollback);
          // What one stream at max_context takes from the KV pool equals the family layout's count (the memory
          // plan's source): its slab and its pages.
          auto layout = family::page_layout(*g);
          ASSERT_TRUE(layout.ok()) << layout.status().to_string();
          auto pool = KvPool::create({layout->slab_bytes, layout->page_bytes});
          ASSERT_TRUE(pool.ok()) << pool.status().to_string();
          {
            auto s = StreamCaches::create(*g, *layout, pool->get());
            ASSERT_TRUE(s.ok()) << s.status().to_string();
            ASSERT_TRUE((*s)->reserve(context, nullptr).ok());
            EXPECT_EQ((*pool)->slabs_in_use() * layout->slab_bytes + (*pool)->pages_in_use() * layout->page_bytes,
                      layout->stream_bytes(context));
            EXPECT_EQ((*s)->pages_held(), layout->pages_for(context));
          }
          EXPECT_EQ((*pool)->slabs_in_use(), 0);  // given back
          EXPECT_EQ((*pool)->pages_in_use(), 0);
        }
      }
    }
  }
}

// A tensor-parallel rank's config holds heads / tp and o_groups / tp (fabric/rank_weights.h); the engine's
// estimate takes the whole config and tp. (forward.cc's forward_scratch_bytes is file-local; the engine's
// forward term was compared with it by hand in src/engine/memory_plan_test.cc.)
TEST(MemoryPlanCuda, ScratchEqualsTheForwardsSizing) {
  for (Preset p : {Preset::tiny, Preset::small, Preset::full}) {
    for (Variant v : {Variant::v41, Variant::v4}) {
      for (int32_t tp : {1, 2, 4, 8}) {
        for (int64_t rows : {int64_t{1}, int64_t{64}, int64_t{65}, int64_t{4096}}) {
          for (int64_t context : {int64_t{4096}, int64_t{100001}, int64_t{1} << 20}) {
            const family::Config c = family::preset_config(p, v);
            if (c.num_attention_heads % tp != 0 || c.o_groups % tp != 0) continue;
            SCOPED_TRACE(std::string(family::preset_name(p)) + " " + std::string(family::variant_name(v)) + " tp " +
                         std::to_string(tp) + " rows " + std::to_string(rows) + " context " + std::to_string(context));
            family::ModelPlan m = family::build_plan(c);
            m.n_heads /= tp;
            m.o_groups /= tp;
            const engine::ScratchEstimate e = engine::estimate_scratch(c, tp, rows, context, false);
            EXPECT_EQ(e.attention, attention_scratch_bytes(m, rows, context));
            EXPECT_EQ(e.drafter, dspark_scratch_bytes(m));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda
