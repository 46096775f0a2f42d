// GIF through giflib, first frame only, placed the way PIL 9.4 places it: the canvas is the logical screen
// grown to hold the frame, pre-filled with the frame's transparent index (index 0 without one), and
// indices looked up in the local palette, else the global one, else read as grey.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "vision/codecs.h"

namespace dsv4::vision::detail {
namespace {

struct Source {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
};

int on_read(GifFileType* gif, GifByteType* out, int n) {
  auto* s = static_cast<Source*>(gif->UserData);
  const size_t take = std::min(static_cast<size_t>(n), s->bytes.size() - s->pos);
  std::memcpy(out, s->bytes.data() + s->pos, take);
  s->pos += take;
  return static_cast<int>(take);
}

Status gif_error(const char* what, int code) {
  const char* why = GifErrorString(code);
  return error(StatusCode::invalid_argument, "corrupt or truncated GIF: giflib: {}: {}", what, why ? why : "unknown error");
}

// Rows of an interlaced frame arrive in four passes: every 8th row from 0, every 8th from 4, every 4th
// from 2, every 2nd from 1.
std::vector<int> row_order(int height, bool interlaced) {
  std::vector<int> order;
  order.reserve(height);
  if (!interlaced) {
    for (int y = 0; y < height; ++y) order.push_back(y);
    return order;
  }
  const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
  for (int p = 0; p < 4; ++p)
    for (int y = start[p]; y < height; y += step[p]) order.push_back(y);
  return order;
}

}  // namespace

StatusOr<Image> decode_gif(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  Source src{bytes};
  int err = 0;
  GifFileType* gif = DGifOpen(&src, on_read, &err);
  if (!gif) return gif_error("header", err);
  struct Close {
    GifFileType* g;
    ~Close() { DGifCloseFile(g, nullptr); }
  } close{gif};

  int transparent = -1;  // from a graphic control extension before the first image
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return gif_error("record", gif->Error);
    if (type == TERMINATE_RECORD_TYPE) return error(StatusCode::invalid_argument, "GIF has no image");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return gif_error("extension", gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && block && block[0] >= 4) {
        transparent = (block[1] & 1) ? block[4] : -1;  // the last one before the image wins
      }
      while (block) {
        if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return gif_error("extension", gif->Error);
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) return gif_error("image descriptor", gif->Error);
    const GifImageDesc& d = gif->Image;
    const int64_t x1 = int64_t{d.Left} + d.Width, y1 = int64_t{d.Top} + d.Height;
    const int64_t w = std::max<int64_t>(gif->SWidth, x1), h = std::max<int64_t>(gif->SHeight, y1);
    DSV4_RETURN_IF_ERROR(check_dimensions(ImageFormat::gif, w, h, limits));

    std::vector<uint8_t> index(static_cast<size_t>(w) * h, static_cast<uint8_t>(transparent >= 0 ? transparent : 0));
    std::vector<GifPixelType> line(std::max(d.Width, 1));
    for (int y : row_order(d.Height, d.Interlace)) {
      if (DGifGetLine(gif, line.data(), d.Width) == GIF_ERROR) return gif_error("image data", gif->Error);
      std::memcpy(&index[static_cast<size_t>(d.Top + y) * w + d.Left], line.data(), d.Width);
    }

    const ColorMapObject* map = d.ColorMap ? d.ColorMap : gif->SColorMap;
    Image im = blank_image(static_cast<int32_t>(w), static_cast<int32_t>(h));
    for (size_t i = 0; i < index.size(); ++i) {
      const int k = index[i];
      uint8_t* out = &im.rgb[3 * i];
      if (map && k < map->ColorCount) {
        out[0] = map->Colors[k].Red, out[1] = map->Colors[k].Green, out[2] = map->Colors[k].Blue;
      } else {  // no palette, or an index past it: PIL's palette starts as the grey ramp
        out[0] = out[1] = out[2] = static_cast<uint8_t>(k);
      }
    }
    return im;
  }
}

}  // namespace dsv4::vision::detail
