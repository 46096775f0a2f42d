// The byte matcher. Frame fields by kind:
//   root      phase 0 before the value (leading whitespace), 1 after it
//   object    phase 0 '{' | 1 after '{' | 2 in a key (b: bytes matched, c: candidate properties) | 3 after a key
//             | 4 after ':' | 5 after a value | 6 after ','; a: first property that may still come
//   map       phases as object (2 unused: the key is a string frame, alts[0]); one case with object
//   array     phase 0 '[' | 1 after '[' | 2 after an item | 3 after ','; a: items so far
//   string    phase 0 '"' | 1 inside | 2 after '\' | 3 inside a UTF-8 sequence (b: bytes left, c: range of the
//             next byte, lo << 8 | hi) | 4 in \uXXXX (b: hex digits left); a: code points so far
//   number    phase 0 start | 1 after '-' | 2 integer digits (a) | 3 after a leading 0 | 4 after '.' | 5 fraction
//             digits (b) | 6 after 'e' | 7 after the exponent's sign | 8 exponent digits (c)
//   literals  phase: bytes matched; a..b: the range of literals that still match
//   seq       a: next part (the last part replaces the frame)
//   raw_until a: terminator bytes matched; b, c: as string's UTF-8 tracking (phase 1 inside a sequence); ws: code
//             points so far when bounded
#include "structured/matcher.h"

#include "structured/utf8.h"

namespace dsv4::structured {
namespace {

bool is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// Whether an integer whose digits so far give magnitude `mag` (with `digits` digits, sign `negative`) can still
// end inside [lo, hi], now or after more digits (at most `max_digits` in all).
bool reachable(const Node& n, bool negative, int64_t mag, uint32_t digits, uint32_t max_digits) {
  int64_t scale = 1;
  for (uint32_t k = 0; digits + k <= max_digits; ++k) {
    const int64_t first = mag * scale, last = first + (scale - 1);
    const int64_t vlo = negative ? -last : first, vhi = negative ? -first : last;
    if (vlo <= n.hi && vhi >= n.lo) return true;
    if (scale > INT64_MAX / 10 || first > INT64_MAX / 10) break;
    scale *= 10;
  }
  return false;
}

// A bounded integer's value (b: negative, c: magnitude) lies in its range.
bool in_range(const Node& n, const Frame& f) {
  const int64_t v = f.b != 0 ? -static_cast<int64_t>(f.c) : static_cast<int64_t>(f.c);
  return v >= n.lo && v <= n.hi;
}

void set_phase(Frame& f, uint16_t phase) {
  f.phase = phase;
  f.ws = 0;
}

// The length of the longest prefix of `t` that is a suffix of t[0, matched) + byte.
uint32_t advance_match(const std::string& t, uint32_t matched, uint8_t byte) {
  if (matched < t.size() && static_cast<uint8_t>(t[matched]) == byte) return matched + 1;
  std::string seen = t.substr(0, matched);
  seen.push_back(static_cast<char>(byte));
  for (size_t len = std::min(seen.size() - 1, t.size()); len > 0; --len) {
    if (seen.compare(seen.size() - len, len, t, 0, len) == 0) return static_cast<uint32_t>(len);
  }
  return 0;
}

}  // namespace

void Matcher::start(MatchState& s) const {
  s.depth = 0;
  push(s, g_.root);
}

bool Matcher::push(MatchState& s, NodeId node) const {
  if (s.depth >= kMaxFrames || s.depth >= g_.limits.max_depth) return false;
  Frame& f = s.frames[s.depth++];
  f = Frame{};
  f.node = node;
  const Node& n = g_.nodes[static_cast<size_t>(node)];
  if (n.kind == NodeKind::literals) f.b = static_cast<uint32_t>(n.literals.size() - 1);
  return true;
}

bool Matcher::ws(Frame& f, uint8_t byte) const {
  if (!is_ws(byte) || f.ws >= g_.limits.max_whitespace) return false;
  ++f.ws;
  return true;
}

bool Matcher::starts_with(NodeId node, uint8_t byte) const {
  const Node& n = g_.nodes[static_cast<size_t>(node)];
  switch (n.kind) {
    case NodeKind::object:
    case NodeKind::map: return byte == '{';
    case NodeKind::array: return byte == '[';
    case NodeKind::string: return byte == '"';
    case NodeKind::number: return byte == '-' || is_digit(byte);
    case NodeKind::literals:
      for (const Literal& l : n.literals) {
        if (static_cast<uint8_t>(l.text[0]) == byte) return true;
      }
      return false;
    case NodeKind::any_of:
      for (NodeId a : n.alts) {
        if (starts_with(a, byte)) return true;
      }
      return false;
    case NodeKind::seq: return !n.alts.empty() && starts_with(n.alts[0], byte);
    case NodeKind::root:
    case NodeKind::raw_until: return false;
  }
  return false;
}

// The properties that may come next from `from`: every one up to and including the first required one.
uint64_t Matcher::key_candidates(const Node& n, uint32_t from) const {
  uint64_t bits = 0;
  for (size_t i = from; i < n.props.size(); ++i) {
    bits |= uint64_t{1} << i;
    if (n.props[i].required) break;
  }
  return bits;
}

bool Matcher::required_left(const Node& n, uint32_t from) const {
  for (size_t i = from; i < n.props.size(); ++i) {
    if (n.props[i].required) return true;
  }
  return false;
}

bool Matcher::step(MatchState& s, uint8_t byte) const {
  // Each pass either consumes the byte, rejects it, or pops / pushes a frame and passes the byte on; a pass that
  // passes it on never undoes the previous one's push, so the walk is bounded by the stack depth.
  for (int guard = 0; guard < 4 * kMaxFrames + 8; ++guard) {
    if (s.depth == 0) return false;
    Frame& f = s.frames[s.depth - 1];
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    switch (n.kind) {
      case NodeKind::root:
        if (f.phase != 0) return false;
        if (g_.limits.leading_whitespace && ws(f, byte)) return true;
        set_phase(f, 1);
        if (!push(s, n.child)) return false;
        continue;

      case NodeKind::any_of: {
        NodeId chosen = -1;
        for (NodeId a : n.alts) {
          if (starts_with(a, byte)) {
            chosen = a;
            break;
          }
        }
        if (chosen < 0) return false;
        --s.depth;
        if (!push(s, chosen)) return false;
        continue;
      }

      case NodeKind::seq: {
        if (n.alts.empty()) {
          --s.depth;
          continue;
        }
        const NodeId part = n.alts[f.a];
        if (f.a + 1 == n.alts.size()) {
          --s.depth;  // the last part replaces the sequence (no growth over repeated tails)
        } else {
          ++f.a;
        }
        if (!push(s, part)) return false;
        continue;
      }

      case NodeKind::object:
      case NodeKind::map: {
        // A map is an object whose keys are free strings (alts[0]) and whose values are all `child`.
        const bool free_keys = n.kind == NodeKind::map;
        switch (f.phase) {
          case 0:
            if (byte != '{') return false;
            set_phase(f, 1);
            return true;
          case 1:
          case 6:
            if (ws(f, byte)) return true;
            if (byte == '"') {
              if (free_keys) {
                set_phase(f, 3);
                if (!push(s, n.alts[0])) return false;
                continue;
              }
              const uint64_t cand = key_candidates(n, f.a);
              if (cand == 0) return false;
              set_phase(f, 2);
              f.b = 1;
              f.c = cand;
              return true;
            }
            if (byte == '}' && f.phase == 1 && (free_keys || !required_left(n, f.a))) {
              --s.depth;
              return true;
            }
            return false;
          case 2: {  // declared keys only
            uint64_t cand = 0;
            for (uint64_t bits = f.c; bits != 0; bits &= bits - 1) {
              const int i = __builtin_ctzll(bits);
              const std::string& k = n.props[static_cast<size_t>(i)].key;
              if (f.b < k.size() && static_cast<uint8_t>(k[f.b]) == byte) cand |= uint64_t{1} << i;
            }
            if (cand == 0) return false;
            ++f.b;
            f.c = cand;
            for (uint64_t bits = cand; bits != 0; bits &= bits - 1) {
              const int i = __builtin_ctzll(bits);
              if (n.props[static_cast<size_t>(i)].key.size() == f.b) {  // the closing quote: one key is whole
                set_phase(f, 3);
                f.a = static_cast<uint32_t>(i) + 1;
                f.b = static_cast<uint32_t>(i);
                f.c = 0;
                break;
              }
            }
            return true;
          }
          case 3:
            if (ws(f, byte)) return true;
            if (byte != ':') return false;
            set_phase(f, 4);
            return true;
          case 4: {
            if (ws(f, byte)) return true;
            const NodeId value = free_keys ? n.child : n.props[f.b].value;
            set_phase(f, 5);
            f.b = 0;
            if (!push(s, value)) return false;
            continue;
          }
          case 5:
            if (ws(f, byte)) return true;
            if (byte == ',' && (free_keys || key_candidates(n, f.a) != 0)) {
              set_phase(f, 6);
              return true;
            }
            if (byte == '}' && (free_keys || !required_left(n, f.a))) {
              --s.depth;
              return true;
            }
            return false;
        }
        return false;
      }

      case NodeKind::array:
        switch (f.phase) {
          case 0:
            if (byte != '[') return false;
            set_phase(f, 1);
            return true;
          case 1:
            if (ws(f, byte)) return true;
            if (byte == ']') {
              if (n.min > 0) return false;
              --s.depth;
              return true;
            }
            if (n.max == 0) return false;
            set_phase(f, 2);
            f.a = 1;
            if (!push(s, n.child)) return false;
            continue;
          case 2:
            if (ws(f, byte)) return true;
            if (byte == ',' && (n.max < 0 || f.a < n.max)) {
              set_phase(f, 3);
              return true;
            }
            if (byte == ']' && f.a >= n.min) {
              --s.depth;
              return true;
            }
            return false;
          case 3:
            if (ws(f, byte)) return true;
            set_phase(f, 2);
            if (n.max >= 0 || f.a < n.min) ++f.a;  // counted only as far as a bound needs
            if (!push(s, n.child)) return false;
            continue;
        }
        return false;

      case NodeKind::string: {
        // Code points are counted only as far as a bound needs (an unbounded string keeps one state: one mask).
        const uint32_t cap = n.max >= 0 ? static_cast<uint32_t>(n.max) : static_cast<uint32_t>(n.min);
        auto count = [&] {
          if (f.a < cap) ++f.a;
        };
        const bool room = n.max < 0 || f.a < n.max;
        switch (f.phase) {
          case 0:
            if (byte != '"') return false;
            f.phase = 1;
            return true;
          case 1:
            if (byte == '"') {
              if (f.a < n.min) return false;
              --s.depth;
              return true;
            }
            if (!room) return false;
            if (byte == '\\') {
              f.phase = 2;
              return true;
            }
            if (byte < 0x20) return false;
            if (byte < 0x80) {
              count();
              return true;
            }
            if (!utf8_lead(byte, f.b, f.c)) return false;
            count();
            f.phase = 3;
            return true;
          case 2:
            if (byte == 'u') {
              f.phase = 4;
              f.b = 4;
              return true;
            }
            if (byte == '"' || byte == '\\' || byte == '/' || byte == 'b' || byte == 'f' || byte == 'n' ||
                byte == 'r' || byte == 't') {
              count();
              f.phase = 1;
              return true;
            }
            return false;
          case 3:
            if (!utf8_cont(byte, f.b, f.c)) return false;
            if (f.b == 0) f.phase = 1;
            return true;
          case 4:
            if (!is_hex(byte)) return false;
            if (--f.b == 0) {
              count();
              f.phase = 1;
            }
            return true;
        }
        return false;
      }

      case NodeKind::number: {
        const GrammarLimits& L = g_.limits;
        if (n.bounded) {  // an integer held to [lo, hi]: b = negative, c = magnitude, a = digits
          const uint32_t max_digits = static_cast<uint32_t>(L.max_int_digits);
          if (f.phase == 0 && byte == '-') {
            if (n.lo >= 0) return false;
            f.phase = 1;
            f.b = 1;
            return true;
          }
          if ((f.phase == 0 || f.phase == 1) && is_digit(byte)) {
            const int64_t d = byte - '0';
            if (!reachable(n, f.b != 0, d, 1, d == 0 ? 1 : max_digits)) return false;
            f.phase = d == 0 ? 3 : 2;
            f.a = 1;
            f.c = static_cast<uint64_t>(d);
            return true;
          }
          if (f.phase == 2 && is_digit(byte)) {
            const int64_t m = static_cast<int64_t>(f.c) * 10 + (byte - '0');
            if (f.a >= max_digits || !reachable(n, f.b != 0, m, f.a + 1, max_digits)) return false;
            ++f.a;
            f.c = static_cast<uint64_t>(m);
            return true;
          }
          if ((f.phase != 2 && f.phase != 3) || is_digit(byte) || !in_range(n, f)) return false;
          --s.depth;  // ended: the byte belongs to what follows
          continue;
        }
        switch (f.phase) {
          case 0:
          case 1:
            if (byte == '-' && f.phase == 0) {
              f.phase = 1;
              return true;
            }
            if (byte == '0') {
              f.phase = 3;
              return true;
            }
            if (is_digit(byte)) {
              f.phase = 2;
              f.a = 1;
              return true;
            }
            return false;
          case 2:
            if (is_digit(byte) && f.a < static_cast<uint32_t>(L.max_int_digits)) {
              ++f.a;
              return true;
            }
            [[fallthrough]];
          case 3:
            if (!n.integer && byte == '.') {
              f.phase = 4;
              return true;
            }
            if (!n.integer && (byte == 'e' || byte == 'E')) {
              f.phase = 6;
              return true;
            }
            break;  // the number ended before this byte
          case 4:
            if (!is_digit(byte)) return false;
            f.phase = 5;
            f.b = 1;
            return true;
          case 5:
            if (is_digit(byte) && f.b < static_cast<uint32_t>(L.max_frac_digits)) {
              ++f.b;
              return true;
            }
            if (byte == 'e' || byte == 'E') {
              f.phase = 6;
              return true;
            }
            break;
          case 6:
            if (byte == '+' || byte == '-') {
              f.phase = 7;
              return true;
            }
            [[fallthrough]];
          case 7:
            if (!is_digit(byte)) return false;
            f.phase = 8;
            f.c = 1;
            return true;
          case 8:
            if (is_digit(byte) && f.c < static_cast<uint64_t>(L.max_exp_digits)) {
              ++f.c;
              return true;
            }
            break;
          default:
            return false;
        }
        if (is_digit(byte)) return false;  // a digit past the cap, or after a leading 0
        --s.depth;                         // ended: the byte belongs to what follows
        continue;
      }

      case NodeKind::literals: {
        const uint32_t pos = f.phase;
        uint32_t lo = UINT32_MAX, hi = 0;
        for (uint32_t i = f.a; i <= f.b; ++i) {
          const std::string& t = n.literals[i].text;
          if (t.size() > pos && static_cast<uint8_t>(t[pos]) == byte) {
            if (lo == UINT32_MAX) lo = i;
            hi = i;
          }
        }
        if (lo == UINT32_MAX) {
          // A literal that is whole here ends before this byte (it is a prefix of the others in the range).
          const Literal& whole = n.literals[f.a];
          if (whole.text.size() != pos) return false;
          --s.depth;
          if (whole.next >= 0 && !push(s, whole.next)) return false;
          continue;
        }
        f.phase = static_cast<uint16_t>(pos + 1);
        f.a = lo;
        f.b = hi;
        if (lo == hi && n.literals[lo].text.size() == pos + 1u) {
          const NodeId next = n.literals[lo].next;
          --s.depth;
          if (next >= 0 && !push(s, next)) return false;
        }
        return true;
      }

      case NodeKind::raw_until: {
        // With a bound (max >= 0), `ws` counts code points; once it is reached only the terminator may follow, byte
        // for byte (bit 32 of c marks a UTF-8 sequence that belongs to the terminator, not to the text).
        constexpr uint64_t kClosing = uint64_t{1} << 32;
        const bool closing = f.phase == 0 ? n.max >= 0 && f.ws >= n.max : (f.c & kClosing) != 0;
        if (closing && byte != static_cast<uint8_t>(n.terminator[f.a])) return false;
        if (f.phase == 1) {  // inside a UTF-8 sequence
          uint64_t range = f.c & 0xFFFF;
          if (!utf8_cont(byte, f.b, range)) return false;
          f.c = f.b > 0 ? range | (f.c & kClosing) : 0;
          if (f.b == 0) f.phase = 0;
        } else if (byte < 0x80) {
          if (byte < 0x20 && byte != '\n' && byte != '\t' && byte != '\r') return false;
          if (n.max >= 0 && !closing) ++f.ws;
        } else {
          if (!utf8_lead(byte, f.b, f.c)) return false;
          if (closing) f.c |= kClosing;
          if (n.max >= 0 && !closing) ++f.ws;
          f.phase = 1;
        }
        f.a = advance_match(n.terminator, f.a, byte);
        if (f.a == n.terminator.size()) --s.depth;
        return true;
      }
    }
    return false;
  }
  return false;
}

bool Matcher::feed(MatchState& s, std::string_view bytes) const {
  MatchState t;
  s.copy_to(t);
  for (char c : bytes) {
    if (!step(t, static_cast<uint8_t>(c))) return false;
  }
  t.copy_to(s);
  return true;
}

bool Matcher::may_end(const MatchState& state) const {
  MatchState s;
  state.copy_to(s);
  while (s.depth > 0) {
    const Frame& f = s.frames[s.depth - 1];
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    switch (n.kind) {
      case NodeKind::root: return f.phase == 1;
      case NodeKind::number:
        if (f.phase != 2 && f.phase != 3 && f.phase != 5 && f.phase != 8) return false;
        if (n.bounded && !in_range(n, f)) return false;
        --s.depth;
        break;
      case NodeKind::literals:
        if (n.literals[f.a].text.size() != f.phase || n.literals[f.a].next >= 0) return false;
        --s.depth;
        break;
      case NodeKind::seq:
        if (!n.alts.empty()) return false;
        --s.depth;
        break;
      case NodeKind::raw_until:
        return n.may_end && f.phase == 0;  // the whole output may end in this text (not inside a UTF-8 sequence)
      default: return false;
    }
  }
  return false;
}

}  // namespace dsv4::structured
