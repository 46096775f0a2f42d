// The lane core's prompt filling: which prompt pieces a step takes, what follows them (the prompt cache's page
// snapshots, progress, the switch to decoding).
#include <algorithm>

#include "lanes/lane_host.h"
#include "lanes/prompt_embeds.h"

namespace dsv4::lanes {

void LaneHost::choose_pieces(int64_t rows, std::vector<Piece>& pieces, std::vector<Stream*>& owners) {
  int64_t budget = rows;
  const int64_t page = options_.cache != nullptr ? options_.cache->page_tokens() : 0;
  for (auto& stream : running_) {
    if (budget == 0) break;
    if (stream->decoding || stream->awaiting_prompt) continue;
    const int64_t prompt_rows = static_cast<int64_t>(stream->request.prompt.size()) - 1;
    int64_t end = std::min(stream->rows + budget, prompt_rows);
    // End on a page boundary when one lies inside the piece, so the cache can keep a snapshot there (the
    // prompt's last boundary included: the rows after it follow as a short piece).
    if (page > 0 && end % page != 0 && (end / page) * page > stream->rows) {
      end = (end / page) * page;
    }
    pieces.push_back(Piece{stream->sid, stream->rows,
                           std::span(stream->request.prompt).subspan(static_cast<size_t>(stream->rows),
                                                                     static_cast<size_t>(end - stream->rows)),
                           piece_embeds(stream->request, stream->rows, end - stream->rows, info_.embed_dim)});
    owners.push_back(stream.get());
    budget -= end - stream->rows;
  }
}

void LaneHost::after_pieces(const std::vector<Piece>& pieces, const std::vector<Stream*>& owners) {
  const int64_t page = options_.cache != nullptr ? options_.cache->page_tokens() : 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    Stream& s = *owners[i];
    s.rows += static_cast<int64_t>(pieces[i].tokens.size());
    const int64_t prompt_rows = static_cast<int64_t>(s.request.prompt.size()) - 1;
    if (page > 0 && s.rows % page == 0) {
      std::span<const cache::Key> prefix = std::span(s.keys).first(static_cast<size_t>(s.rows));
      if (!options_.cache->contains(prefix)) keep_snapshot(s.sid, prefix);
    }
    if (s.sink) s.sink->on_prefill(s.id, s.rows, prompt_rows + 1);
    if (s.rows == prompt_rows) {
      s.decoding = true;
      s.pending = s.request.prompt.back();
      if (s.request.n > 1 && s.choice == 0) share_prompt(s);
    }
  }
}

void LaneHost::keep_snapshot(StreamId sid, std::span<const cache::Key> prefix) {
  if (info_.row_tables.empty()) {
    StatusOr<std::vector<uint8_t>> bytes = backend_.snapshot(sid);
    if (bytes.ok()) (void)options_.cache->insert(prefix, std::move(bytes).value());
    return;
  }
  // Split: only the table rows the cache does not hold yet along this prefix.
  const int64_t from = options_.cache->shared_rows(prefix);
  StatusOr<SnapshotParts> parts = backend_.snapshot_parts(sid, from);
  if (parts.ok()) (void)options_.cache->insert_parts(prefix, std::move(parts->bounded), from, parts->rows);
}

}  // namespace dsv4::lanes
