// Bytes on the fabric's control channel: frame header, kinds, and bounds-checked little-endian encoding.
//
// A frame is a 16-byte header {u32 magic "DSVF", u16 kind, u16 reserved, u64 payload length} and the payload.
// Payloads are written with ByteWriter and read with ByteReader; a reader never reads past its buffer and
// reports the first problem (truncated, oversized count, bad tag) as data_loss naming the field.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4::fabric {

inline constexpr uint32_t kFrameMagic = 0x46565344u;   // "DSVF" little-endian
inline constexpr uint32_t kProtocolVersion = 1;        // bumped whenever a frame or payload changes
inline constexpr uint64_t kMaxPayload = uint64_t{1} << 32;  // 4 GiB: anything larger is garbage
inline constexpr size_t kHeaderBytes = 16;

enum class FrameKind : uint16_t {
  hello = 1,      // follower -> 0: {u32 protocol, u32 world, u32 rank}
  welcome = 2,    // 0 -> follower: empty (accepted)
  refuse = 3,     // 0 -> follower at bootstrap: {u32 exit code, str reason}
  heartbeat = 4,  // both ways while idle: empty
  fail = 5,       // any -> any: {u32 exit code, str reason}; the receiver ends with that code
  stop = 6,       // 0 -> follower: {u64 plans, u64 ops} clean stop after the last plan
  stopped = 7,    // follower -> 0: {u64 plans, u64 ops, u64 digest} acknowledgement of stop
  agree = 8,      // follower -> 0: identity (agreement.h)
  agreed = 9,     // 0 -> follower: empty (all identities match)
  plan = 10,      // 0 -> follower: one plan (plan.h)
  reply = 11,     // follower -> 0: the plan's outcome (plan.h)
  data = 12,      // collectives: {u64 sequence, bytes}
};

const char* frame_kind_name(FrameKind kind);

struct Frame {
  FrameKind kind = FrameKind::heartbeat;
  std::vector<uint8_t> payload;
};

// Appends little-endian values to a byte vector.
class ByteWriter {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u32(bits);
  }
  void str(std::string_view s) {
    u64(s.size());
    put(s.data(), s.size());
  }
  void bytes(std::span<const uint8_t> b) {
    u64(b.size());
    put(b.data(), b.size());
  }
  void i32s(std::span<const int32_t> v) {
    u64(v.size());
    for (int32_t x : v) i32(x);
  }
  std::vector<uint8_t>& data() { return out_; }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(const void* p, size_t n) {
    static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t> out_;
};

// Reads what ByteWriter wrote. After the first failure every read returns zero/empty and status() names
// the field that failed; callers check status() once at the end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  uint8_t u8(const char* what);
  uint32_t u32(const char* what);
  uint64_t u64(const char* what);
  int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
  float f32(const char* what);
  std::string str(const char* what);
  std::vector<uint8_t> bytes(const char* what);
  std::vector<int32_t> i32s(const char* what);
  // A count of items each at least `item_bytes` long: refused when the rest of the buffer cannot hold them.
  uint64_t count(const char* what, size_t item_bytes);
  // Fails the reader (e.g. an unknown tag) naming `what`.
  void fail(std::string message);

  bool done() const { return pos_ == in_.size(); }
  // ok, or data_loss naming the first field that failed; also refuses trailing bytes.
  Status finish(const char* message_kind) const;
  const Status& status() const { return status_; }

 private:
  bool take(void* out, size_t n, const char* what);
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  Status status_;
};

// A 64-bit digest of bytes (SplitMix64 fold over 8-byte words, length included): identities and result
// checks, not security.
uint64_t digest_bytes(std::span<const uint8_t> bytes, uint64_t seed = 0);

}  // namespace dsv4::fabric
