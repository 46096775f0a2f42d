// Safetensors writer -> reader round trips, the exact byte layout, streaming writes, F4/U8, EXL3 files.
#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "core/safetensors_testing.h"
#include "core/safetensors_writer.h"

namespace dsv4 {
namespace {

using testing::pattern_bytes;
using testing::raw_safetensors;
using testing::ScratchDir;

SafetensorsWriteOptions no_sync(int64_t align = 8) {
  SafetensorsWriteOptions o;
  o.sync = false;
  o.header_alignment = align;
  return o;
}

// The layout written for one F32 [2] tensor, assembled by hand from the format definition
// (formats.md §4): u64 LE length, JSON, spaces up to a multiple of 8, then the payload.
TEST(SafetensorsWriter, ByteLayoutMatchesTheFormat) {
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("a", DType::f32, {2}, {1, 2, 3, 4, 5, 6, 7, 8}).ok());
  auto bytes = w.serialize(no_sync());
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  // 5 + 15 + 12 + 20 + 2 = 54 characters: {"a": {"dtype":"F32", "shape":[2], "data_offsets":[0,8] }}
  std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 54u);
  json += std::string(2, ' ');  // 8 + 56 = 64, a multiple of 8
  auto expected = raw_safetensors(json, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(*bytes, expected);

  // Without padding the data section starts right after the JSON, at 8 + 54 = 62.
  auto unpadded = w.serialize(no_sync(1));
  ASSERT_TRUE(unpadded.ok());
  EXPECT_EQ(*unpadded, raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                       {1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(SafetensorsWriter, MetadataComesFirstAndRoundTrips) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  ASSERT_TRUE(w.add("x", DType::u8, {1}, {9}).ok());
  EXPECT_EQ(w.header(no_sync(1)),
            R"({"__metadata__":{"format":"pt"},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})");
  ScratchDir dir;
  ASSERT_TRUE(w.write(dir.file("m.safetensors")).ok());  // default options: fsync + rename
  auto f = SafetensorsFile::open(dir.file("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

struct Case {
  DType dtype;
  std::vector<int64_t> shape;
  int64_t elem_bytes;  // from the safetensors dtype table, not from dtype_size()
};

// Every dtype, a scalar, zero-size tensors, padded and unpadded headers, from a file on disk.
TEST(SafetensorsRoundTrip, AllDtypesScalarsZeroSizeAlignedAndUnaligned) {
  const std::vector<Case> cases = {
      {DType::f8_e4m3, {3, 5}, 1}, {DType::f8_e5m2, {7}, 1},   {DType::f8_e8m0, {2, 3}, 1},
      {DType::i8, {4, 2}, 1},      {DType::u8, {5}, 1},        {DType::bf16, {3, 1, 2}, 2},
      {DType::f16, {3}, 2},        {DType::f32, {}, 4},        {DType::i32, {2, 2}, 4},
      {DType::i64, {3}, 8},        {DType::bf16, {0, 4}, 2},   {DType::f32, {0}, 4},
      {DType::i16, {2, 3}, 2},
  };
  for (int64_t align : {8, 1}) {
    SafetensorsWriter w;
    std::vector<std::vector<uint8_t>> payloads;
    for (size_t i = 0; i < cases.size(); ++i) {
      int64_t n = cases[i].elem_bytes;
      for (int64_t d : cases[i].shape) n *= d;
      payloads.push_back(pattern_bytes(static_cast<size_t>(n), i));
      ASSERT_TRUE(w.add("t" + std::to_string(i), cases[i].dtype, cases[i].shape, payloads.back()).ok());
    }
    ScratchDir dir;
    const std::string path = dir.file("all.safetensors");
    ASSERT_TRUE(w.write(path, no_sync(align)).ok());
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->entries().size(), cases.size());
    if (align == 8) EXPECT_EQ(f->header().data_offset % 8, 0);
    for (size_t i = 0; i < cases.size(); ++i) {
      auto v = f->tensor("t" + std::to_string(i));
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->dtype, cases[i].dtype);
      EXPECT_EQ(v->shape, cases[i].shape);
      EXPECT_EQ(v->nbytes, static_cast<int64_t>(payloads[i].size()));
      EXPECT_EQ(std::vector<uint8_t>(v->bytes(), v->bytes() + v->nbytes), payloads[i]) << i;
    }
    // Total payload = the sum of the per-case sizes: 15+7+6+8+5+12+6+4+16+24+0+0+12 = 115.
    EXPECT_EQ(f->header().data_size, 115);
  }
}

TEST(SafetensorsRoundTrip, UnalignedDataIsReadExactly) {
  SafetensorsWriter w;
  auto payload = pattern_bytes(12, 42);
  ASSERT_TRUE(w.add("odd.weights", DType::f32, {3}, payload).ok());
  ScratchDir dir;
  const std::string path = dir.file("odd.safetensors");
  ASSERT_TRUE(w.write(path, no_sync(1)).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  // {"odd.weights": {"dtype":"F32", "shape":[3], "data_offsets":[0,12] }} = 15+15+12+21+2 = 65
  // bytes, so the data starts at the odd file offset 73.
  auto v = f->tensor("odd.weights");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(f->header().data_offset, 8 + 65);
  EXPECT_EQ(v->bytes() - f->mapping().data(), 73);
  float x[3];
  std::memcpy(x, v->data, 12);  // unaligned-safe read
  EXPECT_EQ(std::memcmp(x, payload.data(), 12), 0);
}

TEST(SafetensorsWriter, StreamsGeneratedTensorsInBoundedRowChunks) {
  // bf16 [1000, 300]: a dim-0 row is 600 bytes; with a 64 KiB budget a chunk is 109 rows.
  constexpr int64_t kRows = 1000, kCols = 300, kRow = kCols * 2, kBudget = 64 * 1024;
  auto byte_at = [](int64_t i) { return static_cast<uint8_t>((i * 7 + i / 251) & 0xff); };
  std::vector<std::pair<int64_t, int64_t>> calls;
  SafetensorsWriter w;
  ASSERT_TRUE(w.add_generated("big", DType::bf16, {kRows, kCols}, [&](int64_t off, std::span<uint8_t> out) {
                 calls.emplace_back(off, static_cast<int64_t>(out.size()));
                 for (size_t j = 0; j < out.size(); ++j) out[j] = byte_at(off + static_cast<int64_t>(j));
                 return ok_status();
               }).ok());
  SafetensorsWriteOptions o = no_sync();
  o.chunk_bytes = kBudget;
  ScratchDir dir;
  ASSERT_TRUE(w.write(dir.file("g.safetensors"), o).ok());
  int64_t expect_off = 0;
  for (auto [off, len] : calls) {
    EXPECT_EQ(off, expect_off);
    EXPECT_LE(len, kBudget);
    EXPECT_EQ(off % kRow, 0);
    expect_off += len;
  }
  EXPECT_EQ(expect_off, kRows * kRow);
  EXPECT_EQ(calls.size(), 10u);  // ceil(1000 / 109) with 109 = floor(65536 / 600)
  auto f = SafetensorsFile::open(dir.file("g.safetensors"));
  ASSERT_TRUE(f.ok());
  auto v = f->tensor("big");
  ASSERT_TRUE(v.ok());
  for (int64_t i = 0; i < v->nbytes; ++i) ASSERT_EQ(v->bytes()[i], byte_at(i)) << i;
}

TEST(SafetensorsWriter, FailedFillLeavesNoFileAndNamesTheTensor) {
  ScratchDir dir;
  const std::string path = dir.file("x.safetensors");
  testing::write_text(path, "old contents");
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("ok", DType::u8, {2}, {1, 2}).ok());
  ASSERT_TRUE(w.add_generated("bad", DType::u8, {4}, [](int64_t, std::span<uint8_t>) {
                 return error(StatusCode::internal, "generator broke");
               }).ok());
  Status s = w.write(path, no_sync());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'bad'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("generator broke"), std::string::npos) << s.message();
  // The old file is untouched and no temporary remains.
  EXPECT_EQ(testing::read_bytes(path), std::vector<uint8_t>({'o', 'l', 'd', ' ', 'c', 'o', 'n', 't', 'e', 'n', 't', 's'}));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(SafetensorsWriter, RefusesBadTensors) {
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("a", DType::u8, {1}, {0}).ok());
  Status dup = w.add("a", DType::u8, {1}, {0});
  EXPECT_EQ(dup.code(), StatusCode::invalid_argument);
  EXPECT_NE(dup.message().find("'a'"), std::string::npos);
  Status neg = w.add("n", DType::u8, {-1}, {});
  EXPECT_NE(neg.message().find("'n'"), std::string::npos) << neg.message();
  Status size = w.add("s", DType::bf16, {2}, {0, 0, 0});
  EXPECT_NE(size.message().find("needs 4"), std::string::npos) << size.message();
  Status over = w.add_generated("o", DType::f32, {int64_t{1} << 62, 4}, [](int64_t, std::span<uint8_t>) {
    return ok_status();
  });
  EXPECT_NE(over.message().find("overflows"), std::string::npos) << over.message();
  EXPECT_FALSE(w.add("__metadata__", DType::u8, {0}, {}).ok());
  EXPECT_FALSE(w.add("", DType::u8, {0}, {}).ok());
  EXPECT_FALSE(w.add("bad\xff", DType::u8, {0}, {}).ok());
  EXPECT_EQ(w.tensors().size(), 1u);
}

// Hole tensors: the file written holds the bytes serialize() holds (zeros where the holes are), at
// its full length, but the holes get no data blocks. 16 MiB holes in the middle and at the end.
TEST(SafetensorsWriter, HoleTensorsReadAsZerosWithoutBlocks) {
  constexpr int64_t kHole = int64_t{16} << 20;
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("a", DType::u8, {4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(w.add_hole("mid", DType::f8_e4m3, {kHole / 256, 256}).ok());
  ASSERT_TRUE(w.add_generated("b", DType::u8, {3}, [](int64_t off, std::span<uint8_t> out) {
                 for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<uint8_t>(7 + off + j);
                 return ok_status();
               }).ok());
  ASSERT_TRUE(w.add_hole("tail", DType::bf16, {kHole / 2}).ok());
  EXPECT_EQ(w.payload_bytes(), 4 + 3 + 2 * kHole);
  EXPECT_EQ(w.hole_bytes(), 2 * kHole);
  auto mem = w.serialize(no_sync());
  ASSERT_TRUE(mem.ok());
  ScratchDir dir;
  const std::string path = dir.file("h.safetensors");
  ASSERT_TRUE(w.write(path, no_sync()).ok());
  EXPECT_EQ(testing::read_bytes(path), *mem);  // zeros in the holes, every other byte as given
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), mem->size());
  EXPECT_LT(int64_t{st.st_blocks} * 512, int64_t{1} << 20) << "holes were allocated";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensor("b")->bytes()[2], 9);
  EXPECT_EQ(f->tensor("tail")->bytes()[kHole - 1], 0);
}

// "F4" carries the logical FP4 shape; it reads as packed I8 with the last dimension halved.
TEST(SafetensorsReader, F4IsNormalisedToPackedPairs) {
  auto file = raw_safetensors(R"({"e":{"dtype":"F4","shape":[2,8],"data_offsets":[0,8]}})",
                              {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe});
  auto h = parse_safetensors("f4.safetensors", file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->entries.size(), 1u);
  EXPECT_EQ(h->entries[0].dtype, DType::i8);
  EXPECT_EQ(h->entries[0].file_dtype, "F4");
  EXPECT_EQ(h->entries[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(h->entries[0].nbytes(), 8);

  auto odd = parse_safetensors("f4.safetensors",
                               raw_safetensors(R"({"e":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}})", {0, 0, 0}));
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("f4.safetensors: tensor 'e'"), std::string::npos);
}

// DeepSeek scales are F8_E8M0; some tools write U8. The raw dtype is exposed for the caller to accept.
TEST(SafetensorsReader, U8ScaleKeepsItsStoredDtype) {
  auto file = raw_safetensors(
      R"({"w.scale":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v.scale":{"dtype":"F8_E8M0","shape":[1],"data_offsets":[2,3]}})",
      {127, 128, 0});
  auto h = parse_safetensors("s.safetensors", file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].name, "w.scale");  // sorted by offset
  EXPECT_EQ(h->entries[0].dtype, DType::u8);
  EXPECT_EQ(h->entries[1].dtype, DType::f8_e8m0);
}

TEST(SafetensorsReader, HeaderPaddingAndTensorOrderByOffset) {
  // Entries listed out of offset order, header padded with spaces.
  auto file = raw_safetensors(
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}    )",
      {10, 11, 12});
  auto h = parse_safetensors("p.safetensors", file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->entries[0].name, "a");
  EXPECT_EQ(h->entries[1].name, "b");
  EXPECT_EQ(h->data_size, 3);
}

// Files written by ExLlamaV3 1.4.1 (tests/data/exl3): minified headers, so the data section
// starts at an odd offset. Expected values read from the files' headers (formats.md §5.2).
TEST(SafetensorsReader, OpensExl3FixturesWithUnalignedData) {
  const std::string dir = DSV4_SOURCE_DIR "/tests/data/exl3";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int opened = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    auto f = SafetensorsFile::open(e.path().string());
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ++opened;
  }
  EXPECT_EQ(opened, 42);
  auto f = SafetensorsFile::open(dir + "/exl3_3inst_k1_128x128.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header().header_bytes, 995);
  EXPECT_EQ(f->header().data_offset, 1003);  // odd
  EXPECT_EQ(f->metadata().at("codebook"), "3inst");
  EXPECT_EQ(f->metadata().at("bits_per_weight"), "1");
  auto suh = f->tensor("exl3_3inst_k1_128x128.suh");
  ASSERT_TRUE(suh.ok());
  EXPECT_EQ(suh->dtype, DType::f16);
  EXPECT_EQ(suh->shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(suh->bytes() - f->mapping().data(), 1003);
}

TEST(SafetensorsReader, MissingTensorNamesFileAndTensor) {
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("present", DType::u8, {1}, {1}).ok());
  ScratchDir dir;
  ASSERT_TRUE(w.write(dir.file("one.safetensors"), no_sync()).ok());
  auto f = SafetensorsFile::open(dir.file("one.safetensors"));
  ASSERT_TRUE(f.ok());
  auto v = f->tensor("absent");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::not_found);
  EXPECT_NE(v.status().message().find("one.safetensors: tensor 'absent'"), std::string::npos);
  auto missing = SafetensorsFile::open(dir.file("nope.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
}

// 64-bit offsets end to end without writing gigabytes: the writer's header for a 5 GiB tensor
// plus a sparse file of the right length (holes read as zeros).
TEST(SafetensorsRoundTrip, OffsetsBeyondFourGiB) {
  constexpr int64_t kRows = 20 * 1024 * 1024, kCols = 256;  // F8_E4M3 [20971520, 256] = 5 GiB
  SafetensorsWriter w;
  ASSERT_TRUE(w.add("small", DType::u8, {3}, {1, 2, 3}).ok());
  ASSERT_TRUE(w.add_generated("table", DType::f8_e4m3, {kRows, kCols}, [](int64_t, std::span<uint8_t>) {
                 return ok_status();
               }).ok());
  EXPECT_EQ(w.payload_bytes(), 3 + kRows * kCols);
  const std::string h = w.header();
  EXPECT_NE(h.find(R"("data_offsets":[3,5368709123])"), std::string::npos) << h;
  ScratchDir dir;
  const std::string path = dir.file("sparse.safetensors");
  auto bytes = raw_safetensors(h, {1, 2, 3});
  testing::write_bytes(path, bytes);
  std::filesystem::resize_file(path, bytes.size() + static_cast<size_t>(kRows * kCols));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto v = f->tensor("table");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->nbytes, int64_t{5} << 30);
  EXPECT_EQ(v->shape, (std::vector<int64_t>{kRows, kCols}));
  EXPECT_EQ(v->bytes()[v->nbytes - 1], 0);
  EXPECT_EQ(f->tensor("small")->bytes()[2], 3);
  // One byte short: refused, naming the tensor.
  std::filesystem::resize_file(path, bytes.size() + static_cast<size_t>(kRows * kCols) - 1);
  auto cut = SafetensorsFile::open(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("tensor 'table'"), std::string::npos) << cut.status().message();
}

}  // namespace
}  // namespace dsv4
