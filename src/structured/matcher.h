// Walks a Grammar byte by byte with an explicit stack of frames: is this byte allowed here, and may the output end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "structured/grammar.h"

namespace dsv4::structured {

// One open construct. Fields a, b, c mean what the node's kind says (matcher.cc); unused ones stay 0, so the
// bytes of a stack are a canonical key of the position.
struct Frame {
  NodeId node = -1;
  uint16_t phase = 0;
  uint16_t ws = 0;  // whitespace bytes in the current gap
  uint32_t a = 0;
  uint32_t b = 0;
  uint64_t c = 0;
};
static_assert(sizeof(Frame) == 24, "Frame bytes are a cache key: no padding");

constexpr int kMaxFrames = 64;

struct MatchState {
  int32_t depth = 0;
  Frame frames[kMaxFrames];

  void copy_to(MatchState& dst) const {
    dst.depth = depth;
    std::memcpy(dst.frames, frames, static_cast<size_t>(depth) * sizeof(Frame));
  }
  // The stack's bytes: equal keys, equal futures.
  std::string key() const {
    return std::string(reinterpret_cast<const char*>(frames), static_cast<size_t>(depth) * sizeof(Frame));
  }
};

class Matcher {
 public:
  explicit Matcher(const Grammar& grammar) : g_(grammar) {}

  // The position before any output.
  void start(MatchState& s) const;
  // Moves past one byte; false when the byte is not allowed (the state is then unspecified: step a copy).
  bool step(MatchState& s, uint8_t byte) const;
  // Steps every byte of `bytes` on a copy; true (and `s` moved) when all are allowed.
  bool feed(MatchState& s, std::string_view bytes) const;
  // The output so far is complete: nothing more is needed.
  bool may_end(const MatchState& s) const;

 private:
  bool push(MatchState& s, NodeId node) const;
  bool starts_with(NodeId node, uint8_t byte) const;  // can `node` begin with `byte`
  bool ws(Frame& f, uint8_t byte) const;              // a whitespace byte within the gap limit
  uint64_t key_candidates(const Node& n, uint32_t from) const;
  bool required_left(const Node& n, uint32_t from) const;

  const Grammar& g_;
};

}  // namespace dsv4::structured
