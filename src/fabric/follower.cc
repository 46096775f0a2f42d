// The follower loop (see follower.h).
#include "fabric/follower.h"

#include "fabric/plan.h"
#include "fabric/wire.h"

namespace dsv4::fabric {

FollowerResult run_follower(Control& control, lanes::Backend& backend, const FollowerOptions& options) {
  FollowerResult result;
  const auto failed = [&](int code, std::string why) {
    control.fail(code, why);
    result.exit_code = code;
    result.message = std::move(why);
    return result;
  };
  for (;;) {
    // Unbounded in time only while rank 0 stays alive: its silence or hang-up fails the fabric and wakes this.
    StatusOr<Frame> f = control.recv(0);
    if (!f.ok()) {
      result.exit_code = kExitPeerLost;
      result.message = f.status().message();
      return result;
    }
    if (f->kind == FrameKind::plan) {
      StatusOr<Plan> plan = decode_plan(f->payload);
      if (!plan.ok()) return failed(kExitDiverged, "rank 0 sent a damaged plan: " + plan.status().message());
      if (plan->sequence != result.counters.plans + 1)
        return failed(kExitDiverged, fmt::format("rank {} expected plan {}, got plan {}", control.rank(),
                                                 result.counters.plans + 1, plan->sequence));
      Reply reply;
      reply.sequence = plan->sequence;
      for (const Op& op : plan->ops) {
        const auto* open = std::get_if<OpenOp>(&op);
        if (open != nullptr && options.refuse_open_stream != 0 && open->stream == options.refuse_open_stream) {
          reply.outcomes.push_back(Outcome{StatusCode::resource_exhausted,
                                           fmt::format("test refusal: rank {} refuses stream {}", control.rank(),
                                                       open->stream),
                                           0, {}});
          continue;
        }
        reply.outcomes.push_back(execute_op(backend, op, control.rank(), control.world(), nullptr, nullptr));
      }
      count_plan(result.counters, f->payload, plan->ops.size());
      if (!control.send(0, FrameKind::reply, encode_reply(reply)).ok()) {
        result.exit_code = kExitPeerLost;
        result.message = "rank 0 was lost while answering a plan";
        return result;
      }
      continue;
    }
    if (f->kind == FrameKind::stop) {
      ByteReader in(f->payload);
      const uint64_t plans = in.u64("plans"), ops = in.u64("ops"), digest = in.u64("trace digest");
      if (!in.finish("stop").ok()) return failed(kExitDiverged, "rank 0 sent a damaged stop");
      ByteWriter w;
      w.u64(result.counters.plans);
      w.u64(result.counters.ops);
      w.u64(result.counters.trace_digest);
      (void)control.send(0, FrameKind::stopped, w.data());
      control.close();
      if (plans != result.counters.plans || ops != result.counters.ops || digest != result.counters.trace_digest) {
        result.exit_code = kExitDiverged;
        result.message = fmt::format("rank 0 stopped after {} plans / {} ops, rank {} after {} / {}", plans, ops,
                                     control.rank(), result.counters.plans, result.counters.ops);
      }
      return result;
    }
    return failed(kExitDiverged, fmt::format("rank 0 sent an unexpected {} frame", frame_kind_name(f->kind)));
  }
}

}  // namespace dsv4::fabric
