// Checkpoint: sharded writer -> index -> reader, directory forms, and every sharded-set error.
#include "core/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/safetensors_testing.h"
#include "core/safetensors_writer.h"

namespace dsv4 {
namespace {

using testing::pattern_bytes;
using testing::ScratchDir;

SafetensorsWriteOptions fast() {
  SafetensorsWriteOptions o;
  o.sync = false;
  return o;
}

// Three shards in the release's naming: 2 + 2 + 1 tensors.
void write_three_shards(const std::string& dir) {
  ShardedSafetensorsWriter sw(dir, fast());
  SafetensorsWriter a, b, c;
  ASSERT_TRUE(a.add("embed.weight", DType::bf16, {4, 3}, pattern_bytes(24, 1)).ok());
  ASSERT_TRUE(a.add("norm.weight", DType::f32, {3}, pattern_bytes(12, 2)).ok());
  ASSERT_TRUE(b.add("layers.0.w.weight", DType::f8_e4m3, {64, 32}, pattern_bytes(2048, 3)).ok());
  ASSERT_TRUE(b.add("layers.0.w.scale", DType::f8_e8m0, {2, 1}, pattern_bytes(2, 4)).ok());
  ASSERT_TRUE(c.add_generated("layers.0.e.weight", DType::i8, {8, 16}, [](int64_t off, std::span<uint8_t> out) {
                 for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(off + static_cast<int64_t>(i));
                 return ok_status();
               }).ok());
  ASSERT_TRUE(sw.write_shard(shard_file_name(1, 3), a).ok());
  ASSERT_TRUE(sw.write_shard(shard_file_name(2, 3), b).ok());
  ASSERT_TRUE(sw.write_shard(shard_file_name(3, 3), c).ok());
  // 24 + 12 + 2048 + 2 + 128 = 2214 payload bytes.
  EXPECT_EQ(sw.total_size(), 2214);
  ASSERT_TRUE(sw.finish().ok());
}

TEST(Checkpoint, ShardedRoundTripWithIndex) {
  ScratchDir dir;
  write_three_shards(dir.path());
  EXPECT_EQ(shard_file_name(3, 48), "model-00003-of-00048.safetensors");
  // The index in Hugging Face's layout, checked as text: keys sorted, total_size the payload sum.
  const std::string expected_index =
      "{\n"
      "  \"metadata\": {\n"
      "    \"total_size\": 2214\n"
      "  },\n"
      "  \"weight_map\": {\n"
      "    \"embed.weight\": \"model-00001-of-00003.safetensors\",\n"
      "    \"layers.0.e.weight\": \"model-00003-of-00003.safetensors\",\n"
      "    \"layers.0.w.scale\": \"model-00002-of-00003.safetensors\",\n"
      "    \"layers.0.w.weight\": \"model-00002-of-00003.safetensors\",\n"
      "    \"norm.weight\": \"model-00001-of-00003.safetensors\"\n"
      "  }\n"
      "}\n";
  auto idx = testing::read_bytes(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(std::string(idx.begin(), idx.end()), expected_index);

  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_TRUE(ck->has_index());
  EXPECT_EQ(ck->files().size(), 3u);
  EXPECT_EQ(ck->tensor_count(), 5);
  EXPECT_EQ(ck->index_total_size(), 2214);
  EXPECT_EQ(ck->total_bytes(), 2214);
  EXPECT_TRUE(ck->notes().empty());
  auto by = ck->bytes_by_dtype();
  EXPECT_EQ(by[DType::bf16], 24);
  EXPECT_EQ(by[DType::f32], 12);
  EXPECT_EQ(by[DType::f8_e4m3], 2048);
  EXPECT_EQ(by[DType::f8_e8m0], 2);
  EXPECT_EQ(by[DType::i8], 128);
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"embed.weight", "layers.0.e.weight", "layers.0.w.scale",
                                                   "layers.0.w.weight", "norm.weight"}));
  auto t = ck->find("layers.0.w.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(std::filesystem::path(t->file->path()).filename(), "model-00002-of-00003.safetensors");
  EXPECT_EQ(t->view.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(std::vector<uint8_t>(t->view.bytes(), t->view.bytes() + 2048), pattern_bytes(2048, 3));
  auto e = ck->tensor("layers.0.e.weight");
  ASSERT_TRUE(e.ok());
  for (int i = 0; i < 128; ++i) ASSERT_EQ(e->bytes()[i], i);
  auto absent = ck->tensor("nope");
  EXPECT_EQ(absent.status().code(), StatusCode::not_found);
  EXPECT_NE(absent.status().message().find("'nope'"), std::string::npos);
}

TEST(Checkpoint, SingleFileAndDirectoryWithoutIndex) {
  ScratchDir dir;
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("x", DType::f16, {2}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(w.write(dir.file("model.safetensors"), fast()).ok());
  auto by_dir = Checkpoint::open(dir.path());
  ASSERT_TRUE(by_dir.ok()) << by_dir.status().to_string();
  EXPECT_FALSE(by_dir->has_index());
  EXPECT_EQ(by_dir->tensor_count(), 1);
  auto by_file = Checkpoint::open(dir.file("model.safetensors"));
  ASSERT_TRUE(by_file.ok());
  EXPECT_EQ(by_file->tensor("x")->nbytes, 4);

  // Several files, no index: all *.safetensors are read; a temporary file is not.
  SafetensorsWriter w2;
  ASSERT_TRUE(w2.add("y", DType::u8, {1}, {7}).ok());
  ASSERT_TRUE(w2.write(dir.file("extra.safetensors"), fast()).ok());
  testing::write_text(dir.file("model.safetensors.partial-1"), "junk");
  auto both = Checkpoint::open(dir.path());
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  EXPECT_EQ(both->tensor_count(), 2);
}

TEST(Checkpoint, EmptyOrMissingPath) {
  ScratchDir dir;
  auto empty = Checkpoint::open(dir.path());
  EXPECT_EQ(empty.status().code(), StatusCode::not_found);
  EXPECT_NE(empty.status().message().find(dir.path()), std::string::npos);
  auto missing = Checkpoint::open(dir.file("none"));
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
}

}  // namespace
}  // namespace dsv4
