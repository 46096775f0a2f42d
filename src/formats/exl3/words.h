// Words: an EXL3 trellis's 16-bit words as stored, held in memory or borrowed from a mapped file.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace dsv4::exl3 {

// Borrowed words may sit at an odd address (EXL3 packs have odd data offsets): every read goes through
// memcpy. Borrowed bytes must outlive every copy of the Words (a model keeps its store alive); held words
// are shared between copies and never change.
class Words {
 public:
  Words() = default;
  Words(std::vector<uint16_t> held)  // NOLINT(google-explicit-constructor): encoders hand their vector over
      : held_(std::make_shared<const std::vector<uint16_t>>(std::move(held))),
        bytes_(reinterpret_cast<const uint8_t*>(held_->data())),
        n_(static_cast<int64_t>(held_->size())) {}
  static Words borrow(const void* bytes, int64_t n_words) {
    Words w;
    w.bytes_ = static_cast<const uint8_t*>(bytes);
    w.n_ = n_words;
    return w;
  }

  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t nbytes() const { return 2 * n_; }
  const uint8_t* bytes() const { return bytes_; }
  bool borrowed() const { return !held_ && bytes_; }
  uint16_t operator[](int64_t i) const {
    uint16_t v;
    std::memcpy(&v, bytes_ + 2 * i, 2);
    return v;
  }
  // Words [i, i + n) into `out`.
  void copy(int64_t i, int64_t n, uint16_t* out) const { std::memcpy(out, bytes_ + 2 * i, static_cast<size_t>(2 * n)); }
  std::vector<uint16_t> to_vector() const {
    std::vector<uint16_t> v(static_cast<size_t>(n_));
    if (n_) copy(0, n_, v.data());
    return v;
  }
  bool operator==(const Words& o) const {
    return n_ == o.n_ && (n_ == 0 || std::memcmp(bytes_, o.bytes_, static_cast<size_t>(2 * n_)) == 0);
  }

 private:
  std::shared_ptr<const std::vector<uint16_t>> held_;
  const uint8_t* bytes_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace dsv4::exl3
