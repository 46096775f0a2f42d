// The Backend contract: what a device implementation does for the lane core (pieces, verify, keep, drafts, snapshots).
//
// Ownership: the lane core owns streams and decides every round; a backend owns each stream's device state
// (KV caches, rings, draft-head state) and executes. All calls come from the one engine thread.
//
// A stream's life: open -> [restore] -> prefill pieces (prompt[0, L-1)) -> verify/keep/draft rounds -> release.
// The prompt's last token is not prefilled: it is row 0 (the pending row) of the stream's first verify window,
// so the first generated token is drawn exactly like every later one.
//
// Exactness (DESIGN.md principle 1): every row's arithmetic must not depend on which other rows or streams share
// a call, nor on piece boundaries; every draw is keyed by (stream seed, absolute position) with sample_keyed's
// rule (lanes/sampling.h) — a device sampler must agree with it bit for bit.
//
// Snapshots come whole (snapshot/restore) or split (snapshot_parts/restore_parts, for backends that name
// BackendInfo::row_tables): the split lets the prompt cache keep the append-only rows of a long prompt once, shared
// by every entry along it, instead of once per entry.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "lanes/sampling.h"
#include "lanes/token_mask.h"

namespace dsv4::lanes {

using StreamId = uint64_t;  // chosen by the lane core; unique while the stream is open

// One append-only row table of a stream's state: rows that only ever grow with the stream's positions and are never
// rewritten once complete (compressed KV rows, index-key rows, a per-position history). A stream holding `rows`
// positions holds rows / positions_per_row (floor) rows of the table, row j a pure function of the first
// (j + 1) * positions_per_row prompt tokens, so every stream with the same prefix holds the same bytes.
struct RowTable {
  int32_t positions_per_row = 1;  // >= 1 (a ratio-r compressed table has r)
  int64_t row_bytes = 0;          // bytes of one row; > 0
  bool operator==(const RowTable&) const = default;
};

// A split snapshot: the bounded part plus table rows from a starting position.
struct SnapshotParts {
  std::vector<uint8_t> bounded;            // all state but the tables' rows (rings, partial groups, carries, tails);
                                           // its size must not grow with the stream's rows
  std::vector<std::vector<uint8_t>> rows;  // [table] rows [from / ppr, held / ppr) of each row table, in order,
                                           // row_bytes each (ppr = the table's positions_per_row)
};

// One table's rows as consecutive chunks; concatenated in order they are rows [0, n) of the table.
using RowChunks = std::vector<std::span<const uint8_t>>;

// Facts about the loaded model and device, read once by the lane core.
struct BackendInfo {
  std::string model_id;             // weights + config identity; prompt-cache entries of another id are refused
  uint32_t snapshot_version = 0;    // format of snapshot bytes; entries of another version are refused
  int32_t vocab_size = 0;           // logits per row
  std::vector<TokenId> eos_ids;     // the model's end-of-sequence ids (a request may add its own)
  int64_t max_context = 0;          // most positions one stream may hold
  int32_t max_streams = 1;          // slots: streams open at once
  int64_t memory_budget_bytes = 0;  // bytes all open streams may hold together (see stream_bytes)
  int32_t max_draft_depth = 0;      // most drafts one DSpark proposal holds; 0 = no draft head
  int32_t max_verify_rows = 2;      // most rows in one verify call, all windows together; >= 2
  int32_t max_prefill_rows = 1;     // most prompt rows in one prefill call, all pieces together
  int64_t embed_dim = 0;            // width of given embedding rows (the model's hidden size); 0: prompts are
                                    // tokens only, and requests with PromptEmbeds are refused
  std::vector<double> window_cost;  // relative cost of a lone window of r rows at index r-1 (a fixed table,
                                    // never a timing: drafting depth must not depend on load); size >= 1
  std::vector<RowTable> row_tables;  // append-only tables of the split snapshot, in a fixed order; empty = whole
                                     // snapshots only (snapshot_parts/restore_parts are then never called)
};

// How a stream draws: fixed for its life.
struct StreamSpec {
  SamplingParams sampling;  // greedy or keyed sampling
  uint64_t seed = 0;        // the request's seed (or seed_from_prompt)
  int64_t max_rows = 0;     // positions the stream may reach (prompt + generated); <= max_context
};

// Rows of a prompt piece fed as given embedding rows instead of their tokens' embeddings: the part of an image's
// span (Request::embeds) that falls in the piece. The values are valid for the call only.
struct EmbedRows {
  int64_t offset = 0;                // first row, counted from the piece's start
  int64_t count = 0;                 // rows
  std::span<const uint16_t> values;  // bf16 [count, BackendInfo::embed_dim]
  bool image = true;                 // image positions: the MoE routes them with its image bias (bias_vl) and
                                     // Engram treats them as DEAD (gate 0, no n-grams through them)
};

// Prompt rows for one stream: tokens at absolute positions [start, start + tokens.size()).
// `start` always equals the rows the stream already holds (pieces arrive in order, any sizes).
struct Piece {
  StreamId stream = 0;
  int64_t start = 0;
  std::span<const TokenId> tokens;
  // Rows fed as given embeddings (sorted by offset, disjoint, inside the piece); their tokens still count as the
  // rows' ids. Only sent to a backend with BackendInfo::embed_dim > 0. Windows never carry any.
  std::vector<EmbedRows> embeds;
};

// One stream's verify window: row i feeds tokens[i] at position start + i and draws the token for
// position start + i + 1. tokens[0] is the pending row (last committed token, not yet fed); tokens[1..]
// are proposals (DSpark drafts or forced tokens) that the lane core checks against the draws.
struct Window {
  StreamId stream = 0;
  int64_t start = 0;             // absolute position of tokens[0]; equals the rows the stream holds
  std::vector<TokenId> tokens;   // size >= 1
  bool logprobs = false;         // fill RowResult::logprob and ::proposed_logprob
  int32_t top_logprobs = 0;      // fill RowResult::top with this many alternatives (0..20)
  // Empty, or one entry per row: row i draws among allowed[i] only (null entry: any token), with draw_row
  // (lanes/token_mask.h). Logprobs stay those of the raw, unmasked row. Masks are shared, read-only.
  std::vector<std::shared_ptr<const TokenMask>> allowed;
  const TokenMask* mask(size_t row) const { return row < allowed.size() ? allowed[row].get() : nullptr; }
};

// What one verify row produced (distribution of position start + i + 1).
struct RowResult {
  TokenId token = 0;              // the keyed draw: draw_row(row logits, spec.sampling, spec.seed, start+i+1,
                                  //   window.mask(i))
  float logprob = 0.0f;           // token_logprob(row logits, token) when Window::logprobs
  float proposed_logprob = 0.0f;  // token_logprob(row logits, tokens[i+1]) when logprobs and i+1 < rows
  std::vector<TokenLogprob> top;  // top_logprobs(row logits, Window::top_logprobs)
};

// A DSpark proposal request: propose `depth` tokens following `anchor` (the pending token at `position`).
// The stream holds exactly `position` rows when asked (kept rows only).
struct DraftRequest {
  StreamId stream = 0;
  TokenId anchor = 0;    // the pending token
  int64_t position = 0;  // absolute position of anchor
  int32_t depth = 0;     // 1..max_draft_depth
};

// Proposed tokens for positions position+1 .. position+depth, and the head's confidence in each.
// Proposals only propose: the lane core verifies every one, so they never change output.
struct DraftProposal {
  std::vector<TokenId> tokens;       // size <= depth (fewer when the head stops early)
  std::vector<float> probabilities;  // same size; the head's probability of each token
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Facts about the model and device; constant after construction.
  virtual const BackendInfo& info() const = 0;
  // Bytes a stream holding `rows` positions takes from memory_budget_bytes (admission reserves max_rows).
  virtual int64_t stream_bytes(int64_t rows) const = 0;

  // A new empty stream (0 rows) in a free slot.
  virtual Status open(StreamId stream, const StreamSpec& spec) = 0;
  // Feeds prompt rows of one or more streams in one forward; no draws.
  virtual Status prefill(std::span<const Piece> pieces) = 0;
  // One forward over every window; out[w].rows[i] for window w, row i. After it, each stream holds
  // start + tokens.size() rows until keep trims them.
  virtual Status verify(std::span<const Window> windows, std::vector<std::vector<RowResult>>* out) = 0;
  // One step of prompt pieces and verify windows of different streams together: out[w] as verify gives it.
  // Backends that can run them in one forward do (the engine's lane adapter); the default runs prefill, then
  // verify.
  virtual Status step(std::span<const Piece> pieces, std::span<const Window> windows,
                      std::vector<std::vector<RowResult>>* out) {
    if (!pieces.empty()) {
      Status st = prefill(pieces);
      if (!st.ok()) return st;
    }
    if (windows.empty()) {
      out->clear();
      return Status();
    }
    return verify(windows, out);
  }
  // Rolls the stream back to its first `rows` positions (the accepted rows); rows <= rows held.
  virtual Status keep(StreamId stream, int64_t rows) = 0;
  // DSpark proposals, one per request, in one batch; only called when max_draft_depth > 0.
  virtual Status draft(std::span<const DraftRequest> requests, std::vector<DraftProposal>* out) = 0;

  // The stream's whole state at its current rows as opaque bytes (the prompt cache stores them).
  virtual StatusOr<std::vector<uint8_t>> snapshot(StreamId stream) = 0;
  // Loads snapshot bytes taken at `rows` into a freshly opened stream; an error (damaged or foreign bytes)
  // leaves the stream empty (0 rows) and usable for a fresh prefill.
  virtual Status restore(StreamId stream, std::span<const uint8_t> bytes, int64_t rows) = 0;

  // Split snapshots, used instead of snapshot/restore when info().row_tables is non-empty (the defaults refuse).
  // The bounded part at the stream's current rows, plus each table's rows from position `from` (a multiple of the
  // prompt cache's page, <= rows held): the cache already holds the rows before `from`, stored from an ancestor entry.
  virtual StatusOr<SnapshotParts> snapshot_parts(StreamId stream, int64_t from) {
    (void)stream, (void)from;
    return error(StatusCode::unimplemented, "this backend keeps whole snapshots only");
  }
  // Loads a split snapshot taken at `rows` into a freshly opened stream: `bounded` from snapshot_parts, and per table
  // (tables.size() == row_tables.size()) its rows [0, rows / ppr) as chunks — the concatenation of snapshot_parts
  // rows of this entry and its ancestors. A device backend may copy each chunk straight into its row buffers. An error
  // (damaged, foreign or inconsistent parts) leaves the stream empty (0 rows) and usable for a fresh prefill.
  virtual Status restore_parts(StreamId stream, std::span<const uint8_t> bounded, std::span<const RowChunks> tables,
                               int64_t rows) {
    (void)stream, (void)bounded, (void)tables, (void)rows;
    return error(StatusCode::unimplemented, "this backend keeps whole snapshots only");
  }

  // The stream has left: free its slot, memory and held drafts. Unknown ids are ignored.
  virtual void release(StreamId stream) = 0;
};

}  // namespace dsv4::lanes
