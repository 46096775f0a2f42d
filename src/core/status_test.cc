// Status, StatusOr and the early-return macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include "core/dtype.h"

namespace dsv4 {
namespace {

StatusOr<int> parse_positive(int v) {
  if (v <= 0) return error(StatusCode::invalid_argument, "value {} is not positive", v);
  return v;
}

Status twice(int v, int* out) {
  DSV4_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return ok_status();
}

TEST(Status, PropagatesErrorsWithContext) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = twice(-1, &out).with_context("reading flag --n");
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.to_string(), "invalid_argument: reading flag --n: value -1 is not positive");
}

TEST(DType, NamesRoundTrip) {
  for (const char* name : {"F8_E4M3", "F8_E5M2", "F8_E8M0", "I8", "U8", "I16", "BF16", "F16", "F32", "I32", "I64"}) {
    auto t = dtype_from_name(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(dtype_name(*t), name);
  }
  EXPECT_FALSE(dtype_from_name("F64").has_value());
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::i64), 8);
}

}  // namespace
}  // namespace dsv4
