// NpzWriter: .npy payloads in a stored zip, local headers before each, the central directory at the end.
#include "core/npz.h"

#include <array>
#include <cstring>

namespace dsv4 {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> x{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      x[i] = c;
    }
    return x;
  }();
  return t;
}

template <typename T>
std::vector<uint8_t> npy(const char* descr, std::span<const int64_t> shape, std::span<const T> data) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (!dims.empty()) dims.resize(dims.size() - (shape.size() > 1 ? 2 : 1));  // "(3,)" for one dimension, "(3, 4)"
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::vector<uint8_t> out(10 + h.size() + data.size_bytes());
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = static_cast<uint8_t>(h.size() & 0xFF);
  out[9] = static_cast<uint8_t>(h.size() >> 8);
  std::memcpy(out.data() + 10, h.data(), h.size());
  if (!data.empty()) std::memcpy(out.data() + 10 + h.size(), data.data(), data.size_bytes());
  return out;
}

void put16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

uint32_t crc32_ieee(std::span<const uint8_t> bytes, uint32_t crc) {
  const auto& t = crc_table();
  crc = ~crc;
  for (uint8_t b : bytes) crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::vector<uint8_t> npy_f32(std::span<const int64_t> shape, std::span<const float> data) { return npy("<f4", shape, data); }
std::vector<uint8_t> npy_f64(std::span<const int64_t> shape, std::span<const double> data) {
  return npy("<f8", shape, data);
}
std::vector<uint8_t> npy_i32(std::span<const int64_t> shape, std::span<const int32_t> data) {
  return npy("<i4", shape, data);
}

NpzWriter::~NpzWriter() {
  if (f_) std::fclose(f_);
}

Status NpzWriter::open(const std::string& path) {
  path_ = path;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) return error(StatusCode::unavailable, "{}: cannot create", path);
  return ok_status();
}

Status NpzWriter::add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> data) {
  if (count(shape) != static_cast<int64_t>(data.size()))
    return error(StatusCode::invalid_argument, "{}: {} values for its shape", name, data.size());
  return add(name, npy_f32(shape, data));
}

Status NpzWriter::add_f64(const std::string& name, std::vector<int64_t> shape, std::span<const double> data) {
  if (count(shape) != static_cast<int64_t>(data.size()))
    return error(StatusCode::invalid_argument, "{}: {} values for its shape", name, data.size());
  return add(name, npy_f64(shape, data));
}

Status NpzWriter::add_i32(const std::string& name, std::vector<int64_t> shape, std::span<const int32_t> data) {
  if (count(shape) != static_cast<int64_t>(data.size()))
    return error(StatusCode::invalid_argument, "{}: {} values for its shape", name, data.size());
  return add(name, npy_i32(shape, data));
}

Status NpzWriter::add(const std::string& name, const std::vector<uint8_t>& npy) {
  if (!f_) return error(StatusCode::internal, "{}: the archive is not open", path_);
  const std::string file = name + ".npy";
  if (offset_ + 30 + file.size() + npy.size() > 0xFFFFFFFFull)
    return error(StatusCode::resource_exhausted, "{}: array '{}' would take the archive past 4 GiB", path_, name);
  Entry e{file, crc32_ieee(npy), static_cast<uint32_t>(npy.size()), static_cast<uint32_t>(offset_)};
  std::vector<uint8_t> h;
  put32(h, 0x04034b50);  // local file header
  put16(h, 20);          // version needed
  put16(h, 0);           // flags
  put16(h, 0);           // stored
  put16(h, 0), put16(h, 0x21);  // time, date (1980-01-01)
  put32(h, e.crc);
  put32(h, e.size), put32(h, e.size);
  put16(h, static_cast<uint32_t>(file.size())), put16(h, 0);
  h.insert(h.end(), file.begin(), file.end());
  if (std::fwrite(h.data(), 1, h.size(), f_) != h.size() || std::fwrite(npy.data(), 1, npy.size(), f_) != npy.size())
    return error(StatusCode::unavailable, "{}: write failed", path_);
  offset_ += h.size() + npy.size();
  entries_.push_back(std::move(e));
  return ok_status();
}

Status NpzWriter::finish() {
  if (!f_) return error(StatusCode::internal, "{}: the archive is not open", path_);
  std::vector<uint8_t> cd;
  for (const Entry& e : entries_) {
    put32(cd, 0x02014b50);  // central directory header
    put16(cd, 20), put16(cd, 20), put16(cd, 0), put16(cd, 0), put16(cd, 0), put16(cd, 0x21);
    put32(cd, e.crc), put32(cd, e.size), put32(cd, e.size);
    put16(cd, static_cast<uint32_t>(e.name.size())), put16(cd, 0), put16(cd, 0), put16(cd, 0), put16(cd, 0);
    put32(cd, 0), put32(cd, e.offset);
    cd.insert(cd.end(), e.name.begin(), e.name.end());
  }
  if (offset_ + cd.size() > 0xFFFFFFFFull || entries_.size() > 0xFFFF)
    return error(StatusCode::resource_exhausted, "{}: the archive would pass 4 GiB or 65,535 arrays", path_);
  const auto cd_size = static_cast<uint32_t>(cd.size());
  put32(cd, 0x06054b50);  // end of central directory
  put16(cd, 0), put16(cd, 0);
  put16(cd, static_cast<uint32_t>(entries_.size())), put16(cd, static_cast<uint32_t>(entries_.size()));
  put32(cd, cd_size);
  put32(cd, static_cast<uint32_t>(offset_));
  put16(cd, 0);
  const bool ok = std::fwrite(cd.data(), 1, cd.size(), f_) == cd.size();
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) return error(StatusCode::unavailable, "{}: write failed", path_);
  return ok_status();
}

}  // namespace dsv4
