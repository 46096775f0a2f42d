// LeaderBackend: plans out, replies in, statuses combined in rank order (see leader.h).
#include "fabric/leader.h"

#include "fabric/wire.h"

namespace dsv4::fabric {

void count_plan(FabricCounters& counters, std::span<const uint8_t> plan_bytes, size_t ops) {
  counters.plans += 1;
  counters.ops += ops;
  counters.trace_digest = digest_bytes(plan_bytes, counters.trace_digest);
}

LeaderBackend::LeaderBackend(Control& control, lanes::Backend& local)
    : control_(control), local_(local), info_(local.info()) {
  info_.model_id += fmt::format(" (fabric of {} ranks)", control.world());
  info_.snapshot_version += 0x10000u * static_cast<uint32_t>(control.world());
  info_.row_tables.clear();  // fabric snapshots are whole (split snapshots: see lanes/backend.h)
  info_.embed_dim = 0;       // plans carry tokens only: prompts with given embedding rows (images) are refused
}

StatusOr<LeaderBackend::Run> LeaderBackend::run(Op op, std::vector<std::vector<lanes::RowResult>>* rows,
                                                std::vector<lanes::DraftProposal>* proposals,
                                                std::vector<uint8_t>* snapshot_bytes) {
  Plan plan;
  plan.sequence = counters_.plans + 1;
  plan.ops = std::move(queued_);
  queued_.clear();
  plan.ops.push_back(std::move(op));
  const std::vector<uint8_t> bytes = encode_plan(plan);
  for (int32_t r = 1; r < control_.world(); ++r) DSV4_RETURN_IF_ERROR(control_.send(r, FrameKind::plan, bytes));
  // The queued ops already ran here when they were queued; only the last op runs now.
  const Op& last = plan.ops.back();
  Outcome mine = execute_op(local_, last, 0, control_.world(), rows, proposals);
  if (snapshot_bytes != nullptr) *snapshot_bytes = mine.bytes;
  count_plan(counters_, bytes, plan.ops.size());

  Run result;
  result.status = Status(mine.code, mine.message);
  const Deadline answer_by = deadline_in(control_.options().plan_timeout);
  for (int32_t r = 1; r < control_.world(); ++r) {
    StatusOr<Frame> got = control_.expect(r, FrameKind::reply, answer_by);
    if (!got.ok() && !control_.failed()) {
      const std::string why = fmt::format("rank {} did not answer plan {} within {:.0f} s", r, plan.sequence,
                                          control_.options().plan_timeout.count() / 1000.0);
      control_.fail(kExitPeerLost, why);
      return Status(StatusCode::unavailable, why);
    }
    DSV4_ASSIGN_OR_RETURN(Frame f, std::move(got));
    StatusOr<Reply> reply = decode_reply(f.payload);
    if (!reply.ok() || reply->sequence != plan.sequence || reply->outcomes.size() != plan.ops.size()) {
      const std::string why =
          !reply.ok() ? reply.status().message()
                      : fmt::format("it answered plan {} with {} outcomes; plan {} has {} ops", reply->sequence,
                                    reply->outcomes.size(), plan.sequence, plan.ops.size());
      control_.fail(kExitDiverged, fmt::format("rank {} sent a bad reply: {}", r, why));
      return error(StatusCode::internal, "rank {} sent a bad reply: {}", r, why);
    }
    for (size_t i = 0; i + 1 < plan.ops.size(); ++i) {
      const Outcome& o = reply->outcomes[i];
      if (o.code != StatusCode::ok) {
        const std::string why = fmt::format("rank {} failed a queued {} that rank 0 ran: {}", r,
                                            op_name(plan.ops[i]), o.message);
        control_.fail(kExitDiverged, why);
        return Status(StatusCode::internal, why);
      }
    }
    Outcome& theirs = reply->outcomes.back();
    if (result.status.ok() && theirs.code != StatusCode::ok)
      result.status = Status(theirs.code, fmt::format("rank {}: {}", r, theirs.message));
    result.followers.push_back(std::move(theirs));
  }
  // Every rank must have drawn the same tokens and proposed the same drafts.
  if (mine.code == StatusCode::ok && mine.digest != 0) {
    for (int32_t r = 1; r < control_.world(); ++r) {
      const Outcome& o = result.followers[static_cast<size_t>(r - 1)];
      if (o.code == StatusCode::ok && o.digest != mine.digest) {
        const std::string why = fmt::format("rank {} computed different {} results than rank 0 in plan {}", r,
                                            op_name(last), plan.sequence);
        control_.fail(kExitDiverged, why);
        return Status(StatusCode::internal, why);
      }
    }
  }
  return result;
}

Status LeaderBackend::open(lanes::StreamId stream, const lanes::StreamSpec& spec) {
  DSV4_ASSIGN_OR_RETURN(Run r, run(OpenOp{stream, spec}, nullptr, nullptr, nullptr));
  if (!r.status.ok()) {
    // The lane host does not release a stream whose open failed: undo it on the ranks where it opened.
    local_.release(stream);
    queued_.push_back(ReleaseOp{stream});
  }
  return r.status;
}

Status LeaderBackend::prefill(std::span<const lanes::Piece> pieces) {
  for (const lanes::Piece& p : pieces)
    if (!p.embeds.empty())
      return error(StatusCode::unimplemented, "stream {}: given embedding rows (images) do not cross the fabric",
                   p.stream);
  PrefillOp op;
  for (const lanes::Piece& p : pieces) op.pieces.push_back(PieceOp{p.stream, p.start, {p.tokens.begin(), p.tokens.end()}});
  DSV4_ASSIGN_OR_RETURN(Run r, run(std::move(op), nullptr, nullptr, nullptr));
  return r.status;
}

Status LeaderBackend::verify(std::span<const lanes::Window> windows, std::vector<std::vector<lanes::RowResult>>* out) {
  DSV4_ASSIGN_OR_RETURN(Run r, run(VerifyOp{{windows.begin(), windows.end()}}, out, nullptr, nullptr));
  return r.status;
}

Status LeaderBackend::keep(lanes::StreamId stream, int64_t rows) {
  DSV4_RETURN_IF_ERROR(local_.keep(stream, rows));
  queued_.push_back(KeepOp{stream, rows});
  return ok_status();
}

Status LeaderBackend::draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) {
  DSV4_ASSIGN_OR_RETURN(Run r, run(DraftOp{{requests.begin(), requests.end()}}, nullptr, out, nullptr));
  return r.status;
}

StatusOr<std::vector<uint8_t>> LeaderBackend::snapshot(lanes::StreamId stream) {
  std::vector<uint8_t> mine;
  DSV4_ASSIGN_OR_RETURN(Run r, run(SnapshotOp{stream}, nullptr, nullptr, &mine));
  DSV4_RETURN_IF_ERROR(r.status);
  std::vector<std::vector<uint8_t>> parts;
  parts.push_back(std::move(mine));
  for (Outcome& o : r.followers) parts.push_back(std::move(o.bytes));
  return fabric_snapshot(parts);
}

Status LeaderBackend::restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Run r, run(RestoreOp{stream, {bytes.begin(), bytes.end()}, rows}, nullptr, nullptr, nullptr));
  if (!r.status.ok()) {
    // The contract: a failed restore leaves the stream empty and usable on every rank. Ranks whose restore
    // succeeded are brought back to 0 rows.
    local_.release(stream);
    queued_.push_back(ReleaseOp{stream});
    return error(r.status.code(), "{} (the stream was closed on every rank)", r.status.message());
  }
  return ok_status();
}

void LeaderBackend::release(lanes::StreamId stream) {
  local_.release(stream);
  queued_.push_back(ReleaseOp{stream});
}

Status LeaderBackend::stop() {
  if (!queued_.empty()) {
    // Send the last queued ops with a harmless final release of stream 0 (never a real stream id).
    DSV4_ASSIGN_OR_RETURN(Run r, run(ReleaseOp{0}, nullptr, nullptr, nullptr));
    (void)r;
  }
  ByteWriter w;
  w.u64(counters_.plans);
  w.u64(counters_.ops);
  w.u64(counters_.trace_digest);
  for (int32_t r = 1; r < control_.world(); ++r) DSV4_RETURN_IF_ERROR(control_.send(r, FrameKind::stop, w.data()));
  for (int32_t r = 1; r < control_.world(); ++r) {
    DSV4_ASSIGN_OR_RETURN(Frame f, control_.expect(r, FrameKind::stopped, deadline_in(control_.options().peer_timeout * 2)));
    ByteReader in(f.payload);
    const uint64_t plans = in.u64("plans"), ops = in.u64("ops"), digest = in.u64("trace digest");
    DSV4_RETURN_IF_ERROR(in.finish("stopped"));
    if (plans != counters_.plans || ops != counters_.ops || digest != counters_.trace_digest) {
      const std::string why = fmt::format(
          "rank {} stopped after {} plans / {} ops (trace {:016x}); rank 0 after {} / {} ({:016x})", r, plans, ops,
          digest, counters_.plans, counters_.ops, counters_.trace_digest);
      control_.fail(kExitDiverged, why);
      return Status(StatusCode::internal, why);
    }
  }
  control_.close();
  return ok_status();
}

}  // namespace dsv4::fabric
