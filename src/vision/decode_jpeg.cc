// JPEG through libjpeg(-turbo) with the library defaults PIL uses (islow DCT, fancy upsampling); CMYK and
// YCCK come out through PIL's Adobe-inverted CMYK and its CMYK -> RGB formula.
#include <cstdio>
#include <jpeglib.h>
// jerror.h needs jpeglib.h first (JMESSAGE codes).
#include <jerror.h>

#include <csetjmp>
#include <cstdio>
#include <vector>

#include "vision/codecs.h"

namespace dsv4::vision::detail {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;  // first member: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
  bool truncated = false;  // libjpeg only warns on a premature end and pads with grey; PIL refuses the file
  char truncated_message[JMSG_LENGTH_MAX] = {0};
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
void on_message(j_common_ptr) {}  // nothing is printed

void on_emit(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF && !e->truncated) {
    e->truncated = true;
    (*cinfo->err->format_message)(cinfo, e->truncated_message);
  }
}

struct JpegRead {
  jpeg_decompress_struct cinfo;
  JpegError err;
  JDIMENSION width = 0, height = 0;
  int components = 0;
  J_COLOR_SPACE space = JCS_UNKNOWN;
};

// No C++ object with a destructor lives in these frames (longjmp targets).
bool read_header(JpegRead& r, std::span<const uint8_t> bytes) {
  if (setjmp(r.err.jump)) return false;
  jpeg_mem_src(&r.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&r.cinfo, TRUE);
  r.width = r.cinfo.image_width;
  r.height = r.cinfo.image_height;
  r.space = r.cinfo.jpeg_color_space;
  return true;
}

bool read_pixels(JpegRead& r, uint8_t* out, size_t stride) {
  if (setjmp(r.err.jump)) return false;
  jpeg_start_decompress(&r.cinfo);
  r.components = r.cinfo.output_components;
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    JSAMPROW row = out + static_cast<size_t>(r.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&r.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&r.cinfo);
  return true;
}

// PIL's MULDIV255: a*b/255 rounded, in integers.
int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return (t + (t >> 8)) >> 8;
}

}  // namespace

StatusOr<Image> decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  JpegRead r;
  r.cinfo.err = jpeg_std_error(&r.err.mgr);
  r.err.mgr.error_exit = on_error;
  r.err.mgr.output_message = on_message;
  r.err.mgr.emit_message = on_emit;
  jpeg_create_decompress(&r.cinfo);
  struct Destroy {
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&r.cinfo};

  if (!read_header(r, bytes)) return error(StatusCode::invalid_argument, "corrupt or truncated JPEG: libjpeg: {}", r.err.message);
  DSV4_RETURN_IF_ERROR(check_dimensions(ImageFormat::jpeg, r.width, r.height, limits));

  int channels = 3;
  switch (r.space) {
    case JCS_GRAYSCALE: r.cinfo.out_color_space = JCS_GRAYSCALE; channels = 1; break;
    case JCS_CMYK:
    case JCS_YCCK: r.cinfo.out_color_space = JCS_CMYK; channels = 4; break;
    default: r.cinfo.out_color_space = JCS_RGB; break;
  }
  std::vector<uint8_t> raw(static_cast<size_t>(r.width) * r.height * channels);
  if (!read_pixels(r, raw.data(), static_cast<size_t>(r.width) * channels)) {
    return error(StatusCode::invalid_argument, "corrupt or truncated JPEG: libjpeg: {}", r.err.message);
  }
  if (r.err.truncated) {
    return error(StatusCode::invalid_argument, "truncated JPEG: libjpeg: {}", r.err.truncated_message);
  }
  if (r.components != channels) {
    return error(StatusCode::invalid_argument, "JPEG decoded to {} components, expected {}", r.components, channels);
  }

  Image im = blank_image(static_cast<int32_t>(r.width), static_cast<int32_t>(r.height));
  const size_t n = static_cast<size_t>(r.width) * r.height;
  if (channels == 3) {
    im.rgb = std::move(raw);
  } else if (channels == 1) {
    for (size_t i = 0; i < n; ++i) im.rgb[3 * i] = im.rgb[3 * i + 1] = im.rgb[3 * i + 2] = raw[i];
  } else {
    // PIL reads every CMYK JPEG as Adobe-inverted ("CMYK;I"), then converts with
    // out = clip(255 - k - c * (255 - k) / 255) per channel, k the black channel.
    for (size_t i = 0; i < n; ++i) {
      const int nk = raw[4 * i + 3];  // 255 - k, since the stored value is inverted
      for (int c = 0; c < 3; ++c) {
        const int v = nk - muldiv255(255 - raw[4 * i + c], nk);
        im.rgb[3 * i + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
  return im;
}

}  // namespace dsv4::vision::detail
