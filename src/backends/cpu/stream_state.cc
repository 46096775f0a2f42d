// Stream state allocation, rollback and snapshot bytes (see stream_state.h).
#include "backends/cpu/stream_state.h"

#include <algorithm>
#include <cstring>

namespace dsv4::cpu {

StreamState new_stream_state(const StateGeometry& g) {
  StreamState s;
  s.layers.resize(g.layers.size());
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const family::LayerStateShape& shape = g.layers[l];
    s.layers[l].window.assign(g.ring_capacity * g.window_row, 0);
    if (shape.proj_kv.present()) {
      s.layers[l].comp_kv.assign(shape.proj_kv.capacity * shape.proj_kv.width, 0.0);
      s.layers[l].comp_gate.assign(shape.proj_gate.capacity * shape.proj_gate.width, 0.0);
    }
    if (shape.idx_proj_kv.present()) {
      s.layers[l].idx_comp_kv.assign(shape.idx_proj_kv.capacity * shape.idx_proj_kv.width, 0.0);
      s.layers[l].idx_comp_gate.assign(shape.idx_proj_gate.capacity * shape.idx_proj_gate.width, 0.0);
    }
  }
  s.dspark_rings.assign(g.dspark_stages, std::vector<uint8_t>(g.ring_capacity * g.window_row, 0));
  return s;
}

void truncate_state(const StateGeometry& g, StreamState& s, int64_t length) {
  s.length = length;
  s.history.resize(length);
  for (size_t l = 0; l < g.layers.size(); ++l) {
    if (!g.layers[l].kv_source) continue;
    const size_t rows = static_cast<size_t>(length / g.layers[l].ratio);
    s.layers[l].compressed.resize(std::min(s.layers[l].compressed.size(), rows * g.compressed_row));
    // V4 ratio > 4 layers keep no index keys: shrink only.
    s.layers[l].index_keys.resize(std::min(s.layers[l].index_keys.size(), rows * g.index_row));
  }
}

namespace {
constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'C', 'P', 'U', '2'};
constexpr char kBoundedMagic[8] = {'D', 'S', 'V', '4', 'C', 'P', 'B', '1'};  // split snapshots' bounded part

template <typename T>
void put(std::vector<uint8_t>& out, const std::vector<T>& v) {
  const uint64_t n = v.size();
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&n);
  out.insert(out.end(), p, p + 8);
  const uint8_t* q = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), q, q + n * sizeof(T));
}

struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  bool ok = true;
  template <typename T>
  void get(std::vector<T>& v) {
    uint64_t n = 0;
    if (at + 8 > in.size()) { ok = false; return; }
    std::memcpy(&n, &in[at], 8);
    at += 8;
    if (n > (in.size() - at) / sizeof(T)) { ok = false; return; }
    v.resize(n);
    std::memcpy(v.data(), &in[at], n * sizeof(T));
    at += n * sizeof(T);
  }
};

// Whole-state bytes.
std::vector<uint8_t> serialize(const StateGeometry& g, const StreamState& s) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put(out, std::vector<int64_t>{s.length, static_cast<int64_t>(s.layers.size()), g.ring_capacity,
                               s.last_index_publisher});
  put(out, s.history);
  for (const LayerCache& c : s.layers) {
    put(out, c.window);
    put(out, c.comp_kv);
    put(out, c.comp_gate);
    put(out, c.idx_comp_kv);
    put(out, c.idx_comp_gate);
    put(out, c.compressed);
    put(out, c.index_keys);
  }
  put(out, std::vector<int64_t>{static_cast<int64_t>(s.dspark_rings.size())});
  for (const auto& r : s.dspark_rings) put(out, r);
  return out;
}

StatusOr<StreamState> deserialize(const StateGeometry& g, std::span<const uint8_t> bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream snapshot: bad magic");
  Reader r{bytes, 8};
  std::vector<int64_t> head;
  r.get(head);
  if (!r.ok || head.size() != 4 || head[1] != static_cast<int64_t>(g.layers.size()) ||
      head[2] != g.ring_capacity)
    return error(StatusCode::data_loss, "stream snapshot: header does not match this model");
  StreamState s = new_stream_state(g);
  s.length = head[0];
  s.last_index_publisher = static_cast<int32_t>(head[3]);
  r.get(s.history);
  for (LayerCache& c : s.layers) {
    std::vector<uint8_t> w;
    r.get(w);
    if (w.size() != c.window.size()) r.ok = false;
    c.window = std::move(w);
    r.get(c.comp_kv);
    r.get(c.comp_gate);
    r.get(c.idx_comp_kv);
    r.get(c.idx_comp_gate);
    r.get(c.compressed);
    r.get(c.index_keys);
  }
  std::vector<int64_t> nd;
  r.get(nd);
  if (!r.ok || nd.size() != 1 || nd[0] != static_cast<int64_t>(s.dspark_rings.size()))
    return error(StatusCode::data_loss, "stream snapshot: truncated or mismatched");
  for (auto& ring : s.dspark_rings) r.get(ring);
  if (!r.ok || r.at != bytes.size() || static_cast<int64_t>(s.history.size()) != s.length)
    return error(StatusCode::data_loss, "stream snapshot: truncated or mismatched");
  return s;
}

// The slots of positions [length - n, length) of a ring of `cap` slots of `width` elements, in position order.
template <typename T>
std::vector<T> ring_tail(const std::vector<T>& ring, int64_t cap, int64_t width, int64_t length, int64_t n) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(n * width));
  for (int64_t q = length - n; q < length; ++q) {
    out.insert(out.end(), ring.begin() + (q % cap) * width, ring.begin() + (q % cap + 1) * width);
  }
  return out;
}

// Puts ring_tail's slots back; false when `tail` has another size.
template <typename T>
bool put_tail(std::vector<T>& ring, const std::vector<T>& tail, int64_t cap, int64_t width, int64_t length, int64_t n) {
  if (static_cast<int64_t>(tail.size()) != n * width) return false;
  for (int64_t q = length - n, k = 0; q < length; ++q, ++k) {
    std::copy(tail.begin() + k * width, tail.begin() + (k + 1) * width, ring.begin() + (q % cap) * width);
  }
  return true;
}

}  // namespace

std::vector<uint8_t> serialize_state(const StateGeometry& g, const StreamState& s) { return serialize(g, s); }

StatusOr<StreamState> deserialize_state(const StateGeometry& g, const std::vector<uint8_t>& bytes) {
  return deserialize(g, bytes);
}

std::vector<uint8_t> serialize_bounded(const StateGeometry& g, const StreamState& s) {
  const int64_t L = s.length, nw = g.window_slots(L);
  std::vector<uint8_t> out(kBoundedMagic, kBoundedMagic + 8);
  put(out, std::vector<int64_t>{L, static_cast<int64_t>(s.layers.size()), g.ring_capacity, s.last_index_publisher,
                               g.window});
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerCache& c = s.layers[l];
    const family::LayerStateShape& shape = g.layers[l];
    const int64_t nc = g.group_slots(static_cast<int32_t>(l), L), cap = shape.proj_kv.capacity, w = shape.proj_kv.width;
    const int64_t iw = shape.idx_proj_kv.width;
    const bool idx = shape.idx_proj_kv.present() && nc > 0;
    put(out, ring_tail(c.window, g.ring_capacity, g.window_row, L, nw));
    put(out, nc > 0 ? ring_tail(c.comp_kv, cap, w, L, nc) : std::vector<double>{});
    put(out, nc > 0 ? ring_tail(c.comp_gate, cap, w, L, nc) : std::vector<double>{});
    put(out, idx ? ring_tail(c.idx_comp_kv, cap, iw, L, nc) : std::vector<double>{});
    put(out, idx ? ring_tail(c.idx_comp_gate, cap, iw, L, nc) : std::vector<double>{});
  }
  put(out, std::vector<int64_t>{static_cast<int64_t>(s.dspark_rings.size())});
  for (const auto& r : s.dspark_rings) put(out, ring_tail(r, g.ring_capacity, g.window_row, L, nw));
  return out;
}

StatusOr<StreamState> deserialize_bounded(const StateGeometry& g, std::span<const uint8_t> bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kBoundedMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream snapshot: not a bounded part");
  Reader r{bytes, 8};
  std::vector<int64_t> head;
  r.get(head);
  if (!r.ok || head.size() != 5 || head[0] < 0 || head[1] != static_cast<int64_t>(g.layers.size()) ||
      head[2] != g.ring_capacity || head[4] != g.window)
    return error(StatusCode::data_loss, "stream snapshot: bounded part of another geometry");
  StreamState s = new_stream_state(g);
  const int64_t L = s.length = head[0], nw = g.window_slots(L);
  s.last_index_publisher = static_cast<int32_t>(head[3]);
  for (size_t l = 0; l < s.layers.size() && r.ok; ++l) {
    LayerCache& c = s.layers[l];
    const family::LayerStateShape& shape = g.layers[l];
    const int64_t nc = g.group_slots(static_cast<int32_t>(l), L), cap = shape.proj_kv.capacity, width = shape.proj_kv.width;
    const int64_t iw = shape.idx_proj_kv.width;
    const bool idx = shape.idx_proj_kv.present() && nc > 0;
    std::vector<uint8_t> w;
    std::vector<double> kv, gate, ikv, igate;
    r.get(w);
    r.get(kv);
    r.get(gate);
    r.get(ikv);
    r.get(igate);
    r.ok = r.ok && put_tail(c.window, w, g.ring_capacity, g.window_row, L, nw) &&
           (nc > 0 ? put_tail(c.comp_kv, kv, cap, width, L, nc) && put_tail(c.comp_gate, gate, cap, width, L, nc)
                   : kv.empty() && gate.empty()) &&
           (idx ? put_tail(c.idx_comp_kv, ikv, cap, iw, L, nc) &&
                      put_tail(c.idx_comp_gate, igate, cap, iw, L, nc)
                : ikv.empty() && igate.empty());
  }
  std::vector<int64_t> nd;
  r.get(nd);
  if (!r.ok || nd.size() != 1 || nd[0] != static_cast<int64_t>(s.dspark_rings.size()))
    return error(StatusCode::data_loss, "stream snapshot: bounded part truncated or mismatched");
  for (auto& ring : s.dspark_rings) {
    std::vector<uint8_t> tail;
    r.get(tail);
    r.ok = r.ok && put_tail(ring, tail, g.ring_capacity, g.window_row, L, nw);
  }
  if (!r.ok || r.at != bytes.size())
    return error(StatusCode::data_loss, "stream snapshot: bounded part truncated or mismatched");
  return s;
}

StateParts split_state(const StateGeometry& g, const StreamState& s, int64_t from) {
  StateParts parts{serialize_bounded(g, s), {}};
  const uint8_t* history = reinterpret_cast<const uint8_t*>(s.history.data());
  parts.rows.emplace_back(history + from * 8, history + s.length * 8);
  for (size_t l = 0; l < g.layers.size(); ++l) {
    if (!g.layers[l].kv_source) continue;
    const LayerCache& c = s.layers[l];
    const int64_t r0 = from / g.layers[l].ratio;
    parts.rows.emplace_back(c.compressed.begin() + r0 * g.compressed_row, c.compressed.end());
    if (g.layers[l].index_keys) parts.rows.emplace_back(c.index_keys.begin() + r0 * g.index_row, c.index_keys.end());
  }
  return parts;
}

StatusOr<StreamState> join_state(const StateGeometry& g, std::span<const uint8_t> bounded,
                                 std::span<const std::vector<std::span<const uint8_t>>> tables) {
  DSV4_ASSIGN_OR_RETURN(StreamState s, deserialize_bounded(g, bounded));
  const std::vector<family::RowTableShape> shapes = g.row_tables();
  if (tables.size() != shapes.size())
    return error(StatusCode::data_loss, "stream snapshot: {} row tables, this model has {}", tables.size(), shapes.size());
  // Each table must hold exactly the rows of `length` positions.
  std::vector<std::vector<uint8_t>> joined(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    size_t size = 0;
    for (std::span<const uint8_t> c : tables[t]) size += c.size();
    if (size != static_cast<size_t>(s.length / shapes[t].positions_per_row * shapes[t].row_bytes))
      return error(StatusCode::data_loss, "stream snapshot: row table {} holds {} bytes for {} positions", t, size,
                   s.length);
    joined[t].reserve(size);
    for (std::span<const uint8_t> c : tables[t]) joined[t].insert(joined[t].end(), c.begin(), c.end());
  }
  s.history.resize(static_cast<size_t>(s.length));
  if (s.length != 0) std::memcpy(s.history.data(), joined[0].data(), joined[0].size());
  size_t t = 1;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    if (!g.layers[l].kv_source) continue;
    s.layers[l].compressed = std::move(joined[t++]);
    if (g.layers[l].index_keys) s.layers[l].index_keys = std::move(joined[t++]);
  }
  return s;
}

}  // namespace dsv4::cpu
