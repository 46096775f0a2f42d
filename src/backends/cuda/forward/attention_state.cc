// Device attention caches of one stream: layout, rollback and snapshot bytes (see attention_state.h).
#include "backends/cuda/forward/attention_state.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <span>

namespace dsv4::cuda {

namespace {

size_t up(size_t n) { return (n + family::kStateAlign - 1) / family::kStateAlign * family::kStateAlign; }

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

StatusOr<std::unique_ptr<StreamCaches>> StreamCaches::create(const family::StateGeometry& g,
                                                             const family::PageLayout& pages, KvPool* pool,
                                                             cudaStream_t s) {
  if (!pool || pool->shape().slab_bytes != pages.slab_bytes || pool->shape().page_bytes != pages.page_bytes)
    return error(StatusCode::invalid_argument, "stream caches: a KV pool of another layout");
  std::unique_ptr<StreamCaches> c(new StreamCaches(g, pages, pool));
  DSV4_ASSIGN_OR_RETURN(c->slab_, pool->take_slab(s));
  // The slab: per layer its window ring and projection rings, the DSpark rings, then the page table.
  uint8_t* at = c->slab_;
  auto take = [&](size_t n) -> uint8_t* {
    if (n == 0) return nullptr;
    uint8_t* p = at;
    at += up(n);
    return p;
  };
  for (const family::LayerStateShape& shape : g.layers) {
    LayerCachesDev d;
    d.window = take(shape.window.bytes());
    d.comp_kv = reinterpret_cast<float*>(take(shape.proj_kv.bytes()));
    d.comp_gate = reinterpret_cast<float*>(take(shape.proj_gate.bytes()));
    d.idx_comp_kv = reinterpret_cast<float*>(take(shape.idx_proj_kv.bytes()));
    d.idx_comp_gate = reinterpret_cast<float*>(take(shape.idx_proj_gate.bytes()));
    c->layers_.push_back(d);
  }
  for (int st = 0; st < g.dspark_stages; ++st) c->dspark_.push_back(take(g.dspark_ring.bytes()));
  c->table_ = reinterpret_cast<uint8_t**>(take(pages.table_pages * sizeof(uint8_t*)));
  for (const family::PagedTable& t : pages.tables) {
    const RowPages rows{c->table_, t.offset, t.shift};
    (t.index_keys ? c->layers_[t.layer].index_keys : c->layers_[t.layer].compressed) = rows;
  }
  return c;
}

StreamCaches::~StreamCaches() {
  pool_->give_pages(pages_);
  pool_->give_slab(slab_);
}

int64_t StreamCaches::pages_wanted(int64_t positions) const {
  return std::max<int64_t>(0, layout_.pages_for(positions) - pages_held());
}

Status StreamCaches::reserve(int64_t positions, cudaStream_t s) {
  if (positions > geo_.max_context)
    return error(StatusCode::out_of_range, "stream caches: {} positions past the max context {}", positions,
                 geo_.max_context);
  const int64_t n = pages_wanted(positions);
  if (n == 0) return ok_status();
  const size_t held = pages_.size();
  DSV4_RETURN_IF_ERROR(pool_->take_pages(n, s, &pages_));
  // Pageable source: the copy is staged before cudaMemcpyAsync returns.
  return state_status(cudaMemcpyAsync(table_ + held, pages_.data() + held, n * sizeof(uint8_t*),
                                      cudaMemcpyHostToDevice, s),
                      "page table");
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
  // and ring slots of positions < length are untouched (capacity = window + max rollback). Pages past the last
  // position held go back to the pool (their table entries are written again when retaken).
  length_ = length;
  const size_t keep = static_cast<size_t>(layout_.pages_for(length));
  if (keep < pages_.size()) {
    pool_->give_pages(std::span<uint8_t* const>(pages_).subspan(keep));
    pages_.resize(keep);
  }
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

// Bytes [b0, b0 + n) of a paged table (its rows end to end) as device runs, one per page the range touches:
// copy(device address, bytes before the run, run bytes).
template <typename Copy>
Status table_runs(const family::PagedTable& t, const std::vector<uint8_t*>& pages, int64_t b0, int64_t n, Copy copy) {
  const int64_t span = t.rows_per_page() * t.row_bytes;  // a page's bytes of the table
  for (int64_t b = b0; b < b0 + n;) {
    const int64_t k = b / span, m = std::min(b0 + n, (k + 1) * span) - b;
    DSV4_RETURN_IF_ERROR(copy(pages[static_cast<size_t>(k)] + t.offset + (b - k * span), b - b0, m));
    b += m;
  }
  return ok_status();
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
  for (const family::PagedTable& t : layout_.tables) {
    const int64_t r0 = from / t.ratio, r1 = length_ / t.ratio;
    std::vector<uint8_t>& rows = parts.rows.emplace_back(static_cast<size_t>((r1 - r0) * t.row_bytes));
    DSV4_RETURN_IF_ERROR(table_runs(t, pages_, r0 * t.row_bytes, (r1 - r0) * t.row_bytes,
                                    [&](uint8_t* dev, int64_t at, int64_t m) {
                                      return state_status(cudaMemcpyAsync(rows.data() + at, dev, m,
                                                                          cudaMemcpyDeviceToHost, s),
                                                          "snapshot copy");
                                    }));
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
  const std::vector<family::PagedTable>& tabs = layout_.tables;
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
  DSV4_RETURN_IF_ERROR(reserve(length, s));
  std::vector<uint8_t> staged(bounded.begin(), bounded.end());  // pageable source bytes outlive the copies below
  for (const Tail& t : ts) {
    DSV4_RETURN_IF_ERROR(copy_tail(t, length, &staged[at], false, s));
    at += t.bytes();
  }
  for (size_t i = 0; i < tabs.size(); ++i) {
    int64_t b = 0;
    for (std::span<const uint8_t> c : chunks[i]) {
      DSV4_RETURN_IF_ERROR(write_table(i, b, c, s));
      b += static_cast<int64_t>(c.size());
    }
  }
  DSV4_RETURN_IF_ERROR(state_status(cudaStreamSynchronize(s), "restore sync"));
  length_ = length;
  return ok_status();
}

Status StreamCaches::write_table(size_t t, int64_t at, std::span<const uint8_t> bytes, cudaStream_t s) {
  if (t >= layout_.tables.size())
    return error(StatusCode::invalid_argument, "stream caches: no row table {}", t);
  const family::PagedTable& tab = layout_.tables[t];
  const int64_t n = static_cast<int64_t>(bytes.size());
  const int64_t span = tab.rows_per_page() * tab.row_bytes;
  if (at < 0 || (n > 0 && (at + n + span - 1) / span > pages_held()))
    return error(StatusCode::out_of_range, "stream caches: table {} bytes [{}, +{}) outside the {} pages held", t, at, n,
                 pages_held());
  return table_runs(tab, pages_, at, n, [&](uint8_t* dev, int64_t done, int64_t run) {
    return state_status(cudaMemcpyAsync(dev, bytes.data() + done, run, cudaMemcpyHostToDevice, s), "restore copy");
  });
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
