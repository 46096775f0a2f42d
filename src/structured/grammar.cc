// Builders for the common grammar nodes.
#include "structured/grammar.h"

#include <algorithm>

namespace dsv4::structured {

NodeId add_string(Grammar& g, int64_t min, int64_t max) {
  Node n;
  n.kind = NodeKind::string;
  n.min = min;
  n.max = max;
  return g.add(std::move(n));
}

NodeId add_number(Grammar& g, bool integer) {
  Node n;
  n.kind = NodeKind::number;
  n.integer = integer;
  return g.add(std::move(n));
}

NodeId add_bounded_integer(Grammar& g, int64_t lo, int64_t hi) {
  Node n;
  n.kind = NodeKind::number;
  n.integer = true;
  n.bounded = true;
  n.lo = lo;
  n.hi = hi;
  return g.add(std::move(n));
}

NodeId add_literals(Grammar& g, std::vector<Literal> literals) {
  Node n;
  n.kind = NodeKind::literals;
  std::sort(literals.begin(), literals.end());
  n.literals = std::move(literals);
  return g.add(std::move(n));
}

NodeId add_any_value(Grammar& g) {
  Node any;
  any.kind = NodeKind::any_of;
  const NodeId id = g.add(std::move(any));
  Node map;
  map.kind = NodeKind::map;
  map.child = id;
  map.alts = {add_string(g)};
  const NodeId m = g.add(std::move(map));
  Node arr;
  arr.kind = NodeKind::array;
  arr.child = id;
  const NodeId a = g.add(std::move(arr));
  const NodeId s = add_string(g);
  const NodeId num = add_number(g, false);
  const NodeId lit = add_literals(g, {{"true"}, {"false"}, {"null"}});
  g.nodes[static_cast<size_t>(id)].alts = {m, a, s, num, lit};
  return id;
}

NodeId add_root(Grammar& g, NodeId child) {
  Node r;
  r.kind = NodeKind::root;
  r.child = child;
  g.root = g.add(std::move(r));
  return g.root;
}

}  // namespace dsv4::structured
