// Test helpers for safetensors files: scratch directories and hand-assembled raw files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace dsv4::testing {

// A fresh directory under TMPDIR, removed with its contents at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dsv4-st-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The 8-byte little-endian length field followed by `header` and `data`, built by hand from the
// format's definition (formats.md §4), independent of the writer under test.
inline std::vector<uint8_t> raw_safetensors(const std::string& header, const std::vector<uint8_t>& data = {},
                                            uint64_t length_field = UINT64_MAX) {
  uint64_t n = length_field == UINT64_MAX ? header.size() : length_field;
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Deterministic bytes: a 64-bit LCG (Knuth MMIX constants), independent of anything under test.
inline std::vector<uint8_t> pattern_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(s >> 56);
  }
  return out;
}

}  // namespace dsv4::testing
