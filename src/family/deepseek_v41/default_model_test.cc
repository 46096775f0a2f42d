// The default model: created once under $XDG_CACHE_HOME/dsv4, reused afterwards.
#include "family/deepseek_v41/default_model.h"

#include <gtest/gtest.h>

#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::family {
namespace {

namespace fs = std::filesystem;

TEST(DefaultModel, CreatedOnceThenReused) {
  const fs::path cache = fs::temp_directory_path() / fmt::format("dsv4_family_cache_{}", ::getpid());
  fs::remove_all(cache);
  ASSERT_EQ(::setenv("XDG_CACHE_HOME", cache.c_str(), 1), 0);
  int shards = 0;
  auto dir = ensure_default_model([&](const SynthProgress&) { ++shards; });
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(fs::path(*dir).parent_path(), cache / "dsv4");
  EXPECT_GT(shards, 0);
  auto m = open_model(*dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(config_to_json((*m)->config), config_to_json(preset_config(Preset::tiny, Variant::v41)));
  // Nothing but the final directory is left in the cache.
  int entries = 0;
  for (auto it = fs::directory_iterator(cache / "dsv4"); it != fs::directory_iterator(); ++it) ++entries;
  EXPECT_EQ(entries, 1);
  // A second call returns the same directory without writing (a marker file survives).
  std::ofstream(fs::path(*dir) / "marker") << "x";
  shards = 0;
  auto again = ensure_default_model([&](const SynthProgress&) { ++shards; });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *dir);
  EXPECT_EQ(shards, 0);
  EXPECT_TRUE(fs::exists(fs::path(*dir) / "marker"));
  ::unsetenv("XDG_CACHE_HOME");
  fs::remove_all(cache);
}

}  // namespace
}  // namespace dsv4::family
