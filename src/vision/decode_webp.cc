// WebP through libwebp's animation decoder, as PIL reads every WebP file (first frame, non-premultiplied
// RGBA canvas), then alpha dropped.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "vision/codecs.h"

namespace dsv4::vision::detail {
namespace {

const char* status_name(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "user abort";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated)";
  }
  return "unknown status";
}

// The animation decoder only says "failed"; a still image's own decoder names the reason.
const char* still_failure(std::span<const uint8_t> bytes, const WebPBitstreamFeatures& features) {
  WebPDecoderConfig config;
  if (features.has_animation || !WebPInitDecoderConfig(&config)) return "bitstream error";
  config.output.colorspace = MODE_RGBA;
  const VP8StatusCode why = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  return why == VP8_STATUS_OK ? "bitstream error" : status_name(why);
}

}  // namespace

StatusOr<Image> decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (st != VP8_STATUS_OK) return error(StatusCode::invalid_argument, "corrupt or truncated WebP: libwebp: {}", status_name(st));
  // For an animation these are the canvas size, which is what the decoder allocates.
  DSV4_RETURN_IF_ERROR(check_dimensions(ImageFormat::webp, features.width, features.height, limits));

  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return error(StatusCode::internal, "libwebp: version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&data, &options);
  if (!dec) {
    return error(StatusCode::invalid_argument, "corrupt or truncated WebP: libwebp: cannot read the container ({})",
                 still_failure(bytes, features));
  }
  struct Destroy {
    WebPAnimDecoder* d;
    ~Destroy() { WebPAnimDecoderDelete(d); }
  } destroy{dec};
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec, &info)) return error(StatusCode::invalid_argument, "corrupt WebP: no canvas information");
  DSV4_RETURN_IF_ERROR(check_dimensions(ImageFormat::webp, info.canvas_width, info.canvas_height, limits));
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp)) {
    return error(StatusCode::invalid_argument, "corrupt or truncated WebP: libwebp: cannot decode the first frame ({})",
                 still_failure(bytes, features));
  }
  Image im = blank_image(static_cast<int32_t>(info.canvas_width), static_cast<int32_t>(info.canvas_height));
  const size_t n = static_cast<size_t>(im.width) * im.height;
  for (size_t i = 0; i < n; ++i) std::memcpy(&im.rgb[3 * i], rgba + 4 * i, 3);
  return im;
}

}  // namespace dsv4::vision::detail
