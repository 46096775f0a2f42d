// .npz archives: NumPy's zip of .npy arrays (stored, not compressed), written array by array so only one array
// is in memory at a time; numpy.load reads them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsv4 {

// CRC-32 (IEEE 802.3, reflected, as zip stores it) of `bytes`, continuing from `crc` (0 to start).
uint32_t crc32_ieee(std::span<const uint8_t> bytes, uint32_t crc = 0);

// One .npy file (format 1.0, little-endian, C order) of a float32, float64 or int32 array.
std::vector<uint8_t> npy_f32(std::span<const int64_t> shape, std::span<const float> data);
std::vector<uint8_t> npy_f64(std::span<const int64_t> shape, std::span<const double> data);
std::vector<uint8_t> npy_i32(std::span<const int64_t> shape, std::span<const int32_t> data);

class NpzWriter {
 public:
  NpzWriter() = default;
  ~NpzWriter();
  NpzWriter(const NpzWriter&) = delete;
  NpzWriter& operator=(const NpzWriter&) = delete;

  // Creates (truncates) `path`.
  Status open(const std::string& path);
  // Appends `name`.npy; element counts must match the shape.
  Status add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> data);
  Status add_f64(const std::string& name, std::vector<int64_t> shape, std::span<const double> data);
  Status add_i32(const std::string& name, std::vector<int64_t> shape, std::span<const int32_t> data);
  // Writes the zip's central directory and closes the file. An archive past 4 GiB (classic zip's limit) is
  // refused by add, naming the array.
  Status finish();

 private:
  Status add(const std::string& name, const std::vector<uint8_t>& npy);
  struct Entry {
    std::string name;
    uint32_t crc = 0, size = 0, offset = 0;
  };
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<Entry> entries_;
  uint64_t offset_ = 0;
};

}  // namespace dsv4
