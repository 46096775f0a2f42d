// PNG through libpng's classic API. Only unpacking of sub-byte samples is asked of libpng; the conversion to
// RGB is done here so it follows PIL's `.convert("RGB")` per colour type (docs/vision.md "Decoding").
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include "vision/codecs.h"

namespace dsv4::vision::detail {
namespace {

struct PngRead {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  char message[256] = {0};
  png_structp png = nullptr;
  png_infop info = nullptr;
  // Filled by the header step.
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  std::vector<uint8_t> raw;  // one row per image row, libpng's layout after png_set_packing
  size_t rowbytes = 0;
  std::vector<uint8_t> palette;  // u8 [n, 3]
  bool header_ok = false;
};

void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof(r->message), "%s", msg);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->pos) png_error(png, "truncated data (read past the end of the file)");
  std::memcpy(out, r->bytes.data() + r->pos, n);
  r->pos += n;
}

// Header: size, type, transforms. No C++ object with a destructor lives in this frame (longjmp target).
bool read_header(PngRead& r) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, on_read);
  png_read_info(r.png, r.info);
  png_get_IHDR(r.png, r.info, &r.width, &r.height, &r.bit_depth, &r.color_type, &r.interlace, nullptr, nullptr);
  if (r.bit_depth < 8) png_set_packing(r.png);  // 1/2/4-bit samples -> one byte each, values unscaled
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  r.rowbytes = png_get_rowbytes(r.png, r.info);
  r.header_ok = true;
  return true;
}

bool read_rows(PngRead& r, png_bytep* rows) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_read_image(r.png, rows);  // chunks after the image data (IEND included) are not needed, as in PIL
  return true;
}

uint8_t scale_low_depth(int v, int depth) {  // PIL's "1", "L;2", "L;4" unpackers: full-range scaling
  switch (depth) {
    case 1: return static_cast<uint8_t>(v ? 255 : 0);
    case 2: return static_cast<uint8_t>(v * 0x55);
    case 4: return static_cast<uint8_t>(v * 0x11);
    default: return static_cast<uint8_t>(v);
  }
}

// One raw row -> RGB. 16-bit samples are big-endian: PIL keeps the high byte for RGB, RGBA and LA
// ("RGB;16B" etc.), but reads 16-bit grey as mode "I", whose conversion to RGB clips at 255.
void row_to_rgb(const PngRead& r, const uint8_t* in, uint8_t* out) {
  const bool wide = r.bit_depth == 16;
  for (png_uint_32 x = 0; x < r.width; ++x) {
    uint8_t rgb[3];
    switch (r.color_type) {
      case PNG_COLOR_TYPE_GRAY: {
        uint8_t g;
        if (wide) {
          const int v = (in[2 * x] << 8) | in[2 * x + 1];
          g = static_cast<uint8_t>(v > 255 ? 255 : v);
        } else {
          g = scale_low_depth(in[x], r.bit_depth);
        }
        rgb[0] = rgb[1] = rgb[2] = g;
        break;
      }
      case PNG_COLOR_TYPE_GRAY_ALPHA: rgb[0] = rgb[1] = rgb[2] = in[x * (wide ? 4 : 2)]; break;
      case PNG_COLOR_TYPE_RGB:
        for (int c = 0; c < 3; ++c) rgb[c] = in[x * (wide ? 6 : 3) + c * (wide ? 2 : 1)];
        break;
      case PNG_COLOR_TYPE_RGB_ALPHA:
        for (int c = 0; c < 3; ++c) rgb[c] = in[x * (wide ? 8 : 4) + c * (wide ? 2 : 1)];
        break;
      case PNG_COLOR_TYPE_PALETTE: {
        const size_t i = in[x];
        // An index past the PLTE entries is out of spec; PIL's palette starts as the grey ramp (i, i, i).
        for (int c = 0; c < 3; ++c) rgb[c] = 3 * i + c < r.palette.size() ? r.palette[3 * i + c] : static_cast<uint8_t>(i);
        break;
      }
      default: rgb[0] = rgb[1] = rgb[2] = 0;
    }
    std::memcpy(out + 3 * x, rgb, 3);
  }
}

}  // namespace

StatusOr<Image> decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  PngRead r;
  r.bytes = bytes;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  if (!r.png) return error(StatusCode::internal, "libpng: cannot create a read struct");
  r.info = png_create_info_struct(r.png);
  struct Destroy {
    PngRead& r;
    ~Destroy() { png_destroy_read_struct(&r.png, r.info ? &r.info : nullptr, nullptr); }
  } destroy{r};
  if (!r.info) return error(StatusCode::internal, "libpng: cannot create an info struct");

  if (!read_header(r)) return error(StatusCode::invalid_argument, "corrupt or truncated PNG: libpng: {}", r.message);
  DSV4_RETURN_IF_ERROR(check_dimensions(ImageFormat::png, r.width, r.height, limits));
  if (r.color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp plte = nullptr;
    int n = 0;
    if (png_get_PLTE(r.png, r.info, &plte, &n) != PNG_INFO_PLTE) {
      return error(StatusCode::invalid_argument, "corrupt PNG: palette image without a PLTE chunk");
    }
    for (int i = 0; i < n; ++i) r.palette.insert(r.palette.end(), {plte[i].red, plte[i].green, plte[i].blue});
  }
  r.raw.assign(r.rowbytes * r.height, 0);
  std::vector<png_bytep> rows(r.height);
  for (png_uint_32 y = 0; y < r.height; ++y) rows[y] = r.raw.data() + y * r.rowbytes;
  if (!read_rows(r, rows.data())) return error(StatusCode::invalid_argument, "corrupt or truncated PNG: libpng: {}", r.message);

  Image im = blank_image(static_cast<int32_t>(r.width), static_cast<int32_t>(r.height));
  for (png_uint_32 y = 0; y < r.height; ++y) row_to_rgb(r, rows[y], im.rgb.data() + static_cast<size_t>(y) * r.width * 3);
  return im;
}

}  // namespace dsv4::vision::detail
