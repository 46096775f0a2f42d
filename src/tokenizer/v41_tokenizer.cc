// Embedded V4.1 tokenizer.json: the gzip bytes via .incbin, inflated and parsed once.
#include "tokenizer/v41_tokenizer.h"

#include <zlib.h>

#include <mutex>
#include <string>

#ifndef DSV4_V41_TOKENIZER_GZ
#error "DSV4_V41_TOKENIZER_GZ must name the gzip file (src/tokenizer/data/embed.cmake)"
#endif

// The gzip file as a read-only symbol pair [begin, end).
__asm__(
    ".section .rodata.dsv4_v41_tokenizer,\"a\",@progbits\n"
    ".global dsv4_v41_tokenizer_gz_begin\n"
    ".global dsv4_v41_tokenizer_gz_end\n"
    ".balign 16\n"
    "dsv4_v41_tokenizer_gz_begin:\n"
    ".incbin \"" DSV4_V41_TOKENIZER_GZ "\"\n"
    "dsv4_v41_tokenizer_gz_end:\n"
    ".previous\n");
extern "C" const unsigned char dsv4_v41_tokenizer_gz_begin[];
extern "C" const unsigned char dsv4_v41_tokenizer_gz_end[];

namespace dsv4 {
namespace {

// Inflates the embedded gzip member; a failure here means the build embedded a broken file.
std::string inflate_embedded() {
  const unsigned char* data = dsv4_v41_tokenizer_gz_begin;
  size_t size = static_cast<size_t>(dsv4_v41_tokenizer_gz_end - dsv4_v41_tokenizer_gz_begin);
  DSV4_CHECK(size > 18);
  // gzip trailer: ISIZE, the uncompressed size mod 2^32, little-endian.
  size_t expected = data[size - 4] | (data[size - 3] << 8) | (data[size - 2] << 16) | (size_t{data[size - 1]} << 24);
  std::string out(expected, '\0');
  z_stream zs{};
  DSV4_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK);  // 16: expect a gzip wrapper
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&zs, Z_FINISH);
  DSV4_CHECK(rc == Z_STREAM_END && zs.total_out == expected);
  inflateEnd(&zs);
  return out;
}

}  // namespace

std::string_view v41_tokenizer_json() {
  static const std::string json = inflate_embedded();
  return json;
}

StatusOr<Tokenizer> load_v41_tokenizer() {
  static const StatusOr<Tokenizer> tokenizer = [] {
    auto t = Tokenizer::from_json(v41_tokenizer_json());
    if (!t.ok()) return StatusOr<Tokenizer>(t.status().with_context("embedded V4.1 tokenizer"));
    return t;
  }();
  return tokenizer;
}

}  // namespace dsv4
