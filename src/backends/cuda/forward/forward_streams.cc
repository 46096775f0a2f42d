// The CUDA forward's streams: opening and closing, lengths, rollback and snapshots (whole and split; see forward.h).
#include "backends/cuda/forward/forward.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/runtime/check.h"

namespace dsv4::cuda {

StatusOr<int32_t> Forward::open_stream() {
  std::lock_guard<std::mutex> lock(mu_);
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<StreamCaches> c, StreamCaches::create(*geo_, pages_, pool_.get(), stream_));
  const int32_t id = next_id_++;
  streams_[id].caches = std::move(c);
  return id;
}

Status Forward::close_stream(int32_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.erase(stream) == 0) return error(StatusCode::not_found, "no stream {}", stream);
  return ok_status();
}

StatusOr<int64_t> Forward::length(int32_t stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  return it->second.caches->length();
}

Status Forward::truncate(int32_t stream, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  const int64_t have = it->second.caches->length();
  if (length < 0 || length > have)
    return error(StatusCode::out_of_range, "stream {}: cannot truncate length {} to {}", stream, have, length);
  DSV4_RETURN_IF_ERROR(it->second.caches->truncate(length));
  it->second.history.resize(length);
  return ok_status();
}

Status Forward::assume_length(int32_t stream, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  if (it->second.caches->length() != 0) return error(StatusCode::invalid_argument, "stream {} is not empty", stream);
  if (length < 0 || length > options_.max_context)
    return error(StatusCode::out_of_range, "length {} outside the context of {}", length, options_.max_context);
  DSV4_RETURN_IF_ERROR(it->second.caches->reserve(length, stream_));
  DSV4_RETURN_IF_ERROR(it->second.caches->commit(length));
  it->second.history.assign(length, -1);
  return ok_status();
}

Status Forward::refill(StreamSlot& slot, const std::function<Status(StreamCaches&)>& fill) {
  slot.caches.reset();  // its slab and pages back to the pool first: a full pool still restores into an open stream
  slot.history.clear();
  DSV4_ASSIGN_OR_RETURN(slot.caches, StreamCaches::create(*geo_, pages_, pool_.get(), stream_));
  Status st = fill(*slot.caches);
  if (st.ok()) return st;
  slot.caches.reset();
  StatusOr<std::unique_ptr<StreamCaches>> empty = StreamCaches::create(*geo_, pages_, pool_.get(), stream_);
  if (!empty.ok()) return empty.status();  // unreachable: the slab given back above is free
  slot.caches = std::move(empty).value();
  return st;
}

namespace {
constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'C', 'U', 'D', '2'};
}

// Whole snapshots: magic, the history's length and the caches' bytes' size, the history, the caches' bytes.
StatusOr<std::vector<uint8_t>> Forward::snapshot(int32_t stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  DSV4_ASSIGN_OR_RETURN(std::vector<uint8_t> caches, it->second.caches->to_bytes(stream_));
  const std::vector<int64_t>& hist = it->second.history;
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  const uint64_t n = hist.size(), cb = caches.size();
  out.resize(8 + 16 + n * 8 + cb);
  std::memcpy(&out[8], &n, 8);
  std::memcpy(&out[16], &cb, 8);
  if (n) std::memcpy(&out[24], hist.data(), n * 8);
  if (cb) std::memcpy(&out[24 + n * 8], caches.data(), cb);
  return out;
}

Status Forward::restore(int32_t stream, const std::vector<uint8_t>& bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  uint64_t n = 0, cb = 0;
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return error(StatusCode::data_loss, "stream snapshot: bad magic");
  std::memcpy(&n, &bytes[8], 8);
  std::memcpy(&cb, &bytes[16], 8);
  if (n > (bytes.size() - 24) / 8 || bytes.size() != 24 + n * 8 + cb)
    return error(StatusCode::data_loss, "stream snapshot: truncated or mismatched");
  DSV4_RETURN_IF_ERROR(refill(it->second, [&](StreamCaches& c) -> Status {
    DSV4_RETURN_IF_ERROR(c.from_bytes(std::span<const uint8_t>(bytes).subspan(24 + n * 8), stream_));
    if (c.length() != static_cast<int64_t>(n))
      return error(StatusCode::data_loss, "stream snapshot: {} history ids for {} rows", n, c.length());
    return ok_status();
  }));
  it->second.history.resize(n);
  if (n) std::memcpy(it->second.history.data(), &bytes[24], n * 8);
  return ok_status();
}

std::vector<family::RowTableShape> Forward::row_tables() const { return geo_->row_tables(); }

StatusOr<engine::StateParts> Forward::snapshot_parts(int32_t stream, int64_t from) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  DSV4_ASSIGN_OR_RETURN(CacheParts caches, it->second.caches->to_parts(from, stream_));
  engine::StateParts parts{std::move(caches.bounded), {}};
  const std::vector<int64_t>& hist = it->second.history;
  const uint8_t* h = reinterpret_cast<const uint8_t*>(hist.data());
  parts.rows.emplace_back(h + from * 8, h + hist.size() * 8);
  for (std::vector<uint8_t>& rows : caches.rows) parts.rows.push_back(std::move(rows));
  return parts;
}

Status Forward::restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                              std::span<const std::vector<std::span<const uint8_t>>> tables) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  if (tables.empty()) return error(StatusCode::data_loss, "stream snapshot: no token history");
  DSV4_RETURN_IF_ERROR(refill(it->second, [&](StreamCaches& c) -> Status {
    DSV4_RETURN_IF_ERROR(c.from_parts(bounded, tables.subspan(1), stream_));
    size_t bytes = 0;
    for (std::span<const uint8_t> ch : tables[0]) bytes += ch.size();
    if (bytes != static_cast<size_t>(c.length()) * 8)
      return error(StatusCode::data_loss, "stream snapshot: {} bytes of token history for {} rows", bytes, c.length());
    return ok_status();
  }));
  std::vector<int64_t>& hist = it->second.history;
  hist.resize(static_cast<size_t>(it->second.caches->length()));
  uint8_t* at = reinterpret_cast<uint8_t*>(hist.data());
  for (std::span<const uint8_t> c : tables[0]) {
    if (!c.empty()) std::memcpy(at, c.data(), c.size());
    at += c.size();
  }
  return ok_status();
}

}  // namespace dsv4::cuda
