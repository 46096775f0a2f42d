// Reading the .npy / stored .npz files `dsv4 run` writes (NumPy's format 1.0, little-endian, C order), for tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace dsv4::npz_testing {

inline uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t(p[3]) << 24); }
inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

struct Array {
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian elements
};

// The shape of a .npy header "{'descr': ..., 'shape': (a, b, c), }".
inline std::vector<int64_t> npy_shape(const std::string& h) {
  std::vector<int64_t> s;
  const size_t a = h.find("'shape': (") + 10, b = h.find(')', a);
  std::string dims = h.substr(a, b - a);
  for (size_t i = 0; i < dims.size();) {
    size_t j = dims.find(',', i);
    if (j == std::string::npos) j = dims.size();
    const std::string d = dims.substr(i, j - i);
    if (d.find_first_not_of(' ') != std::string::npos) s.push_back(std::stoll(d));
    i = j + 1;
  }
  return s;
}

inline Array npy_array(const uint8_t* p, size_t n) {
  const size_t hl = le16(p + 8);
  return {npy_shape(std::string(reinterpret_cast<const char*>(p) + 10, hl)),
          std::vector<uint8_t>(p + 10 + hl, p + n)};
}

// Every array of a stored .npz, by name (without ".npy").
inline std::map<std::string, Array> read_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> z((std::istreambuf_iterator<char>(in)), {});
  std::map<std::string, Array> out;
  if (z.size() < 22) return out;
  const uint8_t* eocd = z.data() + z.size() - 22;
  const uint8_t* p = z.data() + le32(eocd + 16);
  for (int i = 0; i < le16(eocd + 10); ++i) {
    const uint32_t size = le32(p + 20), off = le32(p + 42);
    const uint16_t nl = le16(p + 28);
    std::string name(reinterpret_cast<const char*>(p + 46), nl);
    const uint8_t* local = z.data() + off;
    out[name.substr(0, name.size() - 4)] = npy_array(local + 30 + le16(local + 26) + le16(local + 28), size);
    p += 46 + nl;
  }
  return out;
}

inline std::vector<float> floats_of(const Array& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

inline std::vector<int32_t> ints_of(const Array& a) {
  std::vector<int32_t> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

}  // namespace dsv4::npz_testing
