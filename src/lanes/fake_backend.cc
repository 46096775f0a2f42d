// The fake backend: a hash chain over fed rows, logits from the chain, keyed draws, imperfect drafts, a call log.
#include "lanes/fake_backend.h"

#include <cstring>

namespace dsv4::lanes {
namespace {

constexpr uint32_t kSnapshotMagic = 0x454B4146;  // "FAKE"
constexpr uint32_t kSnapshotVersion = 1;       // whole snapshots
constexpr uint32_t kSplitSnapshotVersion = 2;  // split snapshots

}  // namespace

FakeBackend::FakeBackend(FakeBackendOptions options) : options_(std::move(options)) {
  info_.model_id = "fake";
  info_.snapshot_version = options_.split_snapshots ? kSplitSnapshotVersion : kSnapshotVersion;
  if (options_.split_snapshots) info_.row_tables = {RowTable{1, 8}, RowTable{kGroup, 8}};
  info_.vocab_size = options_.vocab_size;
  info_.eos_ids = options_.eos_ids;
  info_.max_context = options_.max_context;
  info_.max_streams = options_.max_streams;
  info_.memory_budget_bytes = options_.memory_budget_bytes;
  info_.max_draft_depth = options_.max_draft_depth;
  info_.max_verify_rows = options_.max_verify_rows;
  info_.max_prefill_rows = options_.max_prefill_rows;
  info_.embed_dim = options_.embed_dim;
  for (int32_t r = 1; r <= options_.max_verify_rows; ++r) {
    info_.window_cost.push_back(static_cast<double>(options_.call_ns + options_.row_ns * r) /
                                static_cast<double>(options_.call_ns + options_.row_ns));
  }
}

uint64_t FakeBackend::chain(uint64_t previous, int64_t position, TokenId token) {
  return splitmix64_mix(previous ^ splitmix64_mix(static_cast<uint64_t>(position) * kGoldenGamma +
                                                  static_cast<uint32_t>(token)));
}

uint64_t FakeBackend::embed_mix(std::span<const uint16_t> values, bool image) {
  uint64_t h = image ? 0x1A6Eull : 0x7E47ull;
  for (uint16_t v : values) h = splitmix64_mix(h ^ v);
  return h;
}

std::vector<float> FakeBackend::logits(uint64_t state) const {
  std::vector<float> out(options_.vocab_size);  // f32 [V]
  for (int32_t v = 0; v < options_.vocab_size; ++v) {
    const uint64_t bits = splitmix64_mix(state + static_cast<uint64_t>(v) * kGoldenGamma);
    out[v] = static_cast<float>(bits >> 40) * 0x1.0p-24f * options_.logit_scale;
  }
  return out;
}

int64_t FakeBackend::rows(StreamId stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? -1 : static_cast<int64_t>(it->second.chain.size());
}

StatusOr<FakeBackend::StreamState*> FakeBackend::find(StreamId stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "fake backend: stream {} is not open", stream);
  return &it->second;
}

void FakeBackend::charge(int64_t rows, int64_t row_ns) {
  if (options_.clock != nullptr) options_.clock->advance_ns(options_.call_ns + row_ns * rows);
}

Status FakeBackend::open(StreamId stream, const StreamSpec& spec) {
  if (streams_.count(stream) != 0) return error(StatusCode::internal, "fake backend: stream {} already open", stream);
  if (static_cast<int32_t>(streams_.size()) >= options_.max_streams) {
    return error(StatusCode::resource_exhausted, "fake backend: all {} slots are taken", options_.max_streams);
  }
  streams_[stream] = StreamState{spec, {}};
  calls_.push_back({FakeCall::Kind::open, {{stream, 0}}});
  return ok_status();
}

Status FakeBackend::prefill(std::span<const Piece> pieces) {
  FakeCall call{FakeCall::Kind::prefill, {}};
  int64_t total = 0;
  for (const Piece& piece : pieces) {
    DSV4_ASSIGN_OR_RETURN(StreamState * s, find(piece.stream));
    if (piece.start != static_cast<int64_t>(s->chain.size())) {
      return error(StatusCode::internal, "fake backend: piece of stream {} starts at {} but it holds {} rows",
                   piece.stream, piece.start, s->chain.size());
    }
    // Given rows: sorted, disjoint, inside the piece, count x embed_dim values each.
    std::vector<const EmbedRows*> given(piece.tokens.size(), nullptr);
    int64_t end = 0;
    for (const EmbedRows& e : piece.embeds) {
      if (options_.embed_dim == 0 || e.offset < end || e.count < 1 ||
          e.offset + e.count > static_cast<int64_t>(piece.tokens.size()) ||
          static_cast<int64_t>(e.values.size()) != e.count * options_.embed_dim) {
        return error(StatusCode::internal, "fake backend: stream {}: embedding rows [{}, +{}) with {} values in a "
                     "piece of {} rows", piece.stream, e.offset, e.count, e.values.size(), piece.tokens.size());
      }
      for (int64_t r = e.offset; r < e.offset + e.count; ++r) given[static_cast<size_t>(r)] = &e;
      end = e.offset + e.count;
    }
    for (size_t i = 0; i < piece.tokens.size(); ++i) {
      const uint64_t prev = s->chain.empty() ? kFakeRoot : s->chain.back();
      uint64_t next = chain(prev, piece.start + static_cast<int64_t>(i), piece.tokens[i]);
      if (const EmbedRows* e = given[i]) {
        const size_t at = static_cast<size_t>((static_cast<int64_t>(i) - e->offset) * options_.embed_dim);
        next ^= embed_mix(e->values.subspan(at, static_cast<size_t>(options_.embed_dim)), e->image);
      }
      s->chain.push_back(next);
    }
    call.streams.push_back({piece.stream, static_cast<int64_t>(piece.tokens.size())});
    total += static_cast<int64_t>(piece.tokens.size());
  }
  if (total > options_.max_prefill_rows) {
    return error(StatusCode::internal, "fake backend: prefill of {} rows exceeds {}", total, options_.max_prefill_rows);
  }
  calls_.push_back(std::move(call));
  charge(total, options_.prefill_row_ns < 0 ? options_.row_ns : options_.prefill_row_ns);
  return ok_status();
}

Status FakeBackend::verify(std::span<const Window> windows, std::vector<std::vector<RowResult>>* out) {
  FakeCall call{FakeCall::Kind::verify, {}};
  out->assign(windows.size(), {});
  int64_t total = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& window = windows[w];
    DSV4_ASSIGN_OR_RETURN(StreamState * s, find(window.stream));
    if (window.start != static_cast<int64_t>(s->chain.size()) || window.tokens.empty()) {
      return error(StatusCode::internal, "fake backend: window of stream {} starts at {} but it holds {} rows",
                   window.stream, window.start, s->chain.size());
    }
    for (size_t i = 0; i < window.tokens.size(); ++i) {
      const int64_t position = window.start + static_cast<int64_t>(i);
      const uint64_t prev = s->chain.empty() ? kFakeRoot : s->chain.back();
      s->chain.push_back(chain(prev, position, window.tokens[i]));
      const std::vector<float> row = logits(s->chain.back());
      RowResult result;
      result.token = draw_row(row, s->spec.sampling, s->spec.seed, position + 1, window.mask(i));
      if (window.logprobs) {
        result.logprob = token_logprob(row, result.token);
        if (i + 1 < window.tokens.size()) result.proposed_logprob = token_logprob(row, window.tokens[i + 1]);
      }
      result.top = top_logprobs(row, window.top_logprobs);
      (*out)[w].push_back(std::move(result));
    }
    call.streams.push_back({window.stream, static_cast<int64_t>(window.tokens.size())});
    total += static_cast<int64_t>(window.tokens.size());
  }
  if (total > options_.max_verify_rows) {
    return error(StatusCode::internal, "fake backend: verify of {} rows exceeds {}", total, options_.max_verify_rows);
  }
  calls_.push_back(std::move(call));
  charge(total, options_.row_ns);
  return ok_status();
}

Status FakeBackend::keep(StreamId stream, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(StreamState * s, find(stream));
  if (rows < 0 || rows > static_cast<int64_t>(s->chain.size())) {
    return error(StatusCode::internal, "fake backend: keep {} rows of stream {} holding {}", rows, stream,
                 s->chain.size());
  }
  s->chain.resize(static_cast<size_t>(rows));
  calls_.push_back({FakeCall::Kind::keep, {{stream, rows}}});
  return ok_status();
}

Status FakeBackend::draft(std::span<const DraftRequest> requests, std::vector<DraftProposal>* out) {
  FakeCall call{FakeCall::Kind::draft, {}};
  out->assign(requests.size(), {});
  for (size_t r = 0; r < requests.size(); ++r) {
    const DraftRequest& request = requests[r];
    DSV4_ASSIGN_OR_RETURN(StreamState * s, find(request.stream));
    if (request.position != static_cast<int64_t>(s->chain.size())) {
      return error(StatusCode::internal, "fake backend: draft of stream {} at {} but it holds {} rows",
                   request.stream, request.position, s->chain.size());
    }
    // Follow the true draws from the anchor without touching the stream; corrupt some of them.
    uint64_t state = s->chain.empty() ? kFakeRoot : s->chain.back();
    TokenId feed = request.anchor;
    for (int32_t d = 0; d < request.depth; ++d) {
      const int64_t position = request.position + d;
      state = chain(state, position, feed);
      const std::vector<float> row = logits(state);
      TokenId token = sample_keyed(row, s->spec.sampling, s->spec.seed, position + 1);
      const bool miss = ((splitmix64_mix(state ^ 0xD4AF7ull) >> 7) & options_.draft_miss_mask) == 0;
      if (miss) token = (token + 1) % options_.vocab_size;
      (*out)[r].tokens.push_back(token);
      (*out)[r].probabilities.push_back(miss ? 0.25f : 0.75f);
      feed = token;
    }
    call.streams.push_back({request.stream, request.depth});
  }
  calls_.push_back(std::move(call));
  charge(0, options_.row_ns);
  return ok_status();
}

StatusOr<std::vector<uint8_t>> FakeBackend::snapshot(StreamId stream) {
  DSV4_ASSIGN_OR_RETURN(StreamState * s, find(stream));
  const uint64_t rows = s->chain.size();
  std::vector<uint8_t> bytes(16 + 8 * rows);
  std::memcpy(bytes.data(), &kSnapshotMagic, 4);
  std::memcpy(bytes.data() + 4, &kSnapshotVersion, 4);
  std::memcpy(bytes.data() + 8, &rows, 8);
  if (rows != 0) std::memcpy(bytes.data() + 16, s->chain.data(), 8 * rows);
  calls_.push_back({FakeCall::Kind::snapshot, {{stream, static_cast<int64_t>(rows)}}});
  return bytes;
}

Status FakeBackend::restore(StreamId stream, std::span<const uint8_t> bytes, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(StreamState * s, find(stream));
  calls_.push_back({FakeCall::Kind::restore, {{stream, rows}}});
  uint32_t magic = 0, version = 0;
  uint64_t held = 0;
  if (bytes.size() >= 16) {
    std::memcpy(&magic, bytes.data(), 4);
    std::memcpy(&version, bytes.data() + 4, 4);
    std::memcpy(&held, bytes.data() + 8, 8);
  }
  if (bytes.size() < 16 || magic != kSnapshotMagic || version != kSnapshotVersion ||
      held != static_cast<uint64_t>(rows) || bytes.size() != 16 + 8 * held) {
    s->chain.clear();
    return error(StatusCode::data_loss, "fake backend: snapshot of {} bytes is not a {}-row fake snapshot",
                 bytes.size(), rows);
  }
  s->chain.resize(held);
  if (held != 0) std::memcpy(s->chain.data(), bytes.data() + 16, 8 * held);
  return ok_status();
}

uint64_t FakeBackend::group_digest(uint64_t state) { return splitmix64_mix(state ^ 0x6A09E667F3BCC908ull); }

StatusOr<SnapshotParts> FakeBackend::snapshot_parts(StreamId stream, int64_t from) {
  DSV4_ASSIGN_OR_RETURN(StreamState * s, find(stream));
  const int64_t rows = static_cast<int64_t>(s->chain.size());
  if (!options_.split_snapshots || from < 0 || from > rows) {
    return error(StatusCode::invalid_argument, "fake backend: split snapshot of stream {} from {} ({} rows)", stream,
                 from, rows);
  }
  SnapshotParts parts;
  parts.bounded.resize(kBoundedBytes);
  const uint64_t held = static_cast<uint64_t>(rows);
  const uint64_t last = rows == 0 ? 0 : s->chain.back();
  std::memcpy(parts.bounded.data(), &kSnapshotMagic, 4);
  std::memcpy(parts.bounded.data() + 4, &kSplitSnapshotVersion, 4);
  std::memcpy(parts.bounded.data() + 8, &held, 8);
  std::memcpy(parts.bounded.data() + 16, &last, 8);
  parts.rows.resize(2);
  parts.rows[0].resize(static_cast<size_t>(8 * (rows - from)));
  if (rows > from) std::memcpy(parts.rows[0].data(), s->chain.data() + from, parts.rows[0].size());
  for (int64_t j = from / kGroup; j < rows / kGroup; ++j) {
    const uint64_t digest = group_digest(s->chain[static_cast<size_t>(j * kGroup + kGroup - 1)]);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&digest);
    parts.rows[1].insert(parts.rows[1].end(), p, p + 8);
  }
  calls_.push_back({FakeCall::Kind::snapshot, {{stream, rows}}});
  return parts;
}

Status FakeBackend::restore_parts(StreamId stream, std::span<const uint8_t> bounded, std::span<const RowChunks> tables,
                                  int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(StreamState * s, find(stream));
  calls_.push_back({FakeCall::Kind::restore, {{stream, rows}}});
  std::vector<uint64_t> chain, digests;
  auto gather = [](const RowChunks& chunks, std::vector<uint64_t>& out) {
    for (std::span<const uint8_t> c : chunks) {
      const size_t at = out.size();
      out.resize(at + c.size() / 8);
      std::memcpy(out.data() + at, c.data(), c.size() / 8 * 8);
      if (c.size() % 8 != 0) return false;
    }
    return true;
  };
  uint32_t magic = 0, version = 0;
  uint64_t held = 0, last = 0;
  bool ok = options_.split_snapshots && bounded.size() == kBoundedBytes && tables.size() == 2 && rows >= 0;
  if (ok) {
    std::memcpy(&magic, bounded.data(), 4);
    std::memcpy(&version, bounded.data() + 4, 4);
    std::memcpy(&held, bounded.data() + 8, 8);
    std::memcpy(&last, bounded.data() + 16, 8);
    ok = magic == kSnapshotMagic && version == kSplitSnapshotVersion && held == static_cast<uint64_t>(rows) &&
         gather(tables[0], chain) && gather(tables[1], digests) && chain.size() == held &&
         digests.size() == held / kGroup && (held == 0 ? last == 0 : chain.back() == last);
  }
  for (size_t j = 0; ok && j < digests.size(); ++j) ok = digests[j] == group_digest(chain[j * kGroup + kGroup - 1]);
  if (!ok) {
    s->chain.clear();
    return error(StatusCode::data_loss, "fake backend: split snapshot parts are not a consistent {}-row fake snapshot",
                 rows);
  }
  s->chain = std::move(chain);
  return ok_status();
}

void FakeBackend::release(StreamId stream) {
  if (streams_.erase(stream) != 0) calls_.push_back({FakeCall::Kind::release, {{stream, 0}}});
}

}  // namespace dsv4::lanes
