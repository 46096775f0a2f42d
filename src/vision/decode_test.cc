// Decoding against Pillow 9.4's `.convert("RGB")` of every golden image, and every refusal.
#include "vision/decode.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/npz.h"
#include "vision/golden_testing.h"
#include "vision/sniff.h"

namespace dsv4::vision {
namespace {

using testing::golden_image;
using testing::manifest;

std::string mime_of(const std::string& pil_format) {
  if (pil_format == "PNG") return "image/png";
  if (pil_format == "JPEG") return "image/jpeg";
  if (pil_format == "WEBP") return "image/webp";
  return "image/gif";
}

// Every golden image decodes to exactly Pillow's pixels. Exact for the lossy formats too: Pillow 9.4 on
// Debian 12 links the same libjpeg-turbo 2.1.5 and libwebp 1.2.4 with the same decoder settings.
TEST(VisionDecode, MatchesPillowPixelsExactly) {
  const auto& images = manifest()["images"];
  ASSERT_GE(images.size(), 30u);
  for (const auto& [name, g] : images.items()) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = golden_image(name);
    StatusOr<Image> im = decode_image(bytes, mime_of(g["format"]));
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    EXPECT_EQ(im->width, g["width"].get<int>());
    EXPECT_EQ(im->height, g["height"].get<int>());
    EXPECT_EQ(testing::sha256_of(im->rgb), g["rgb_sha256"].get<std::string>()) << "pixels differ from Pillow's";
  }
}

TEST(VisionDecode, SniffsByMagicBytesNotByName) {
  EXPECT_EQ(sniff_format(golden_image("rgb_37x91.png")), ImageFormat::png);
  EXPECT_EQ(sniff_format(golden_image("q444_37x91.jpg")), ImageFormat::jpeg);
  EXPECT_EQ(sniff_format(golden_image("lossless_37x91.webp")), ImageFormat::webp);
  EXPECT_EQ(sniff_format(golden_image("palette_37x91.gif")), ImageFormat::gif);
  const uint8_t bmp[] = {'B', 'M', 0, 0, 0, 0};
  EXPECT_EQ(sniff_format(bmp), std::nullopt);
  EXPECT_EQ(format_from_mime(" Image/JPG ; q=1"), ImageFormat::jpeg);
  EXPECT_EQ(format_from_mime("image/bmp"), std::nullopt);
  // No declared type: the bytes decide.
  EXPECT_TRUE(decode_image(golden_image("palette_37x91.gif"), "").ok());
}

void expect_error(const StatusOr<Image>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(VisionDecode, DeclaredTypeMustAgreeWithTheData) {
  const std::vector<uint8_t> png = golden_image("rgb_37x91.png");
  expect_error(decode_image(png, "image/jpeg"), "declared type 'image/jpeg' does not match the data, which is PNG");
  expect_error(decode_image(png, "image/bmp"), "'image/bmp' is not a supported image type");
  expect_error(decode_image(png, "text/plain"), "not a supported image type");
}

TEST(VisionDecode, RefusesEmptyUnknownAndOversizedInput) {
  expect_error(decode_image({}, "image/png"), "image data is empty");
  const uint8_t text[] = {'h', 'e', 'l', 'l', 'o'};
  expect_error(decode_image(text, "image/png"), "not PNG, JPEG, WebP or GIF");
  const std::vector<uint8_t> png = golden_image("rgb_640x480.png");
  DecodeLimits small;
  small.max_encoded_bytes = 1000;
  expect_error(decode_image(png, "image/png", small), "over the limit of 1000");
  DecodeLimits few;
  few.max_pixels = 640 * 480 - 1;
  expect_error(decode_image(png, "image/png", few), "640x480 = 307200 pixels, over the limit of 307199");
  few.max_pixels = 640 * 480;
  EXPECT_TRUE(decode_image(png, "image/png", few).ok());
}

// PNG chunk with its CRC (the same CRC-32 zip uses).
std::vector<uint8_t> png_chunk(const char* type, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  const uint32_t n = static_cast<uint32_t>(data.size());
  out.insert(out.end(), {uint8_t(n >> 24), uint8_t(n >> 16), uint8_t(n >> 8), uint8_t(n)});
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  const uint32_t crc = crc32_ieee(body);
  out.insert(out.end(), {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)});
  return out;
}

std::vector<uint8_t> png_header(uint32_t w, uint32_t h) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const std::vector<uint8_t> ihdr = {uint8_t(w >> 24), uint8_t(w >> 16), uint8_t(w >> 8), uint8_t(w),
                                     uint8_t(h >> 24), uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h),
                                     8, 2, 0, 0, 0};
  const std::vector<uint8_t> c = png_chunk("IHDR", ihdr);
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

// A 60-byte PNG declaring 100000 x 100000 RGB (30 GB of pixels): refused from the header alone.
TEST(VisionDecode, RefusesADecompressionBombBeforeAllocating) {
  std::vector<uint8_t> bomb = png_header(100000, 100000);
  const std::vector<uint8_t> idat = png_chunk("IDAT", {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  const std::vector<uint8_t> iend = png_chunk("IEND", {});
  bomb.insert(bomb.end(), idat.begin(), idat.end());
  bomb.insert(bomb.end(), iend.begin(), iend.end());
  ASSERT_LT(bomb.size(), 80u);
  expect_error(decode_image(bomb, "image/png"), "declares 100000x100000 = 10000000000 pixels, over the limit of 178956970");
}

// A GIF whose logical screen and frame are 0 x 0.
TEST(VisionDecode, RefusesZeroWidthOrHeight) {
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 255, 255, 255,
                                    0x2C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0x4C, 0x01, 0, 0x3B};
  expect_error(decode_image(gif, "image/gif"), "zero width or height (0x0)");
  // libpng refuses a zero IHDR width itself, naming it.
  std::vector<uint8_t> png = png_header(0, 5);
  expect_error(decode_image(png, "image/png"), "libpng: Invalid IHDR data");
}

TEST(VisionDecode, RefusesTruncatedDataNamingTheLibrary) {
  struct Case {
    const char* file;
    const char* mime;
    const char* needle;
  };
  for (const Case& c : {Case{"rgb_37x91.png", "image/png", "corrupt or truncated PNG: libpng: "},
                        Case{"q444_37x91.jpg", "image/jpeg", "truncated JPEG: libjpeg: Premature end of JPEG file"},
                        Case{"progressive_37x91.jpg", "image/jpeg", "truncated JPEG: libjpeg: "},
                        Case{"lossless_37x91.webp", "image/webp", "corrupt or truncated WebP: libwebp: cannot read the container (not enough data (truncated))"},
                        Case{"lossy_640x480.webp", "image/webp", "WebP: libwebp: cannot read the container (not enough data"},
                        Case{"palette_37x91.gif", "image/gif", "corrupt or truncated GIF: giflib: "}}) {
    SCOPED_TRACE(c.file);
    std::vector<uint8_t> bytes = golden_image(c.file);
    bytes.resize(bytes.size() * 2 / 3);
    expect_error(decode_image(bytes, c.mime), c.needle);
  }
}

TEST(VisionDecode, RefusesCorruptData) {
  std::vector<uint8_t> png = golden_image("rgb_37x91.png");
  png[40] ^= 0x55;  // inside the first IDAT: its CRC no longer matches
  expect_error(decode_image(png, "image/png"), "libpng: ");
  std::vector<uint8_t> jpg = golden_image("q444_37x91.jpg");
  for (size_t i = 2; i + 4 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {  // the frame header (SOF0): its length becomes 2
      jpg[i + 2] = 0, jpg[i + 3] = 2;
      break;
    }
  }
  expect_error(decode_image(jpg, "image/jpeg"), "corrupt or truncated JPEG: libjpeg: ");
  std::vector<uint8_t> webp = golden_image("lossless_37x91.webp");
  std::memset(webp.data() + 12, 'X', 4);  // chunk type
  expect_error(decode_image(webp, "image/webp"), "WebP: libwebp");
}

}  // namespace
}  // namespace dsv4::vision
