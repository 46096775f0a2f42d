// Device attention caches of one stream: layout, rollback and snapshot bytes (see attention_state.h).
#include "backends/cuda/forward/attention_state.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <span>

namespace dsv4::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Byte sizes of one layer's parts, in allocation order.
struct LayerSizes {
  size_t window, compressed, index_keys, comp_kv, comp_gate, idx_kv, idx_gate;
};
LayerSizes layer_sizes(const family::StateGeometry& g, size_t l) {
  const family::LayerStateShape& shape = g.layers[l];
  LayerSizes s{};
  s.window = shape.window.bytes();
  if (shape.kv_source) {
    const int64_t rows = g.max_context / shape.ratio;
    s.compressed = rows * g.compressed_row;
    s.index_keys = shape.index_keys ? rows * g.index_row : 0;
    s.comp_kv = shape.proj_kv.bytes();
    s.comp_gate = shape.proj_gate.bytes();
    s.idx_kv = shape.idx_proj_kv.bytes();
    s.idx_gate = shape.idx_proj_gate.bytes();
  }
  return s;
}

Status state_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return error(StatusCode::internal, "stream caches: {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

StatusOr<family::StateGeometry> device_state_geometry(const family::ModelPlan& plan, int64_t max_context,
                                                      int64_t max_rollback, bool dspark) {
  if (max_context <= 0 || max_rollback < 0)
    return error(StatusCode::invalid_argument, "attention caches: max_context {} / max_rollback {} unsupported",
                 max_context, max_rollback);
  family::StateGeometryOptions o;
  o.max_context = max_context;
  o.max_rollback = max_rollback;
  o.dspark = dspark;
  family::StateGeometry g = family::make_state_geometry(plan, o);
  // The V4.1 compressor kernels address their projection rings by the window ring's slots.
  if (g.window_format != KvRowFormat::model1)
    for (const family::LayerStateShape& l : g.layers)
      if (l.proj_kv.present() && l.proj_kv.capacity != g.ring_capacity)
        return error(StatusCode::unimplemented, "attention caches: layer {} pools {} positions, more than the window of {}",
                     l.layer, l.ratio, g.window);
  return g;
}

int64_t StreamCaches::device_bytes(const family::StateGeometry& g) {
  size_t total = 0;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const LayerSizes s = layer_sizes(g, l);
    total += up(s.window) + up(s.compressed) + up(s.index_keys) + up(s.comp_kv) + up(s.comp_gate) + up(s.idx_kv) +
             up(s.idx_gate);
  }
  total += g.dspark_stages * up(g.dspark_ring.bytes());
  return static_cast<int64_t>(total);
}

StatusOr<std::unique_ptr<StreamCaches>> StreamCaches::create(const family::StateGeometry& g, cudaStream_t s) {
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
  for (size_t l = 0; l < g.layers.size(); ++l) {
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
  for (int st = 0; st < g.dspark_stages; ++st) c->dspark_.push_back(take(g.dspark_ring.bytes()));
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

constexpr char kBoundedMagic[8] = {'D', 'S', 'V', '4', 'C', 'U', 'B', '1'};
constexpr char kWholeMagic[8] = {'D', 'S', 'V', '4', 'C', 'U', 'W', '1'};
constexpr size_t kLengthAt = 10;  // index of the length in the header

// The bounded part's header: every geometry field that decides the layout (never max_context nor
// max_rollback: a snapshot restores into caches of another size), then the length.
std::vector<int64_t> header(const family::StateGeometry& g, int64_t length) {
  std::vector<int64_t> h = {static_cast<int64_t>(g.layers.size()), g.dspark_stages, g.window, g.d, g.index_head_dim,
                            g.window_row, g.compressed_row, g.index_row, static_cast<int64_t>(g.compressed_format),
                            static_cast<int64_t>(g.window_format), length};
  for (const family::LayerStateShape& l : g.layers) {
    h.push_back(l.ratio * 4 + (l.kv_source ? 2 : 0) + (l.index_keys ? 1 : 0));
    h.push_back(l.proj_kv.width * 2 + (l.overlap ? 1 : 0));
    h.push_back(l.idx_proj_kv.width);
  }
  return h;
}

// A piece of the bounded part: the slots of positions [length - n, length) of a ring (q at slot q % capacity).
struct Tail {
  uint8_t* base;
  int64_t capacity, slot_bytes, n;
  size_t bytes() const { return static_cast<size_t>(n * slot_bytes); }
};

// The bounded part's pieces in order: per layer the window ring, then the projection rings (main kv, gate,
// indexer kv, gate); then the DSpark rings.
std::vector<Tail> tails(const family::StateGeometry& g, const std::vector<LayerCachesDev>& layers,
                        const std::vector<uint8_t*>& dspark, int64_t length) {
  std::vector<Tail> t;
  const int64_t nw = g.window_slots(length);
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const family::LayerStateShape& shape = g.layers[l];
    const LayerCachesDev& d = layers[l];
    t.push_back({d.window, shape.window.capacity, shape.window.slot_bytes, nw});
    const int64_t nc = g.group_slots(static_cast<int32_t>(l), length);
    if (nc == 0) continue;
    t.push_back({reinterpret_cast<uint8_t*>(d.comp_kv), shape.proj_kv.capacity, shape.proj_kv.slot_bytes, nc});
    t.push_back({reinterpret_cast<uint8_t*>(d.comp_gate), shape.proj_gate.capacity, shape.proj_gate.slot_bytes, nc});
    if (!shape.idx_proj_kv.present()) continue;
    t.push_back({reinterpret_cast<uint8_t*>(d.idx_comp_kv), shape.idx_proj_kv.capacity, shape.idx_proj_kv.slot_bytes, nc});
    t.push_back({reinterpret_cast<uint8_t*>(d.idx_comp_gate), shape.idx_proj_gate.capacity, shape.idx_proj_gate.slot_bytes,
                 nc});
  }
  for (uint8_t* r : dspark) t.push_back({r, g.dspark_ring.capacity, g.dspark_ring.slot_bytes, nw});
  return t;
}

// Copies a tail between the ring on the device and `host` (in position order): at most two runs of slots.
Status copy_tail(const Tail& t, int64_t length, uint8_t* host, bool to_host, cudaStream_t s) {
  int64_t q = length - t.n, done = 0;
  while (done < t.n) {
    const int64_t slot = q % t.capacity, run = std::min(t.n - done, t.capacity - slot);
    uint8_t* dev = t.base + slot * t.slot_bytes;
    uint8_t* h = host + done * t.slot_bytes;
    const size_t n = static_cast<size_t>(run * t.slot_bytes);
    DSV4_RETURN_IF_ERROR(state_status(to_host ? cudaMemcpyAsync(h, dev, n, cudaMemcpyDeviceToHost, s)
                                              : cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, s),
                                      to_host ? "snapshot copy" : "restore copy"));
    q += run;
    done += run;
  }
  return ok_status();
}

// The device tables of the geometry's row_tables() without the token history: per KV source its compressed
// rows and, where kept, its index-key rows.
struct Table {
  uint8_t* base;
  int64_t ratio, row_bytes;
};
std::vector<Table> tables(const family::StateGeometry& g, const std::vector<LayerCachesDev>& layers) {
  std::vector<Table> t;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const family::LayerStateShape& shape = g.layers[l];
    if (!shape.kv_source) continue;
    t.push_back({layers[l].compressed, shape.ratio, g.compressed_row});
    if (shape.index_keys) t.push_back({layers[l].index_keys, shape.ratio, g.index_row});
  }
  return t;
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + 8);
}

}  // namespace

StatusOr<CacheParts> StreamCaches::to_parts(int64_t from, cudaStream_t s) const {
  if (from < 0 || from > length_)
    return error(StatusCode::out_of_range, "stream caches: parts from position {} of {}", from, length_);
  CacheParts parts;
  std::vector<uint8_t>& b = parts.bounded;
  b.assign(kBoundedMagic, kBoundedMagic + 8);
  const std::vector<int64_t> h = header(geo_, length_);
  put_u64(b, h.size());
  const uint8_t* hp = reinterpret_cast<const uint8_t*>(h.data());
  b.insert(b.end(), hp, hp + 8 * h.size());
  const std::vector<Tail> ts = tails(geo_, layers_, dspark_, length_);
  size_t at = b.size(), total = at;
  for (const Tail& t : ts) total += t.bytes();
  b.resize(total);
  for (const Tail& t : ts) {
    DSV4_RETURN_IF_ERROR(copy_tail(t, length_, &b[at], true, s));
    at += t.bytes();
  }
  for (const Table& t : tables(geo_, layers_)) {
    const int64_t r0 = from / t.ratio, r1 = length_ / t.ratio;
    std::vector<uint8_t>& rows = parts.rows.emplace_back(static_cast<size_t>((r1 - r0) * t.row_bytes));
    if (!rows.empty())
      DSV4_RETURN_IF_ERROR(state_status(
          cudaMemcpyAsync(rows.data(), t.base + r0 * t.row_bytes, rows.size(), cudaMemcpyDeviceToHost, s), "snapshot copy"));
  }
  DSV4_RETURN_IF_ERROR(state_status(cudaStreamSynchronize(s), "snapshot sync"));
  return parts;
}

Status StreamCaches::from_parts(std::span<const uint8_t> bounded,
                                std::span<const std::vector<std::span<const uint8_t>>> chunks, cudaStream_t s) {
  if (bounded.size() < 16 || std::memcmp(bounded.data(), kBoundedMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream caches snapshot: not a bounded part");
  uint64_t n = 0;
  std::memcpy(&n, &bounded[8], 8);
  const std::vector<int64_t> mine = header(geo_, 0);
  if (n != mine.size() || bounded.size() < 16 + 8 * n)
    return error(StatusCode::data_loss, "stream caches snapshot: a header of another model");
  std::vector<int64_t> h(n);
  std::memcpy(h.data(), &bounded[16], 8 * n);
  const int64_t length = h[kLengthAt];
  h[kLengthAt] = 0;
  if (h != mine) return error(StatusCode::data_loss, "stream caches snapshot: taken with another cache layout");
  if (length < 0 || length > geo_.max_context)
    return error(StatusCode::out_of_range, "stream caches snapshot: length {} exceeds max context {}", length,
                 geo_.max_context);
  const std::vector<Tail> ts = tails(geo_, layers_, dspark_, length);
  size_t at = 16 + 8 * n, total = at;
  for (const Tail& t : ts) total += t.bytes();
  if (total != bounded.size())
    return error(StatusCode::data_loss, "stream caches snapshot: bounded part of {} bytes, expected {}", bounded.size(), total);
  const std::vector<Table> tabs = tables(geo_, layers_);
  if (chunks.size() != tabs.size())
    return error(StatusCode::data_loss, "stream caches snapshot: {} row tables, this model has {}", chunks.size(),
                 tabs.size());
  for (size_t i = 0; i < tabs.size(); ++i) {
    size_t size = 0;
    for (std::span<const uint8_t> c : chunks[i]) size += c.size();
    if (size != static_cast<size_t>(length / tabs[i].ratio * tabs[i].row_bytes))
      return error(StatusCode::data_loss, "stream caches snapshot: row table {} holds {} bytes for {} positions", i,
                   size, length);
  }
  std::vector<uint8_t> staged(bounded.begin(), bounded.end());  // pageable source bytes outlive the copies below
  for (const Tail& t : ts) {
    DSV4_RETURN_IF_ERROR(copy_tail(t, length, &staged[at], false, s));
    at += t.bytes();
  }
  for (size_t i = 0; i < tabs.size(); ++i) {
    uint8_t* dst = tabs[i].base;
    for (std::span<const uint8_t> c : chunks[i]) {
      if (!c.empty())
        DSV4_RETURN_IF_ERROR(state_status(cudaMemcpyAsync(dst, c.data(), c.size(), cudaMemcpyHostToDevice, s), "restore copy"));
      dst += c.size();
    }
  }
  DSV4_RETURN_IF_ERROR(state_status(cudaStreamSynchronize(s), "restore sync"));
  length_ = length;
  return ok_status();
}

// Whole snapshots: magic, the bounded part's size and bytes, then per row table its size and rows.
StatusOr<std::vector<uint8_t>> StreamCaches::to_bytes(cudaStream_t s) const {
  DSV4_ASSIGN_OR_RETURN(CacheParts parts, to_parts(0, s));
  std::vector<uint8_t> out(kWholeMagic, kWholeMagic + 8);
  put_u64(out, parts.bounded.size());
  out.insert(out.end(), parts.bounded.begin(), parts.bounded.end());
  for (const std::vector<uint8_t>& rows : parts.rows) {
    put_u64(out, rows.size());
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

Status StreamCaches::from_bytes(std::span<const uint8_t> bytes, cudaStream_t s) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kWholeMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream caches snapshot: bad magic");
  size_t at = 8;
  auto next = [&](std::span<const uint8_t>& part) {
    uint64_t n = 0;
    if (bytes.size() - at < 8) return false;
    std::memcpy(&n, &bytes[at], 8);
    at += 8;
    if (n > bytes.size() - at) return false;
    part = bytes.subspan(at, n);
    at += n;
    return true;
  };
  std::span<const uint8_t> bounded;
  if (!next(bounded)) return error(StatusCode::data_loss, "stream caches snapshot: truncated");
  std::vector<std::vector<std::span<const uint8_t>>> chunks;
  while (at < bytes.size()) {
    std::span<const uint8_t> rows;
    if (!next(rows)) return error(StatusCode::data_loss, "stream caches snapshot: truncated");
    chunks.push_back({rows});
  }
  return from_parts(bounded, chunks, s);
}

}  // namespace dsv4::cuda
