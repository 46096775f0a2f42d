// Every malformed safetensors input gives a clean error naming the file and (where known) the tensor.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/safetensors_testing.h"

namespace dsv4 {
namespace {

using testing::raw_safetensors;

// Opens `bytes` as a file on disk (the path must appear in the error) and also parses them from
// memory; both must fail with every one of `needles` in the message.
void expect_refused(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles) {
  testing::ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  testing::write_bytes(path, bytes);
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok()) << "accepted";
  const std::string& msg = f.status().message();
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;  // starts with the file's path
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  auto h = parse_safetensors("mem.safetensors", bytes);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message().rfind("mem.safetensors: ", 0), 0u) << h.status().message();
  EXPECT_EQ(h.status().code(), f.status().code());
}

std::vector<uint8_t> zeros(size_t n) { return std::vector<uint8_t>(n, 0); }

// A one-tensor header for tensor "w".
std::string one(const std::string& body) { return R"({"w":{)" + body + "}}"; }

TEST(SafetensorsMalformed, FileShorterThanLengthField) {
  for (size_t n = 0; n < 8; ++n) expect_refused(std::vector<uint8_t>(n, 1), {"shorter than the 8-byte"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFile) {
  expect_refused(raw_safetensors("{}", {}, 3), {"header length 3 runs past the end of the file (10 bytes)"});
  // A header that was complete but the file was cut inside it.
  auto full = raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[0,1])"), {5});
  full.resize(30);
  expect_refused(full, {"runs past the end of the file (30 bytes)"});
}

TEST(SafetensorsMalformed, HeaderLengthOverLimit) {
  expect_refused(raw_safetensors("{}", {}, 100'000'001), {"header length 100000001 exceeds the limit"});
  expect_refused(raw_safetensors("{}", {}, UINT64_MAX - 1), {"exceeds the limit"});
}

TEST(SafetensorsMalformed, HeaderNotStartingWithBrace) {
  expect_refused(raw_safetensors(" {}"), {"does not start with '{'"});
  expect_refused(raw_safetensors("[1]"), {"does not start with '{'"});
  expect_refused(raw_safetensors("", {}), {"does not start with '{'"});
}

TEST(SafetensorsMalformed, BadJson) {
  expect_refused(raw_safetensors(R"({"w":)"), {"bad JSON"});
  expect_refused(raw_safetensors(R"({"w":{}} x)"), {"bad JSON"});
  expect_refused(raw_safetensors("{\"w\xff\":{}}"), {"bad JSON"});  // ill-formed UTF-8
  std::string deep = "{\"w\":" + std::string(200, '[') + std::string(200, ']') + "}";
  expect_refused(raw_safetensors(deep), {"nested deeper"});
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  expect_refused(raw_safetensors(R"({"w":[1,2]})"), {"tensor 'w'", "not an object"});
}

TEST(SafetensorsMalformed, MissingOrMistypedDtype) {
  expect_refused(raw_safetensors(one(R"("shape":[1],"data_offsets":[0,1])"), {0}), {"tensor 'w'", "missing 'dtype'"});
  expect_refused(raw_safetensors(one(R"("dtype":5,"shape":[1],"data_offsets":[0,1])"), {0}),
                 {"tensor 'w'", "'dtype' is not a string"});
}

TEST(SafetensorsMalformed, MissingOrMistypedShape) {
  expect_refused(raw_safetensors(one(R"("dtype":"U8","data_offsets":[0,1])"), {0}), {"tensor 'w'", "missing 'shape'"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":"1","data_offsets":[0,1])"), {0}),
                 {"tensor 'w'", "'shape' is not an array"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1.5],"data_offsets":[0,1])"), {0}),
                 {"tensor 'w'", "'shape' entry 1.5"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[true],"data_offsets":[0,1])"), {0}),
                 {"tensor 'w'", "'shape' entry true"});
}

TEST(SafetensorsMalformed, MissingOrMistypedDataOffsets) {
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1])"), {0}), {"tensor 'w'", "missing 'data_offsets'"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[0])"), {0}),
                 {"tensor 'w'", "not an array of two integers"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":{"a":1})"), {0}),
                 {"tensor 'w'", "not an array of two integers"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[0,"1"])"), {0}),
                 {"tensor 'w'", "are not integers"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[-1,0])"), {0}),
                 {"tensor 'w'", "are not integers"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_refused(raw_safetensors(one(R"("dtype":"Q7","shape":[1],"data_offsets":[0,1])"), {0}),
                 {"tensor 'w'", "unknown dtype 'Q7'"});
  expect_refused(raw_safetensors(one(R"("dtype":"bf16","shape":[1],"data_offsets":[0,2])"), {0, 0}),
                 {"tensor 'w'", "unknown dtype 'bf16'"});  // names are case-sensitive
  expect_refused(raw_safetensors(one(R"("dtype":"F64","shape":[1],"data_offsets":[0,8])"), zeros(8)),
                 {"tensor 'w'", "dtype 'F64' is not supported"});
}

TEST(SafetensorsMalformed, ReversedOffsets) {
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[2,1])"), {0, 0}),
                 {"tensor 'w'", "data_offsets [2, 1] are reversed"});
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  auto h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})";
  expect_refused(raw_safetensors(h, zeros(6)), {"tensor 'b'", "overlap tensor 'a' [0, 4]"});
  // Two tensors on the very same bytes.
  auto same = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  expect_refused(raw_safetensors(same, zeros(4)), {"tensor 'b'", "overlap tensor 'a'"});
}

TEST(SafetensorsMalformed, Holes) {
  auto middle = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  expect_refused(raw_safetensors(middle, zeros(5)), {"tensor 'b'", "hole: data bytes [2, 3)"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[2],"data_offsets":[1,3])"), zeros(3)),
                 {"tensor 'w'", "hole: data bytes [0, 1)"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[2],"data_offsets":[0,2])"), zeros(5)),
                 {"hole: data bytes [2, 5) after the last tensor"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[4],"data_offsets":[0,4])"), zeros(3)),
                 {"tensor 'w'", "data_offsets [0, 4] run past the data section of 3 bytes"});
  // A truncated data section: the header is intact, the payload cut short.
  expect_refused(raw_safetensors(one(R"("dtype":"BF16","shape":[1000],"data_offsets":[0,2000])"), zeros(1999)),
                 {"tensor 'w'", "run past the data section of 1999 bytes"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615])"), {0}),
                 {"tensor 'w'", "are not integers"});
}

TEST(SafetensorsMalformed, ByteCountMismatch) {
  expect_refused(raw_safetensors(one(R"("dtype":"BF16","shape":[2,3],"data_offsets":[0,6])"), zeros(6)),
                 {"tensor 'w'", "hold 6 bytes but BF16 [2, 3] needs 12"});
  expect_refused(raw_safetensors(one(R"("dtype":"F32","shape":[],"data_offsets":[0,0])"), {}),
                 {"tensor 'w'", "hold 0 bytes but F32 [] needs 4"});
}

TEST(SafetensorsMalformed, NegativeDimension) {
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[2,-1],"data_offsets":[0,0])"), {}),
                 {"tensor 'w'", "negative dimension -1"});
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  // 2^62 * 4 elements overflow int64; so does 2^62 * 2 elements of a 4-byte dtype in bytes.
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,0])"), {}),
                 {"tensor 'w'", "overflows 64 bits"});
  expect_refused(raw_safetensors(one(R"("dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,0])"), {}),
                 {"tensor 'w'", "overflows 64 bits"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0])"), {}),
                 {"tensor 'w'", "'shape' entry 9223372036854775808"});
}

TEST(SafetensorsMalformed, DuplicateNames) {
  auto h = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_refused(raw_safetensors(h, zeros(2)), {"duplicate key 'w'"});
  expect_refused(raw_safetensors(one(R"("dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1])"), {0}),
                 {"duplicate key 'dtype' inside 'w'"});
}

TEST(SafetensorsMalformed, BadMetadata) {
  expect_refused(raw_safetensors(R"({"__metadata__":{"k":1}})"), {"__metadata__ value of 'k' is not a string"});
  expect_refused(raw_safetensors(R"({"__metadata__":"x"})"), {"__metadata__ is not an object"});
}

}  // namespace
}  // namespace dsv4
