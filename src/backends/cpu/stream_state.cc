// Stream state allocation, rollback and snapshot bytes (see stream_state.h).
#include "backends/cpu/stream_state.h"

#include <algorithm>
#include <cstring>

namespace dsv4::cpu {

StateGeometry make_geometry(const ModelConfig& c, int64_t max_rollback) {
  StateGeometry g;
  g.ring_capacity = c.window + max_rollback;
  g.d = c.head_dim;
  g.window_row = row_bytes(c.window_format, c.head_dim, c.rope_dim);
  g.compressed_row = row_bytes(c.compressed_format, c.head_dim, c.rope_dim);
  g.index_row = row_bytes(c.index_format, c.index_head_dim, c.rope_dim);
  g.idx_width = 2 * static_cast<int64_t>(c.index_head_dim);
  auto roles = layer_roles(c);
  for (const auto& r : roles) {
    g.ratio.push_back(r.ratio);
    g.kv_source.push_back(r.kv_source);
    g.overlap.push_back(r.overlap);
    const bool pooled = r.kv_source && r.ratio > 1;
    // A group completed after a rollback of max_rollback rows still finds its own and (with
    // overlap) the previous group's projections.
    const int64_t span = r.overlap ? 2 * r.ratio : r.ratio;
    g.comp_cap.push_back(pooled ? std::max<int64_t>(c.window, span) + max_rollback : 0);
    g.comp_width.push_back(pooled ? (r.overlap ? 2 : 1) * static_cast<int64_t>(c.head_dim) : 0);
  }
  g.dspark_stages = c.dspark_stages;
  return g;
}

StreamState new_stream_state(const StateGeometry& g) {
  StreamState s;
  s.layers.resize(g.ratio.size());
  for (size_t l = 0; l < g.ratio.size(); ++l) {
    s.layers[l].window.assign(g.ring_capacity * g.window_row, 0);
    if (g.comp_cap[l] > 0) {
      s.layers[l].comp_kv.assign(g.comp_cap[l] * g.comp_width[l], 0.0);
      s.layers[l].comp_gate.assign(g.comp_cap[l] * g.comp_width[l], 0.0);
    }
    if (g.overlap[l]) {
      s.layers[l].idx_comp_kv.assign(g.comp_cap[l] * g.idx_width, 0.0);
      s.layers[l].idx_comp_gate.assign(g.comp_cap[l] * g.idx_width, 0.0);
    }
  }
  s.dspark_rings.assign(g.dspark_stages, std::vector<uint8_t>(g.ring_capacity * g.window_row, 0));
  return s;
}

void truncate_state(const StateGeometry& g, StreamState& s, int64_t length) {
  s.length = length;
  s.history.resize(length);
  for (size_t l = 0; l < g.ratio.size(); ++l) {
    if (!g.kv_source[l]) continue;
    const size_t rows = static_cast<size_t>(length / g.ratio[l]);
    s.layers[l].compressed.resize(std::min(s.layers[l].compressed.size(), rows * g.compressed_row));
    // V4 ratio > 4 layers keep no index keys: shrink only.
    s.layers[l].index_keys.resize(std::min(s.layers[l].index_keys.size(), rows * g.index_row));
  }
}

namespace {
constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'C', 'P', 'U', '2'};

template <typename T>
void put(std::vector<uint8_t>& out, const std::vector<T>& v) {
  const uint64_t n = v.size();
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&n);
  out.insert(out.end(), p, p + 8);
  const uint8_t* q = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), q, q + n * sizeof(T));
}

struct Reader {
  const std::vector<uint8_t>& in;
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
}  // namespace

std::vector<uint8_t> serialize_state(const StateGeometry& g, const StreamState& s) {
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

StatusOr<StreamState> deserialize_state(const StateGeometry& g, const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream snapshot: bad magic");
  Reader r{bytes, 8};
  std::vector<int64_t> head;
  r.get(head);
  if (!r.ok || head.size() != 4 || head[1] != static_cast<int64_t>(g.ratio.size()) ||
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

}  // namespace dsv4::cpu
