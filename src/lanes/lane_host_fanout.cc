// A request's n choices (Request::n > 1): the first member fills the prompt; the others are opened beside it at
// admission (all n reserved together) and wait; once the first holds the prompt's rows, its state is copied into
// each of them (snapshot/restore, or the split parts), and every member decodes on its own with its own seed
// (member_seed), so member i equals a solo request with that seed.
#include "lanes/fanout.h"
#include "lanes/lane_host.h"

namespace dsv4::lanes {

void LaneHost::admit_members(Stream& first) {
  const Request& r = first.request;
  for (int32_t i = 1; i < r.n; ++i) {
    auto member = std::make_unique<Stream>();
    member->id = first.id + static_cast<RequestId>(i);
    member->group = first.id;
    member->choice = i;
    member->request = r;
    member->keys = first.keys;
    member->sink = first.sink;
    member->seed = member_seed(first.seed, i);
    member->max_rows = first.max_rows;
    member->reserved_bytes = first.reserved_bytes;
    member->sid = next_sid_++;
    member->seq = next_seq_++;
    Status opened = backend_.open(member->sid, StreamSpec{r.sampling, member->seed, member->max_rows});
    if (!opened.ok()) {
      finish_unadmitted(std::move(member), FinishReason::error, opened.to_string());
      continue;
    }
    reserved_bytes_ += member->reserved_bytes;
    // The per-request state the first member was admitted with (nothing has run yet).
    member->usage.prompt_tokens = first.usage.prompt_tokens;
    member->forced = first.forced;
    member->thinking = first.thinking;
    member->choosing = first.choosing;
    if (first.cursor != nullptr) member->cursor = first.cursor->clone();  // at the start: nothing drawn yet
    member->depth = first.depth;
    member->awaiting_prompt = true;
    running_.push_back(std::move(member));
  }
  if (first.decoding) share_prompt(first);  // the prompt was whole at admission (one token, or cached)
}

void LaneHost::share_prompt(Stream& first) {
  const int64_t rows = first.rows;
  std::vector<Stream*> waiting;
  for (auto& s : running_) {
    if (s->group == first.id && s->awaiting_prompt) waiting.push_back(s.get());
  }
  if (waiting.empty()) return;
  // One snapshot of the first member, restored into each waiting one. A failure leaves that member to fill the
  // prompt itself (a failed restore leaves the stream empty and usable): slower, the same output.
  StatusOr<std::vector<uint8_t>> whole = std::vector<uint8_t>{};
  StatusOr<SnapshotParts> parts = SnapshotParts{};
  if (rows > 0) {
    if (info_.row_tables.empty()) whole = backend_.snapshot(first.sid);
    else parts = backend_.snapshot_parts(first.sid, 0);
  }
  for (Stream* m : waiting) {
    m->awaiting_prompt = false;
    Status restored = ok_status();
    if (rows > 0 && info_.row_tables.empty()) {
      restored = whole.ok() ? backend_.restore(m->sid, *whole, rows) : whole.status();
    } else if (rows > 0) {
      if (parts.ok()) {
        std::vector<RowChunks> tables;
        for (const std::vector<uint8_t>& t : parts->rows) tables.push_back(RowChunks{std::span<const uint8_t>(t)});
        restored = backend_.restore_parts(m->sid, parts->bounded, tables, rows);
      } else {
        restored = parts.status();
      }
    }
    if (!restored.ok()) continue;
    m->rows = rows;
    m->usage.cached_prompt_tokens = first.usage.cached_prompt_tokens;
    m->decoding = true;
    m->pending = m->request.prompt.back();
  }
}

}  // namespace dsv4::lanes
