// Plan and reply encoding, result digests and op execution (see plan.h).
#include "fabric/plan.h"

#include <bit>

#include "fabric/wire.h"

namespace dsv4::fabric {
namespace {

enum class OpTag : uint8_t { open = 1, prefill, verify, keep, draft, snapshot, restore, release };

void put_spec(ByteWriter& w, const lanes::StreamSpec& s) {
  w.f32(s.sampling.temperature);
  w.i32(s.sampling.top_k);
  w.f32(s.sampling.top_p);
  w.f32(s.sampling.min_p);
  w.u64(s.seed);
  w.i64(s.max_rows);
}

lanes::StreamSpec get_spec(ByteReader& in) {
  lanes::StreamSpec s;
  s.sampling.temperature = in.f32("temperature");
  s.sampling.top_k = in.i32("top_k");
  s.sampling.top_p = in.f32("top_p");
  s.sampling.min_p = in.f32("min_p");
  s.seed = in.u64("seed");
  s.max_rows = in.i64("max_rows");
  return s;
}

struct Encoder {
  ByteWriter& w;
  void operator()(const OpenOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::open));
    w.u64(o.stream);
    put_spec(w, o.spec);
  }
  void operator()(const PrefillOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::prefill));
    w.u64(o.pieces.size());
    for (const PieceOp& p : o.pieces) {
      w.u64(p.stream);
      w.i64(p.start);
      w.i32s(p.tokens);
    }
  }
  void operator()(const VerifyOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::verify));
    w.u64(o.windows.size());
    for (const lanes::Window& win : o.windows) {
      w.u64(win.stream);
      w.i64(win.start);
      w.i32s(win.tokens);
      w.u8(win.logprobs ? 1 : 0);
      w.i32(win.top_logprobs);
    }
  }
  void operator()(const KeepOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::keep));
    w.u64(o.stream);
    w.i64(o.rows);
  }
  void operator()(const DraftOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::draft));
    w.u64(o.requests.size());
    for (const lanes::DraftRequest& q : o.requests) {
      w.u64(q.stream);
      w.i32(q.anchor);
      w.i64(q.position);
      w.i32(q.depth);
    }
  }
  void operator()(const SnapshotOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::snapshot));
    w.u64(o.stream);
  }
  void operator()(const RestoreOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::restore));
    w.u64(o.stream);
    w.bytes(o.bytes);
    w.i64(o.rows);
  }
  void operator()(const ReleaseOp& o) {
    w.u8(static_cast<uint8_t>(OpTag::release));
    w.u64(o.stream);
  }
};

Op decode_op(ByteReader& in) {
  const uint8_t tag = in.u8("op tag");
  switch (static_cast<OpTag>(tag)) {
    case OpTag::open: {
      OpenOp o;
      o.stream = in.u64("stream");
      o.spec = get_spec(in);
      return o;
    }
    case OpTag::prefill: {
      PrefillOp o;
      const uint64_t n = in.count("pieces", 24);
      for (uint64_t i = 0; i < n && in.status().ok(); ++i) {
        PieceOp p;
        p.stream = in.u64("stream");
        p.start = in.i64("start");
        p.tokens = in.i32s("tokens");
        o.pieces.push_back(std::move(p));
      }
      return o;
    }
    case OpTag::verify: {
      VerifyOp o;
      const uint64_t n = in.count("windows", 29);
      for (uint64_t i = 0; i < n && in.status().ok(); ++i) {
        lanes::Window win;
        win.stream = in.u64("stream");
        win.start = in.i64("start");
        win.tokens = in.i32s("tokens");
        win.logprobs = in.u8("logprobs") != 0;
        win.top_logprobs = in.i32("top_logprobs");
        o.windows.push_back(std::move(win));
      }
      return o;
    }
    case OpTag::keep: {
      KeepOp o;
      o.stream = in.u64("stream");
      o.rows = in.i64("rows");
      return o;
    }
    case OpTag::draft: {
      DraftOp o;
      const uint64_t n = in.count("requests", 24);
      for (uint64_t i = 0; i < n && in.status().ok(); ++i) {
        lanes::DraftRequest q;
        q.stream = in.u64("stream");
        q.anchor = in.i32("anchor");
        q.position = in.i64("position");
        q.depth = in.i32("depth");
        o.requests.push_back(q);
      }
      return o;
    }
    case OpTag::snapshot:
      return SnapshotOp{in.u64("stream")};
    case OpTag::restore: {
      RestoreOp o;
      o.stream = in.u64("stream");
      o.bytes = in.bytes("bytes");
      o.rows = in.i64("rows");
      return o;
    }
    case OpTag::release:
      return ReleaseOp{in.u64("stream")};
  }
  in.fail(fmt::format("unknown op tag {}", tag));
  return ReleaseOp{};
}

uint64_t mix(uint64_t h, uint64_t v) { return lanes::splitmix64_mix(h ^ v) + lanes::kGoldenGamma; }

}  // namespace

const char* op_name(const Op& op) {
  static constexpr const char* names[] = {"open", "prefill", "verify", "keep", "draft", "snapshot", "restore",
                                          "release"};
  return names[op.index()];
}

std::vector<uint8_t> encode_plan(const Plan& plan) {
  ByteWriter w;
  w.u64(plan.sequence);
  w.u64(plan.ops.size());
  for (const Op& op : plan.ops) std::visit(Encoder{w}, op);
  return w.take();
}

StatusOr<Plan> decode_plan(std::span<const uint8_t> bytes) {
  ByteReader in(bytes);
  Plan plan;
  plan.sequence = in.u64("sequence");
  const uint64_t n = in.count("ops", 9);
  for (uint64_t i = 0; i < n && in.status().ok(); ++i) plan.ops.push_back(decode_op(in));
  DSV4_RETURN_IF_ERROR(in.finish("plan"));
  return plan;
}

std::vector<uint8_t> encode_reply(const Reply& reply) {
  ByteWriter w;
  w.u64(reply.sequence);
  w.u64(reply.outcomes.size());
  for (const Outcome& o : reply.outcomes) {
    w.u8(static_cast<uint8_t>(o.code));
    w.str(o.message);
    w.u64(o.digest);
    w.bytes(o.bytes);
  }
  return w.take();
}

StatusOr<Reply> decode_reply(std::span<const uint8_t> bytes) {
  ByteReader in(bytes);
  Reply r;
  r.sequence = in.u64("sequence");
  const uint64_t n = in.count("outcomes", 25);
  for (uint64_t i = 0; i < n && in.status().ok(); ++i) {
    Outcome o;
    const uint8_t code = in.u8("code");
    if (code > static_cast<uint8_t>(StatusCode::internal)) in.fail(fmt::format("unknown status code {}", code));
    o.code = static_cast<StatusCode>(code);
    o.message = in.str("message");
    o.digest = in.u64("digest");
    o.bytes = in.bytes("bytes");
    r.outcomes.push_back(std::move(o));
  }
  DSV4_RETURN_IF_ERROR(in.finish("reply"));
  return r;
}

uint64_t digest_rows(const std::vector<std::vector<lanes::RowResult>>& rows) {
  uint64_t h = 0x5EED0001;
  for (const auto& window : rows) {
    h = mix(h, window.size());
    for (const lanes::RowResult& r : window) {
      h = mix(h, static_cast<uint32_t>(r.token));
      h = mix(h, std::bit_cast<uint32_t>(r.logprob));
      h = mix(h, std::bit_cast<uint32_t>(r.proposed_logprob));
      h = mix(h, r.top.size());
      for (const lanes::TokenLogprob& t : r.top)
        h = mix(mix(h, static_cast<uint32_t>(t.token)), std::bit_cast<uint32_t>(t.logprob));
    }
  }
  return h;
}

uint64_t digest_proposals(const std::vector<lanes::DraftProposal>& proposals) {
  uint64_t h = 0x5EED0002;
  for (const lanes::DraftProposal& p : proposals) {
    h = mix(h, p.tokens.size());
    for (lanes::TokenId t : p.tokens) h = mix(h, static_cast<uint32_t>(t));
    for (float q : p.probabilities) h = mix(h, std::bit_cast<uint32_t>(q));
  }
  return h;
}

Outcome execute_op(lanes::Backend& backend, const Op& op, int32_t rank, int32_t world,
                   std::vector<std::vector<lanes::RowResult>>* out_rows,
                   std::vector<lanes::DraftProposal>* out_proposals) {
  Outcome out;
  Status s;
  if (const auto* o = std::get_if<OpenOp>(&op)) {
    s = backend.open(o->stream, o->spec);
  } else if (const auto* o = std::get_if<PrefillOp>(&op)) {
    std::vector<lanes::Piece> pieces;
    for (const PieceOp& p : o->pieces) pieces.push_back(lanes::Piece{p.stream, p.start, p.tokens, {}});
    s = backend.prefill(pieces);
  } else if (const auto* o = std::get_if<VerifyOp>(&op)) {
    std::vector<std::vector<lanes::RowResult>> rows;
    s = backend.verify(o->windows, &rows);
    if (s.ok()) out.digest = digest_rows(rows);
    if (out_rows != nullptr) *out_rows = std::move(rows);
  } else if (const auto* o = std::get_if<KeepOp>(&op)) {
    s = backend.keep(o->stream, o->rows);
  } else if (const auto* o = std::get_if<DraftOp>(&op)) {
    std::vector<lanes::DraftProposal> proposals;
    s = backend.draft(o->requests, &proposals);
    if (s.ok()) out.digest = digest_proposals(proposals);
    if (out_proposals != nullptr) *out_proposals = std::move(proposals);
  } else if (const auto* o = std::get_if<SnapshotOp>(&op)) {
    StatusOr<std::vector<uint8_t>> bytes = backend.snapshot(o->stream);
    if (bytes.ok()) out.bytes = std::move(bytes).value();
    else s = bytes.status();
  } else if (const auto* o = std::get_if<RestoreOp>(&op)) {
    StatusOr<std::vector<uint8_t>> part = fabric_snapshot_part(o->bytes, rank, world);
    s = part.ok() ? backend.restore(o->stream, *part, o->rows) : part.status();
  } else if (const auto* o = std::get_if<ReleaseOp>(&op)) {
    backend.release(o->stream);
  }
  out.code = s.code();
  out.message = s.message();
  return out;
}

std::vector<uint8_t> fabric_snapshot(const std::vector<std::vector<uint8_t>>& per_rank) {
  ByteWriter w;
  w.u32(0x46534E50u);  // "PNSF"
  w.u32(static_cast<uint32_t>(per_rank.size()));
  for (const auto& b : per_rank) w.bytes(b);
  return w.take();
}

StatusOr<std::vector<uint8_t>> fabric_snapshot_part(std::span<const uint8_t> bytes, int32_t rank, int32_t world) {
  ByteReader in(bytes);
  if (in.u32("magic") != 0x46534E50u) return error(StatusCode::data_loss, "not a fabric snapshot");
  const uint32_t n = in.u32("world");
  if (in.status().ok() && static_cast<int32_t>(n) != world)
    return error(StatusCode::data_loss, "a snapshot of {} ranks cannot restore on {}", n, world);
  std::vector<uint8_t> mine;
  for (int32_t r = 0; r < world && in.status().ok(); ++r) {
    std::vector<uint8_t> b = in.bytes("rank bytes");
    if (r == rank) mine = std::move(b);
  }
  DSV4_RETURN_IF_ERROR(in.finish("fabric snapshot"));
  return mine;
}

}  // namespace dsv4::fabric
