// The CUDA forward: stream bookkeeping, one call over every piece, rollback and snapshots (see forward.h).
#include "backends/cuda/forward.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "backends/cuda/arena.h"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_state.h"
#include "backends/cuda/block_ops.cuh"
#include "backends/cuda/check.h"
#include "backends/cuda/dspark_device.h"
#include "backends/cuda/forward_block.h"
#include "backends/cuda/forward_v4.h"

namespace dsv4::cuda {

namespace {

// Scratch of the forward's own buffers for a call of `rows` rows (attention adds its own).
int64_t forward_scratch_bytes(const cpu::ModelConfig& cfg, int64_t rows) {
  const int64_t C = cfg.hc_mult, D = cfg.dim, nm = C * (C + 2);
  const int64_t E = std::max<int64_t>(cfg.n_experts, cfg.dspark_experts), K = std::max(cfg.n_active, cfg.dspark_active);
  const int64_t I = cfg.moe_inter;
  const int64_t R = static_cast<int64_t>(cfg.engram_max_ngram - 1) * cfg.engram_heads;
  const int64_t n_taps = static_cast<int64_t>(cfg.dspark_target_layers.size());
  int64_t f = 0;
  f += rows * (C * D + C) + rows * (2 + 2);                    // h, pi, ids, pos
  f += rows * n_taps * D + 4 * rows * D;                       // taps, DSpark main rows and keys
  f += rows * static_cast<int64_t>(cfg.engram_layers.size()) * R * 2;  // Engram table rows
  int64_t layer = 3 * rows * D + 3 * rows * nm;                // block x, xn, y, mixes
  const int64_t moe = rows * E + 7 * rows * K + rows * K * D + rows * K * 3 * I + 3 * rows * I + rows * D;
  const int64_t engram = rows * R * cfg.engram_head_dim + rows * (C + 1) * D;
  layer += std::max(moe, engram);
  const int64_t head = rows * (C * D + C + 2 * D + cfg.vocab + 2);
  return (f + std::max(layer, head)) * 4 + (64 << 20);
}

}  // namespace

StatusOr<std::unique_ptr<Forward>> Forward::create(std::shared_ptr<const ModelDevice> model,
                                                   const ForwardOptions& options) {
  if (!model) return error(StatusCode::invalid_argument, "no model");
  if (options.max_call_rows < 1) return error(StatusCode::invalid_argument, "max_call_rows < 1");
  std::unique_ptr<Forward> f(new Forward());
  f->model_ = std::move(model);
  f->options_ = options;
  const cpu::ModelConfig& cfg = f->model_->config;
  DSV4_ASSIGN_OR_RETURN(AttnGeometry g, make_attn_geometry(cfg, options.max_context, options.max_rollback));
  if (!f->model_->dspark) g.dspark_stages = 0;
  f->geo_ = std::make_unique<AttnGeometry>(g);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&f->stream_, cudaStreamNonBlocking), "creating the forward's stream"));
  const int64_t rows = options.max_call_rows;
  const int64_t bytes = forward_scratch_bytes(cfg, rows) +
                        attention_scratch_bytes(cfg, rows, options.max_context) +
                        dspark_scratch_bytes(cfg);
  f->scratch_ = std::make_unique<Arena>(static_cast<size_t>(bytes));
  if (f->scratch_->capacity() < static_cast<size_t>(bytes))
    return error(StatusCode::resource_exhausted, "cannot allocate {} MiB of forward scratch for {} rows per call",
                 bytes >> 20, rows);
  return f;
}

Forward::~Forward() {
  streams_.clear();
  if (stream_) cudaStreamDestroy(stream_);
}

StatusOr<int32_t> Forward::open_stream() {
  std::lock_guard<std::mutex> lock(mu_);
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<StreamCaches> c, StreamCaches::create(*geo_));
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
  DSV4_RETURN_IF_ERROR(it->second.caches->commit(length));
  it->second.history.assign(length, -1);
  return ok_status();
}

namespace {
constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'C', 'U', 'D', '1'};
}

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
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<StreamCaches> fresh, StreamCaches::create(*geo_));
  std::vector<uint8_t> caches(bytes.begin() + 24 + n * 8, bytes.end());
  DSV4_RETURN_IF_ERROR(fresh->from_bytes(caches, stream_));
  if (fresh->length() != static_cast<int64_t>(n))
    return error(StatusCode::data_loss, "stream snapshot: {} history ids for {} rows", n, fresh->length());
  std::vector<int64_t> hist(n);
  if (n) std::memcpy(hist.data(), &bytes[24], n * 8);
  it->second.caches = std::move(fresh);
  it->second.history = std::move(hist);
  return ok_status();
}

StatusOr<std::vector<cpu::PieceResult>> Forward::forward(const std::vector<cpu::Piece>& pieces) {
  std::lock_guard<std::mutex> lock(mu_);
  const cpu::ModelConfig& cfg = model_->config;
  std::set<int32_t> seen;
  int64_t rows = 0;
  for (const cpu::Piece& pc : pieces) {
    auto it = streams_.find(pc.stream);
    if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", pc.stream);
    if (!seen.insert(pc.stream).second)
      return error(StatusCode::invalid_argument, "stream {} appears twice in one call", pc.stream);
    for (int32_t t : pc.tokens)
      if (t < 0 || t >= cfg.vocab) return error(StatusCode::invalid_argument, "token {} outside vocab {}", t, cfg.vocab);
    for (int32_t r : pc.logit_rows)
      if (r < 0 || r >= static_cast<int32_t>(pc.tokens.size()))
        return error(StatusCode::invalid_argument, "logit row {} outside a piece of {} tokens", r, pc.tokens.size());
    if (it->second.caches->length() + static_cast<int64_t>(pc.tokens.size()) > options_.max_context)
      return error(StatusCode::out_of_range, "stream {}: {} + {} rows exceed the context of {}", pc.stream,
                   it->second.caches->length(), pc.tokens.size(), options_.max_context);
    rows += static_cast<int64_t>(pc.tokens.size());
  }
  if (rows > options_.max_call_rows)
    return error(StatusCode::invalid_argument, "a call of {} rows exceeds max_call_rows {}", rows, options_.max_call_rows);
  std::vector<cpu::PieceResult> out(pieces.size());
  std::vector<size_t> hist_len;
  for (const cpu::Piece& pc : pieces) hist_len.push_back(streams_.at(pc.stream).history.size());
  const size_t mark = scratch_->mark();
  Status st = run(pieces, out);
  const Status sync = cuda_status(cudaStreamSynchronize(stream_), "synchronizing after the forward");
  scratch_->reset(mark);
  if (st.ok()) st = sync;
  if (!st.ok()) {
    for (size_t i = 0; i < pieces.size(); ++i) streams_.at(pieces[i].stream).history.resize(hist_len[i]);
    return st;
  }
  return out;
}

Status Forward::run(const std::vector<cpu::Piece>& pieces, std::vector<cpu::PieceResult>& out) {
  const ModelDevice& M = *model_;
  const cpu::ModelConfig& cfg = M.config;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, V = cfg.vocab;
  OpCtx o{&cfg, stream_, scratch_.get(), profile_};
  CallCtx c;
  c.model = &M;
  c.cfg = &cfg;
  c.roles = &M.roles;
  c.attn = M.attention.data();
  c.stream = stream_;
  c.scratch = scratch_.get();
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;
  std::vector<StreamSlot*> slots;
  for (const cpu::Piece& pc : pieces) {
    StreamSlot& s = streams_.at(pc.stream);
    slots.push_back(&s);
    DevicePiece p{s.caches.get(), s.caches->length(), static_cast<int64_t>(pc.tokens.size()), c.rows};
    c.pieces.push_back(p);
    for (int64_t i = 0; i < p.T; ++i) {
      pos.push_back(p.start + i);
      ids.push_back(pc.tokens[i]);
      const int32_t t = pc.tokens[i];
      s.history.push_back(M.engram_token_map.empty() ? t : M.engram_token_map[t]);
    }
    c.rows += p.T;
  }
  const int64_t rows = c.rows;
  if (rows == 0) return ok_status();
  auto upload_vec = [&](const void* src, size_t bytes, void* dst, const char* what) {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), what);
  };
  DSV4_ASSIGN_OR_RETURN(int32_t* d_ids, o.alloc<int32_t>(rows, "token ids"));
  DSV4_ASSIGN_OR_RETURN(int64_t* d_pos, o.alloc<int64_t>(rows, "positions"));
  DSV4_RETURN_IF_ERROR(upload_vec(ids.data(), rows * 4, d_ids, "uploading token ids"));
  DSV4_RETURN_IF_ERROR(upload_vec(pos.data(), rows * 8, d_pos, "uploading positions"));
  c.pos = d_pos;
  o.ids = d_ids;
  // Engram hash rows of every Engram layer, from the streams' histories (host), before the embedding.
  std::vector<int64_t*> engram_rows(cfg.engram_layers.size(), nullptr);
  for (size_t e = 0; e < cfg.engram_layers.size(); ++e) {
    const EngramDevice& E = *M.layers[cfg.engram_layers[e]].engram;
    const int64_t R = static_cast<int64_t>(E.layout.primes.size());
    const int64_t pad = M.engram_token_map[cfg.engram_pad_id];
    std::vector<int64_t> host(rows * R);
    for (size_t i = 0; i < c.pieces.size(); ++i)
      for (int64_t t = 0; t < c.pieces[i].T; ++t) {
        const int64_t r = c.pieces[i].row0 + t;
        cpu::engram_hash_rows(E.layout, slots[i]->history.data(), pos[r], pad, &host[r * R]);
      }
    DSV4_ASSIGN_OR_RETURN(engram_rows[e], o.alloc<int64_t>(rows * R, "engram table rows"));
    DSV4_RETURN_IF_ERROR(upload_vec(host.data(), host.size() * 8, engram_rows[e], "uploading Engram rows"));
  }
  DSV4_ASSIGN_OR_RETURN(float* h, o.alloc<float>(rows * C * D, "streams h"));
  DSV4_ASSIGN_OR_RETURN(float* pi, o.alloc<float>(rows * C, "pre-mix pi"));
  DSV4_CUDA_LAUNCH(embed_streams(M.embed, d_ids, rows, C, D, h, pi, stream_), "embed_streams",
                   shape_text({{"rows", rows}, {"D", D}}));
  const int n_taps = static_cast<int>(cfg.dspark_target_layers.size());
  float* taps = nullptr;
  if (M.dspark) {
    DSV4_ASSIGN_OR_RETURN(taps, o.alloc<float>(rows * n_taps * D, "DSpark taps"));
  }
  DSV4_RETURN_IF_ERROR(begin_attention_call(c));
  std::vector<float> probe_host;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const cpu::LayerRole& role = M.roles[l];
    const LayerDevice& L = M.layers[l];
    const size_t layer_mark = scratch_->mark();
    if (role.engram) {
      DSV4_RETURN_IF_ERROR(timed(o, "engram", [&] { return engram_forward(o, *L.engram, engram_rows[role.engram_index], rows, h); }));
    }
    if (role.tap_index >= 0 && taps)
      DSV4_CUDA_LAUNCH(dspark_tap(h, rows, C, D, n_taps, role.tap_index, taps, stream_), "dspark_tap",
                       shape_text({{"rows", rows}, {"layer", l}}));
    AttnFn attn = [&](const float* x, float* y) { return attention_layer(c, l, x, y); };
    DSV4_RETURN_IF_ERROR(block_forward(o, L, rows, attn, nullptr, h, pi));
    scratch_->reset(layer_mark);
    if (probe_) {
      probe_host.resize(rows * C * D);
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(probe_host.data(), h, probe_host.size() * 4,
                                                       cudaMemcpyDeviceToHost, stream_), "copying the layer probe"));
      DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "layer probe"));
      probe_(l, probe_host);
    }
  }
  // Logits of the requested rows of every piece in one head call.
  std::vector<int64_t> index;
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int32_t r : pieces[i].logit_rows) index.push_back(c.pieces[i].row0 + r);
  if (!index.empty()) {
    const int64_t n = static_cast<int64_t>(index.size());
    const size_t head_mark = scratch_->mark();
    DSV4_ASSIGN_OR_RETURN(int64_t* d_index, o.alloc<int64_t>(n, "logit rows"));
    DSV4_ASSIGN_OR_RETURN(float* logits, o.alloc<float>(n * V, "logits"));
    DSV4_RETURN_IF_ERROR(upload_vec(index.data(), n * 8, d_index, "uploading logit rows"));
    DSV4_RETURN_IF_ERROR(timed(o, "head", [&] {
      return M.hc_head ? head_logits_v4(o, M, h, d_index, n, logits)
                       : head_logits(o, M.norm, M.head, M.head16, h, pi, d_index, n, logits);
    }));
    std::vector<float> host(n * V);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host.data(), logits, host.size() * 4, cudaMemcpyDeviceToHost,
                                                     stream_), "copying logits"));
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "after the head"));
    int64_t at = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t k = static_cast<int64_t>(pieces[i].logit_rows.size());
      out[i].logits.assign(host.begin() + at * V, host.begin() + (at + k) * V);
      at += k;
    }
    scratch_->reset(head_mark);
  }
  // DSpark rings receive one row per main position.
  if (M.dspark) {
    DSV4_RETURN_IF_ERROR(timed(o, "dspark rings", [&] { return dspark_write_rings(o, M, c.pieces, d_pos, rows, taps); }));
  }
  for (const DevicePiece& p : c.pieces) DSV4_RETURN_IF_ERROR(p.caches->commit(p.start + p.T));
  return ok_status();
}

StatusOr<cpu::DraftResult> Forward::draft(int32_t stream, int32_t next) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!model_->dspark) return error(StatusCode::unimplemented, "the model has no DSpark weights");
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  if (it->second.caches->length() == 0) return error(StatusCode::invalid_argument, "stream {} is empty", stream);
  if (next < 0 || next >= config().vocab) return error(StatusCode::invalid_argument, "token {} out of range", next);
  OpCtx o{&model_->config, stream_, scratch_.get()};
  const size_t mark = scratch_->mark();
  auto r = dspark_draft(o, *model_, *it->second.caches, next);
  const Status sync = cuda_status(cudaStreamSynchronize(stream_), "synchronizing after the draft");
  scratch_->reset(mark);
  if (!r.ok()) return r.status();
  DSV4_RETURN_IF_ERROR(sync);
  return r;
}

namespace {
class CudaForward final : public cpu::StreamForward {
 public:
  explicit CudaForward(std::unique_ptr<Forward> f) : f_(std::move(f)) {}
  const cpu::ModelConfig& config() const override { return f_->config(); }
  bool has_drafter() const override { return f_->model().dspark != nullptr; }
  uint32_t snapshot_version() const override { return 0x43554431; }  // "CUD1": the CUDA snapshot format
  StatusOr<int32_t> open_stream() override { return f_->open_stream(); }
  Status close_stream(int32_t s) override { return f_->close_stream(s); }
  StatusOr<int64_t> length(int32_t s) const override { return f_->length(s); }
  StatusOr<std::vector<cpu::PieceResult>> forward(const std::vector<cpu::Piece>& p) override { return f_->forward(p); }
  Status truncate(int32_t s, int64_t n) override { return f_->truncate(s, n); }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t s) const override { return f_->snapshot(s); }
  Status restore(int32_t s, const std::vector<uint8_t>& b) override { return f_->restore(s, b); }
  StatusOr<cpu::DraftResult> draft(int32_t s, int32_t next) override { return f_->draft(s, next); }

 private:
  std::unique_ptr<Forward> f_;
};
}  // namespace

std::unique_ptr<cpu::StreamForward> cuda_stream_forward(std::unique_ptr<Forward> forward) {
  return std::make_unique<CudaForward>(std::move(forward));
}

}  // namespace dsv4::cuda
