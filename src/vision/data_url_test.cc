// data: URL parsing and base64: round trips against known encodings (RFC 4648 test vectors) and every error.
#include "vision/data_url.h"

#include <gtest/gtest.h>

#include "vision/decode.h"
#include "vision/golden_testing.h"

namespace dsv4::vision {
namespace {

std::string as_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

// RFC 4648 §10 test vectors.
TEST(VisionBase64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"Zg==", "f"},         {"Zm8=", "fo"},       {"Zm9v", "foo"},
                                                         {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"}, {"Zm9vYmFy", "foobar"}};
  for (const auto& [enc, dec] : vectors) {
    StatusOr<std::vector<uint8_t>> r = decode_base64(enc, 100);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(as_text(*r), dec);
  }
  // Unpadded, whitespace-broken and URL-safe forms decode the same.
  EXPECT_EQ(as_text(*decode_base64("Zm9vYg", 100)), "foob");
  EXPECT_EQ(as_text(*decode_base64("Zm9v\r\nYmFy\n", 100)), "foobar");
  EXPECT_EQ(*decode_base64("-_-_", 100), *decode_base64("+/+/", 100));
}

void expect_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(VisionBase64, Errors) {
  expect_error(decode_base64("Zm9v!mFy", 100).status(), "not base64: '!' at offset 4");
  expect_error(decode_base64("Zm9vY", 100).status(), "dangling base64 digit");
  expect_error(decode_base64("Z===", 100).status(), "padding '=' at offset 1 is misplaced");
  expect_error(decode_base64("Zg==Zg==", 100).status(), "data after '=' padding at offset 4");
  expect_error(decode_base64("Zm8==", 100).status(), "too much padding");
  expect_error(decode_base64("Zg=", 100).status(), "incomplete padding");
  expect_error(decode_base64("Zm9vYmFy", 5).status(), "more than the limit of 5 bytes");
}

TEST(VisionDataUrl, Base64Image) {
  const std::vector<uint8_t> png = testing::golden_image("rgb_37x91.png");
  // The test encodes with its own table so that the parser is checked against an independent encoder.
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < png.size(); i += 3) {
    const uint32_t v = (png[i] << 16) | ((i + 1 < png.size() ? png[i + 1] : 0) << 8) | (i + 2 < png.size() ? png[i + 2] : 0);
    b64 += kAlphabet[(v >> 18) & 63];
    b64 += kAlphabet[(v >> 12) & 63];
    b64 += i + 1 < png.size() ? kAlphabet[(v >> 6) & 63] : '=';
    b64 += i + 2 < png.size() ? kAlphabet[v & 63] : '=';
  }
  StatusOr<DataUrl> u = parse_data_url("data:Image/PNG;base64," + b64, 1 << 20);
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->mime, "image/png");
  EXPECT_TRUE(u->base64);
  EXPECT_EQ(u->bytes, png);
  EXPECT_TRUE(decode_image(u->bytes, u->mime).ok());
  // Parameters before ;base64 are allowed; %2B / %2F escapes inside base64 are undone.
  StatusOr<DataUrl> p = parse_data_url("data:image/gif;name=x.gif;base64,Zm9v%2B%2F", 100);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->mime, "image/gif");
  EXPECT_EQ(p->bytes, *decode_base64("Zm9v+/", 100));
}

TEST(VisionDataUrl, PercentEncodedPayload) {
  StatusOr<DataUrl> u = parse_data_url("data:image/gif,GIF89a%00%FF%2c", 100);
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_FALSE(u->base64);
  EXPECT_EQ(u->bytes, (std::vector<uint8_t>{'G', 'I', 'F', '8', '9', 'a', 0x00, 0xFF, 0x2C}));
  StatusOr<DataUrl> none = parse_data_url("data:,abc", 100);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->mime, "");
}

TEST(VisionDataUrl, Errors) {
  expect_error(parse_data_url("http://example.com/a.png", 100).status(), "not a data: URL");
  expect_error(parse_data_url("data:image/png;base64", 100).status(), "no ','");
  expect_error(parse_data_url("data:image/png;base64,", 100).status(), "empty payload");
  expect_error(parse_data_url("data:image/png;base64,   ", 100).status(), "empty payload");
  expect_error(parse_data_url("data:image/png,", 100).status(), "empty payload");
  expect_error(parse_data_url("data:image/png;base64,iVBOR*w0", 100).status(), "not base64: '*' at offset 5");
  expect_error(parse_data_url("data:image/png;base64;charset=x,AAAA", 100).status(), "';base64' must be the last");
  expect_error(parse_data_url("data:image/png,ab%4", 100).status(), "bad percent escape at offset 2");
  expect_error(parse_data_url("data:image/png,ab%zz", 100).status(), "bad percent escape");
  expect_error(parse_data_url("data:image/png;base64,AAAAAAAA", 5).status(), "more than the limit of 5 bytes");
  expect_error(parse_data_url("data:image/png,abcdef", 5).status(), "more than the limit of 5 bytes");
}

}  // namespace
}  // namespace dsv4::vision
