// A byte-level grammar for constrained decoding: JSON values held to a schema, literal markup and free text, as a
// graph of nodes that the matcher (matcher.h) walks with an explicit stack.
//
// Every language here is deterministic on bytes: at each point one frame decides what a byte means (anyOf's
// alternatives must start with different bytes; literal sets are matched as a range of sorted texts), so a position
// in the output is one stack, and a token mask is a function of that stack alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::structured {

using NodeId = int32_t;

enum class NodeKind : uint8_t {
  root,       // child: the whole output; leading whitespace allowed, then only the end
  object,     // JSON object with declared properties, written in their declared order (optional ones may be left out)
  map,        // JSON object with free keys (JSON strings) and `child` values
  array,      // JSON array of `child` items, min..max of them
  string,     // JSON string of min..max code points
  number,     // JSON number (`integer`: no fraction or exponent), digit counts capped so it always ends
  literals,   // one of `literals` (sorted, distinct), each then continuing with its `next` node (-1: none)
  any_of,     // one of `alts`, chosen by the first byte (their first bytes never overlap)
  seq,        // `alts` in order
  raw_until,  // free UTF-8 text up to and including `terminator` (which the text itself cannot contain); with
              // `may_end` the output may also end inside the text
};

struct Property {
  std::string key;  // the key as written, quotes and escapes included: "\"name\""
  NodeId value = -1;
  bool required = false;
};

struct Literal {
  std::string text;
  NodeId next = -1;
  bool operator<(const Literal& o) const { return text < o.text; }
};

struct Node {
  NodeKind kind = NodeKind::root;
  NodeId child = -1;               // root, map (values), array (items)
  int64_t min = 0, max = -1;       // array items / string code points (raw_until: max only); max -1 = unbounded
  bool integer = false;            // number
  bool bounded = false;            // number (integer only): the value lies in [lo, hi]
  int64_t lo = 0, hi = 0;
  std::vector<Property> props;     // object
  std::vector<Literal> literals;   // literals, sorted by text
  std::vector<NodeId> alts;        // any_of alternatives / seq parts
  std::string terminator;          // raw_until
  bool may_end = false;            // raw_until
};

// Limits that keep every output finite and every state small.
struct GrammarLimits {
  int32_t max_depth = 48;        // stack frames at once (nesting deeper than this cannot be written)
  int32_t max_whitespace = 12;   // whitespace bytes in one gap between JSON tokens (indenting to depth 5 by two)
  int32_t max_int_digits = 16;   // digits before a number's fraction
  int32_t max_frac_digits = 16;  // digits of the fraction
  bool leading_whitespace = true;  // whitespace before the root's value (JSON); off for markup that starts at once
  int32_t max_exp_digits = 2;    // digits of the exponent (every number stays a finite double)
};

struct Grammar {
  std::vector<Node> nodes;
  NodeId root = -1;  // a root node
  GrammarLimits limits;

  NodeId add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<NodeId>(nodes.size() - 1);
  }
};

// Builders for the common nodes.
NodeId add_string(Grammar& g, int64_t min = 0, int64_t max = -1);
NodeId add_number(Grammar& g, bool integer);
NodeId add_bounded_integer(Grammar& g, int64_t lo, int64_t hi);
NodeId add_literals(Grammar& g, std::vector<Literal> literals);  // sorts them
// Any JSON value (objects with free keys, arrays of any length).
NodeId add_any_value(Grammar& g);
// A root over `child`.
NodeId add_root(Grammar& g, NodeId child);

}  // namespace dsv4::structured
