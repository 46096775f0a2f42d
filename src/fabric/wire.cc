// ByteReader and the frame kind names (see wire.h).
#include "fabric/wire.h"

#include <bit>

#include "lanes/sampling.h"

namespace dsv4::fabric {

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::hello: return "hello";
    case FrameKind::welcome: return "welcome";
    case FrameKind::refuse: return "refuse";
    case FrameKind::heartbeat: return "heartbeat";
    case FrameKind::fail: return "fail";
    case FrameKind::stop: return "stop";
    case FrameKind::stopped: return "stopped";
    case FrameKind::agree: return "agree";
    case FrameKind::agreed: return "agreed";
    case FrameKind::plan: return "plan";
    case FrameKind::reply: return "reply";
    case FrameKind::data: return "data";
  }
  return "unknown";
}

bool ByteReader::take(void* out, size_t n, const char* what) {
  if (!status_.ok()) return false;
  if (in_.size() - pos_ < n) {
    status_ = error(StatusCode::data_loss, "truncated at '{}': needs {} bytes at offset {}, {} left", what, n, pos_,
                    in_.size() - pos_);
    return false;
  }
  std::memcpy(out, in_.data() + pos_, n);
  pos_ += n;
  return true;
}

uint8_t ByteReader::u8(const char* what) {
  uint8_t v = 0;
  return take(&v, 1, what) ? v : 0;
}

uint32_t ByteReader::u32(const char* what) {
  uint32_t v = 0;
  return take(&v, 4, what) ? v : 0;
}

uint64_t ByteReader::u64(const char* what) {
  uint64_t v = 0;
  return take(&v, 8, what) ? v : 0;
}

float ByteReader::f32(const char* what) {
  const uint32_t bits = u32(what);
  return std::bit_cast<float>(bits);
}

uint64_t ByteReader::count(const char* what, size_t item_bytes) {
  const uint64_t n = u64(what);
  if (!status_.ok()) return 0;
  if (item_bytes > 0 && n > (in_.size() - pos_) / item_bytes) {
    status_ = error(StatusCode::data_loss, "'{}' claims {} items of {} bytes; only {} bytes remain", what, n,
                    item_bytes, in_.size() - pos_);
    return 0;
  }
  return n;
}

std::string ByteReader::str(const char* what) {
  const uint64_t n = count(what, 1);
  std::string s(n, '\0');
  if (n > 0) take(s.data(), n, what);
  return status_.ok() ? s : std::string();
}

std::vector<uint8_t> ByteReader::bytes(const char* what) {
  const uint64_t n = count(what, 1);
  std::vector<uint8_t> b(n);
  if (n > 0) take(b.data(), n, what);
  return status_.ok() ? b : std::vector<uint8_t>();
}

std::vector<int32_t> ByteReader::i32s(const char* what) {
  const uint64_t n = count(what, 4);
  std::vector<int32_t> v;
  v.reserve(n);
  for (uint64_t i = 0; i < n && status_.ok(); ++i) v.push_back(i32(what));
  return status_.ok() ? v : std::vector<int32_t>();
}

void ByteReader::fail(std::string message) {
  if (status_.ok()) status_ = Status(StatusCode::data_loss, std::move(message));
}

Status ByteReader::finish(const char* message_kind) const {
  if (!status_.ok()) return status_.with_context(fmt::format("{} message", message_kind));
  if (pos_ != in_.size())
    return error(StatusCode::data_loss, "{} message: {} trailing bytes after offset {}", message_kind,
                 in_.size() - pos_, pos_);
  return ok_status();
}

uint64_t digest_bytes(std::span<const uint8_t> bytes, uint64_t seed) {
  uint64_t h = lanes::splitmix64_mix(seed ^ (bytes.size() * lanes::kGoldenGamma));
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = lanes::splitmix64_mix(h ^ w) + lanes::kGoldenGamma;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return lanes::splitmix64_mix(h ^ tail ^ (uint64_t{bytes.size() - i} << 56));
}

}  // namespace dsv4::fabric
