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
  EXPECT_TRUE(ck->advise(*t, MapAdvice::willneed).ok());
  EXPECT_TRUE(ck->advise(*t, MapAdvice::dontneed).ok());
  EXPECT_EQ(t->view.bytes()[0], pattern_bytes(1, 3)[0]);  // pages come back from the file
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

// Opens `dir` and expects an error whose message holds every needle.
void expect_refused(const std::string& dir, const std::vector<std::string>& needles,
                    const CheckpointOptions& options = {}) {
  auto ck = Checkpoint::open(dir, options);
  ASSERT_FALSE(ck.ok()) << "accepted";
  for (const auto& n : needles) {
    EXPECT_NE(ck.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << ck.status().message();
  }
}

const char* kShard1 = "model-00001-of-00003.safetensors";
const char* kShard2 = "model-00002-of-00003.safetensors";
const char* kShard3 = "model-00003-of-00003.safetensors";

// An index naming the five tensors of write_three_shards, with `extra` spliced into weight_map.
std::string index_text(const std::string& extra = "", const std::string& metadata = R"({"total_size":2214})") {
  return R"({"metadata":)" + metadata + R"(,"weight_map":{)" + extra +
         R"("embed.weight":"model-00001-of-00003.safetensors","norm.weight":"model-00001-of-00003.safetensors",)"
         R"("layers.0.w.weight":"model-00002-of-00003.safetensors","layers.0.w.scale":"model-00002-of-00003.safetensors",)"
         R"("layers.0.e.weight":"model-00003-of-00003.safetensors"}})";
}

TEST(CheckpointMalformed, HandWrittenIndexIsAccepted) {
  ScratchDir dir;
  write_three_shards(dir.path());
  testing::write_text(dir.file("model.safetensors.index.json"), index_text());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->tensor_count(), 5);
}

TEST(CheckpointMalformed, MissingShardFile) {
  ScratchDir dir;
  write_three_shards(dir.path());
  std::filesystem::remove(dir.file(kShard2));
  expect_refused(dir.path(), {"model.safetensors.index.json", "shard 'model-00002-of-00003.safetensors'",
                              "'layers.0.w.scale'", "missing"});
}

TEST(CheckpointMalformed, TensorInIndexAbsentFromItsShard) {
  ScratchDir dir;
  write_three_shards(dir.path());
  testing::write_text(dir.file("model.safetensors.index.json"),
                      index_text(R"("layers.9.ghost":"model-00003-of-00003.safetensors",)"));
  expect_refused(dir.path(), {kShard3, "tensor 'layers.9.ghost'", "named by model.safetensors.index.json but absent"});
}

TEST(CheckpointMalformed, TensorInShardButNotInIndex) {
  ScratchDir dir;
  write_three_shards(dir.path());
  std::string idx = index_text();
  idx.replace(idx.find(R"("norm.weight":"model-00001-of-00003.safetensors",)"),
              std::string(R"("norm.weight":"model-00001-of-00003.safetensors",)").size(), "");
  testing::write_text(dir.file("model.safetensors.index.json"), idx);
  expect_refused(dir.path(), {kShard1, "tensor 'norm.weight'", "present in the shard but", "does not name it"});
  // Accepted and reported when asked for.
  CheckpointOptions lenient;
  lenient.allow_unindexed = true;
  auto ck = Checkpoint::open(dir.path(), lenient);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->unindexed(), std::vector<std::string>{"norm.weight"});
  EXPECT_TRUE(ck->contains("norm.weight"));
}

TEST(CheckpointMalformed, TensorPlacedInTheWrongShard) {
  ScratchDir dir;
  write_three_shards(dir.path());
  std::string idx = index_text();
  idx.replace(idx.find(R"("layers.0.e.weight":"model-00003)"), std::string(R"("layers.0.e.weight":"model-00003)").size(),
              R"("layers.0.e.weight":"model-00001)");
  testing::write_text(dir.file("model.safetensors.index.json"), idx);
  expect_refused(dir.path(), {"tensor 'layers.0.e.weight'"});
}

TEST(CheckpointMalformed, IndexJsonMalformed) {
  ScratchDir dir;
  write_three_shards(dir.path());
  const std::string idx = dir.file("model.safetensors.index.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"weight_map":{"a":)", "bad JSON"},
      {R"([1,2])", "not a JSON object"},
      {R"({"metadata":{}})", "missing 'weight_map'"},
      {R"({"weight_map":[]})", "'weight_map' is not an object"},
      {R"({"weight_map":{"embed.weight":7}})", "tensor 'embed.weight': weight_map value 7 is not a file name"},
      {R"({"weight_map":{"embed.weight":"../model-00001-of-00003.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map":{"embed.weight":"a.safetensors","embed.weight":"b.safetensors"}})",
       "duplicate key 'embed.weight' inside 'weight_map'"},
      {R"({"metadata":{"total_size":"big"},"weight_map":{}})", "metadata.total_size \"big\" is not a byte count"},
      {R"({"metadata":[],"weight_map":{}})", "'metadata' is not an object"},
  };
  for (const auto& [text, needle] : cases) {
    testing::write_text(idx, text);
    expect_refused(dir.path(), {idx, needle});
  }
}

TEST(CheckpointMalformed, CorruptShardNamesTheShard) {
  ScratchDir dir;
  write_three_shards(dir.path());
  auto bytes = testing::read_bytes(dir.file(kShard2));
  bytes.resize(bytes.size() - 1);  // cut the last payload byte
  testing::write_bytes(dir.file(kShard2), bytes);
  expect_refused(dir.path(), {dir.file(kShard2), "tensor 'layers.0.w.scale'", "run past the data section"});
}

TEST(CheckpointMalformed, DuplicateTensorAcrossUnindexedFiles) {
  ScratchDir dir;
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("x", DType::u8, {1}, {1}).ok());
  ASSERT_TRUE(w.write(dir.file("a.safetensors"), fast()).ok());
  ASSERT_TRUE(w.write(dir.file("b.safetensors"), fast()).ok());
  expect_refused(dir.path(), {dir.file("b.safetensors"), "tensor 'x'", "also present in", dir.file("a.safetensors")});
}

TEST(Checkpoint, ExtraFilesAndTotalSizeMismatchAreNoted) {
  ScratchDir dir;
  write_three_shards(dir.path());
  SafetensorsWriter v;
  ASSERT_TRUE(v.add("vision.patch", DType::bf16, {2}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(v.write(dir.file("vision_tower.safetensors"), fast()).ok());
  testing::write_text(dir.file("model.safetensors.index.json"), index_text("", R"({"total_size":2215,"format":"pt"})"));
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->tensor_count(), 6);
  EXPECT_EQ(ck->total_bytes(), 2218);
  ASSERT_EQ(ck->notes().size(), 2u);
  EXPECT_NE(ck->notes()[0].find("vision_tower.safetensors: not named by"), std::string::npos) << ck->notes()[0];
  EXPECT_NE(ck->notes()[1].find("total_size 2215 differs from the shards' payload of 2214"), std::string::npos)
      << ck->notes()[1];
}

TEST(ShardedWriter, RefusesBadShardsBeforeWriting) {
  ScratchDir dir;
  ShardedSafetensorsWriter sw(dir.path(), fast());
  SafetensorsWriter a;
  ASSERT_TRUE(a.add("t", DType::u8, {1}, {1}).ok());
  EXPECT_FALSE(sw.write_shard("sub/x.safetensors", a).ok());
  EXPECT_FALSE(sw.write_shard("x.bin", a).ok());
  ASSERT_TRUE(sw.write_shard("x.safetensors", a).ok());
  EXPECT_FALSE(sw.write_shard("x.safetensors", SafetensorsWriter()).ok());
  Status again = sw.write_shard("y.safetensors", a);
  EXPECT_NE(again.message().find("y.safetensors: tensor 't': already written to x.safetensors"), std::string::npos)
      << again.message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("y.safetensors")));
}

}  // namespace
}  // namespace dsv4
