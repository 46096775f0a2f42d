// Device attention caches of one stream: layout, rollback and snapshot bytes (see attention_state.h).
#include "backends/cuda/attention_state.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

namespace dsv4::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Rows of compressed / index-key cache a KV source with `ratio` holds for the max context.
int64_t comp_rows(const AttnGeometry& g, int l) { return g.kv_source[l] ? g.max_context / g.ratio[l] : 0; }

// Byte sizes of one layer's parts, in allocation order.
struct LayerSizes {
  size_t window, compressed, index_keys, comp_kv, comp_gate, idx_kv, idx_gate;
};
LayerSizes layer_sizes(const AttnGeometry& g, int l) {
  LayerSizes s{};
  s.window = g.ring_capacity * g.window_row;
  if (g.kv_source[l]) {
    s.compressed = comp_rows(g, l) * g.compressed_row;
    s.index_keys = g.index_keys[l] ? comp_rows(g, l) * g.index_row : 0;
    if (g.v4) s.comp_kv = s.comp_gate = g.proj_cap[l] * g.proj_width[l] * sizeof(float);
    else if (g.ratio[l] > 1) s.comp_kv = s.comp_gate = g.ring_capacity * g.d * sizeof(float);
    if (g.v4 && g.overlap[l]) s.idx_kv = s.idx_gate = g.proj_cap[l] * 2 * g.ihd * sizeof(float);
  }
  return s;
}

constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'C', 'A', 'T', '1'};

Status state_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return error(StatusCode::internal, "stream caches: {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

StatusOr<AttnGeometry> make_attn_geometry(const cpu::ModelConfig& cfg, int64_t max_context,
                                          int64_t max_rollback) {
  DSV4_RETURN_IF_ERROR(cfg.validate());
  if (max_context <= 0 || max_rollback < 0)
    return error(StatusCode::invalid_argument, "attention caches: max_context {} / max_rollback {} unsupported",
                 max_context, max_rollback);
  AttnGeometry g;
  g.n_layers = cfg.n_layers;
  g.dspark_stages = cfg.dspark_stages;
  g.max_context = max_context;
  g.max_rollback = max_rollback;
  g.ring_capacity = cfg.window + max_rollback;
  g.d = cfg.head_dim;
  g.ihd = cfg.index_head_dim;
  g.window_row = cpu::row_bytes(cfg.v4() ? cfg.window_format : cpu::RowFormat::fp8_ue8m0_32, cfg.head_dim, cfg.rope_dim);
  g.compressed_row = cpu::row_bytes(cfg.compressed_format, cfg.head_dim, cfg.rope_dim);
  g.index_row = cpu::row_bytes(cpu::RowFormat::fp4_ue8m0_32, cfg.index_head_dim);
  g.compressed_format = cfg.compressed_format;
  g.v4 = cfg.v4();
  g.rope_dim = cfg.rope_dim;
  for (const cpu::LayerRole& r : cpu::layer_roles(cfg)) {
    g.ratio.push_back(r.ratio);
    g.kv_source.push_back(r.kv_source ? 1 : 0);
    g.overlap.push_back(r.overlap ? 1 : 0);
    g.index_keys.push_back(r.kv_source && (!cfg.v4() || r.overlap) ? 1 : 0);
    // A group completed after a rollback of max_rollback rows still finds its own and (with
    // overlap) the previous group's projections.
    const int64_t span = r.overlap ? 2 * r.ratio : r.ratio;
    const bool pooled = cfg.v4() && r.kv_source;
    g.proj_cap.push_back(pooled ? std::max<int64_t>(cfg.window, span) + max_rollback : 0);
    g.proj_width.push_back(pooled ? (r.overlap ? 2 : 1) * static_cast<int64_t>(cfg.head_dim) : 0);
  }
  return g;
}

int64_t StreamCaches::device_bytes(const AttnGeometry& g) {
  size_t total = 0;
  for (int l = 0; l < g.n_layers; ++l) {
    const LayerSizes s = layer_sizes(g, l);
    total += up(s.window) + up(s.compressed) + up(s.index_keys) + up(s.comp_kv) + up(s.comp_gate) + up(s.idx_kv) +
             up(s.idx_gate);
  }
  total += g.dspark_stages * up(g.ring_capacity * g.window_row);
  return static_cast<int64_t>(total);
}

StatusOr<std::unique_ptr<StreamCaches>> StreamCaches::create(const AttnGeometry& g, cudaStream_t s) {
  std::unique_ptr<StreamCaches> c(new StreamCaches(g));
  const int64_t bytes = device_bytes(g);
  c->mem_ = DeviceBuffer(static_cast<size_t>(bytes));
  if (!c->mem_)
    return error(StatusCode::resource_exhausted, "stream caches: cannot allocate {} device bytes", bytes);
  DSV4_RETURN_IF_ERROR(state_status(cudaMemsetAsync(c->mem_.get(), 0, bytes, s), "clear"));
  uint8_t* at = c->mem_.as<uint8_t>();
  auto take = [&](size_t n) -> uint8_t* {
    if (n == 0) return nullptr;
    uint8_t* p = at;
    at += up(n);
    return p;
  };
  for (int l = 0; l < g.n_layers; ++l) {
    const LayerSizes s = layer_sizes(g, l);
    LayerCachesDev d;
    d.window = take(s.window);
    d.compressed = take(s.compressed);
    d.index_keys = take(s.index_keys);
    d.comp_kv = reinterpret_cast<float*>(take(s.comp_kv));
    d.comp_gate = reinterpret_cast<float*>(take(s.comp_gate));
    d.idx_comp_kv = reinterpret_cast<float*>(take(s.idx_kv));
    d.idx_comp_gate = reinterpret_cast<float*>(take(s.idx_gate));
    c->layers_.push_back(d);
  }
  for (int s = 0; s < g.dspark_stages; ++s) c->dspark_.push_back(take(g.ring_capacity * g.window_row));
  return c;
}

Status StreamCaches::commit(int64_t length) {
  if (length < length_ || length > geo_.max_context)
    return error(StatusCode::invalid_argument, "stream caches: commit to {} from {} (max context {})", length,
                 length_, geo_.max_context);
  length_ = length;
  return ok_status();
}

Status StreamCaches::truncate(int64_t length) {
  if (length > length_ || length < 0 || length < length_ - geo_.max_rollback)
    return error(StatusCode::out_of_range, "stream caches: cannot roll back from {} to {} (max rollback {})",
                 length_, length, geo_.max_rollback);
  // Rows past `length` are simply no longer counted: the next call rewrites them before any read,
  // and ring slots of positions < length are untouched (capacity = window + max rollback).
  length_ = length;
  return ok_status();
}

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

// The snapshot header: every geometry field that decides the layout, then the length.
std::vector<int64_t> header(const AttnGeometry& g, int64_t length) {
  std::vector<int64_t> h = {g.n_layers, g.dspark_stages, g.max_rollback, g.ring_capacity, g.d, g.ihd,
                            g.window_row, g.compressed_row, g.index_row,
                            static_cast<int64_t>(g.compressed_format), length};
  for (int l = 0; l < g.n_layers; ++l) h.push_back(g.ratio[l] * 2 + g.kv_source[l]);
  return h;
}

// The snapshot's parts after the header, in order (see the layout below): device address and bytes of
// what a stream of `length` positions has written.
std::vector<std::pair<void*, size_t>> snapshot_parts(const AttnGeometry& g, const std::vector<LayerCachesDev>& layers,
                                                     const std::vector<uint8_t*>& dspark, int64_t length) {
  std::vector<std::pair<void*, size_t>> parts;
  for (int l = 0; l < g.n_layers; ++l) {
    const LayerSizes z = layer_sizes(g, l);
    const LayerCachesDev& d = layers[l];
    parts.push_back({d.window, z.window});
    if (g.kv_source[l]) {
      const int64_t rows = length / g.ratio[l];
      parts.push_back({d.compressed, rows * g.compressed_row});
      parts.push_back({d.index_keys, g.index_keys[l] ? rows * g.index_row : 0});
      parts.push_back({d.comp_kv, z.comp_kv});
      parts.push_back({d.comp_gate, z.comp_gate});
      parts.push_back({d.idx_comp_kv, z.idx_kv});
      parts.push_back({d.idx_comp_gate, z.idx_gate});
    }
  }
  for (uint8_t* r : dspark) parts.push_back({r, static_cast<size_t>(g.ring_capacity * g.window_row)});
  return parts;
}

}  // namespace

// Layout: magic, int64 count, header, then per layer the whole window ring, the written compressed
// and index-key rows, the projection rings; then the DSpark rings. Only rows < length are stored, so
// a snapshot restores into caches of any max_context that holds them.
StatusOr<std::vector<uint8_t>> StreamCaches::to_bytes(cudaStream_t s) const {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  const std::vector<int64_t> h = header(geo_, length_);
  const int64_t n = static_cast<int64_t>(h.size());
  put_bytes(out, &n, 8);
  put_bytes(out, h.data(), h.size() * 8);
  const std::vector<std::pair<void*, size_t>> parts = snapshot_parts(geo_, layers_, dspark_, length_);
  size_t at = out.size(), total = at;
  for (auto& p : parts) total += p.second;
  out.resize(total);
  for (auto& p : parts) {
    if (p.second) DSV4_RETURN_IF_ERROR(state_status(cudaMemcpyAsync(&out[at], p.first, p.second, cudaMemcpyDeviceToHost, s), "snapshot copy"));
    at += p.second;
  }
  DSV4_RETURN_IF_ERROR(state_status(cudaStreamSynchronize(s), "snapshot sync"));
  return out;
}

Status StreamCaches::from_bytes(const std::vector<uint8_t>& bytes, cudaStream_t s) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream caches snapshot: bad magic");
  int64_t n = 0;
  std::memcpy(&n, &bytes[8], 8);
  const std::vector<int64_t> mine = header(geo_, 0);
  if (n != static_cast<int64_t>(mine.size()) || bytes.size() < 16 + 8 * static_cast<size_t>(n))
    return error(StatusCode::data_loss, "stream caches snapshot: header does not match this model");
  std::vector<int64_t> h(n);
  std::memcpy(h.data(), &bytes[16], 8 * n);
  const int64_t length = h[10];
  h[10] = 0;
  if (h != mine) return error(StatusCode::data_loss, "stream caches snapshot: taken with another cache geometry");
  if (length < 0 || length > geo_.max_context)
    return error(StatusCode::out_of_range, "stream caches snapshot: length {} exceeds max context {}", length,
                 geo_.max_context);
  const std::vector<std::pair<void*, size_t>> parts = snapshot_parts(geo_, layers_, dspark_, length);
  size_t at = 16 + 8 * n, total = at;
  for (auto& p : parts) total += p.second;
  if (total != bytes.size()) return error(StatusCode::data_loss, "stream caches snapshot: {} bytes, expected {}", bytes.size(), total);
  for (auto& p : parts) {
    if (p.second) DSV4_RETURN_IF_ERROR(state_status(cudaMemcpyAsync(p.first, &bytes[at], p.second, cudaMemcpyHostToDevice, s), "restore copy"));
    at += p.second;
  }
  DSV4_RETURN_IF_ERROR(state_status(cudaStreamSynchronize(s), "restore sync"));
  length_ = length;
  return ok_status();
}

}  // namespace dsv4::cuda
