// MappedFile and TensorView helpers: mapping, empty files, moves, advice ranges, shape arithmetic.
#include "core/mmap.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/safetensors_testing.h"
#include "core/tensor_view.h"

namespace dsv4 {
namespace {

TEST(MappedFile, MapsBytesAndMoves) {
  testing::ScratchDir dir;
  testing::write_text(dir.file("a"), "hello");
  auto m = MappedFile::open(dir.file("a"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->size(), 5);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 5), "hello");
  MappedFile moved = std::move(*m);
  EXPECT_EQ(moved.size(), 5);
  EXPECT_EQ(m->data(), nullptr);  // NOLINT: moved-from state is defined as empty
  EXPECT_EQ(moved.path(), dir.file("a"));
  // Advice over the whole file, a sub-range, out-of-range and inside-pointer forms all succeed.
  EXPECT_TRUE(moved.advise(0, 5, MapAdvice::willneed).ok());
  EXPECT_TRUE(moved.advise(3, 100, MapAdvice::sequential).ok());
  EXPECT_TRUE(moved.advise(99, 1, MapAdvice::random).ok());
  EXPECT_TRUE(moved.advise_bytes(moved.data() + 2, 2, MapAdvice::dontneed).ok());
  EXPECT_EQ(moved.data()[4], 'o');  // still readable after DONTNEED: pages come back from the file
  int outside = 0;
  EXPECT_FALSE(moved.advise_bytes(&outside, 4, MapAdvice::normal).ok());
}

TEST(MappedFile, EmptyFileMissingFileAndDirectory) {
  testing::ScratchDir dir;
  testing::write_text(dir.file("empty"), "");
  auto e = MappedFile::open(dir.file("empty"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 0);
  EXPECT_EQ(e->data(), nullptr);
  auto missing = MappedFile::open(dir.file("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find(dir.file("nope")), std::string::npos);
  auto d = MappedFile::open(dir.path());
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos) << d.status().message();
}

TEST(TensorView, ShapeArithmetic) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(checked_numel(std::vector<int64_t>{}), 1);
  EXPECT_EQ(checked_numel(std::vector<int64_t>{384016682, 256}), 98308270592);
  EXPECT_EQ(checked_numel(std::vector<int64_t>{big, 2}), std::nullopt);  // 2^63 does not fit
  EXPECT_EQ(checked_numel(std::vector<int64_t>{big - 1, 2}), 2 * (big - 1));
  EXPECT_EQ(checked_numel(std::vector<int64_t>{big, 0}), 0);  // zero-size wins over a huge dim
  EXPECT_EQ(checked_numel(std::vector<int64_t>{3, -1}), std::nullopt);
  EXPECT_EQ(checked_nbytes(DType::f32, std::vector<int64_t>{big, 1}), std::nullopt);
  EXPECT_EQ(checked_nbytes(DType::bf16, std::vector<int64_t>{129280, 5120}), 1323827200);  // model-spec §5.4
  EXPECT_EQ(shape_string(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{2304, 2560}), "[2304, 2560]");
  TensorView v{nullptr, DType::i8, {5120, 1152}, 5898240};
  EXPECT_EQ(v.numel(), 5898240);
  EXPECT_EQ(v.rank(), 2);
  EXPECT_EQ(v.dim(-1), 1152);
}

}  // namespace
}  // namespace dsv4
