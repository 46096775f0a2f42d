// Bounded replay's per-layer row tables of a call on the device (see attention.h: begin_bounded_call).
#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cuda/forward/attention.h"
#include "backends/cuda/forward/attention_tables.h"
#include "backends/cuda/runtime/call_meta.h"
#include "engine/row_space.h"

namespace dsv4::cuda {

namespace {

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// The host image of the tables: 256-aligned parts, each known by its offset until the image is staged.
struct Image {
  std::vector<uint8_t> bytes;
  template <typename T>
  int64_t add(const std::vector<T>& v) {
    const int64_t at = static_cast<int64_t>(bytes.size());
    const int64_t n = static_cast<int64_t>(v.size() * sizeof(T));
    bytes.resize(static_cast<size_t>(at + align256(std::max<int64_t>(n, 1))), 0);
    if (n > 0) std::memcpy(bytes.data() + at, v.data(), static_cast<size_t>(n));
    return at;
  }
};

// Offsets of one layer's parts in the image (-1: the call's own table, or none).
struct LayerParts {
  int32_t in_space = -1, out_space = -1;  // index into the staged spaces (-1: every row of the call)
  int64_t pieces = -1, keep = -1, topk_at = -1, cand_at = -1;
};

struct SpaceParts {
  int64_t rows = 0, pos = -1, row_piece = -1;
};

}  // namespace

size_t bounded_meta_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t pieces) {
  // Per layer at most: positions (8 B) and pieces (4 B) of its output rows, keep and top-k places (8 B
  // each), candidate places (4 B), its piece table; each part padded to 256 B.
  const int64_t per_layer = rows * (8 + 4 + 8 + 8 + 4) + pieces * static_cast<int64_t>(sizeof(PieceDev)) + 6 * 256;
  return static_cast<size_t>(cfg.n_layers * per_layer + 256);
}

Status begin_bounded_call(CallCtx& c, const engine::StepPlan& plan) {
  c.layer_rows.clear();
  c.layer_rows_staging.reset();
  if (!plan.bounded()) return ok_status();
  if (!c.tables) return error(StatusCode::invalid_argument, "bounded call: begin_attention_call first");
  const family::ModelPlan& cfg = *c.cfg;
  const AttentionCallTables& t = *c.tables;
  const int L = cfg.n_layers, from = plan.bounded_from;
  const int64_t P = t.n_pieces;
  if (from < 0 || static_cast<int>(plan.layer_out.size()) != L - from || P != static_cast<int64_t>(plan.pieces.size()))
    return error(StatusCode::internal, "bounded call: the plan's row spaces do not match the call");
  auto image = std::make_shared<std::vector<uint8_t>>();
  Image im;
  // The bounded layers' output spaces (layer from + k at k); a space of every row uses the call's arrays.
  std::vector<SpaceParts> spaces(plan.layer_out.size());
  for (size_t k = 0; k < plan.layer_out.size(); ++k) {
    const engine::RowSpace& s = plan.layer_out[k];
    spaces[k].rows = s.rows;
    if (s == plan.all) continue;
    spaces[k].pos = im.add(engine::space_positions(plan.pieces, s));
    spaces[k].row_piece = im.add(engine::space_pieces(plan.pieces, s));
  }
  std::vector<LayerParts> parts(L);
  for (int l = from; l < L; ++l) {
    const family::LayerPlan& role = (*c.roles)[l];
    const engine::RowSpace& in = plan.in_rows(l);
    const engine::RowSpace& out = plan.out_rows(l);
    LayerParts& p = parts[l];
    p.in_space = l == from ? -1 : l - 1 - from;
    p.out_space = l - from;
    if (!(in == plan.all)) {  // the layer's pieces over its input rows: each piece's kept suffix
      std::vector<PieceDev> pd(t.host_pieces.begin() + l * t.stride, t.host_pieces.begin() + l * t.stride + P);
      for (int64_t i = 0; i < P; ++i) {
        pd[i].start += in.first[i];
        pd[i].T -= in.first[i];
        pd[i].row0 = in.row0[i];
      }
      p.pieces = im.add(pd);
    }
    if (plan.shrinks(l)) p.keep = im.add(engine::rows_within(plan.pieces, out, in));
    // A layer reading an earlier index source's top-k finds its rows among that source's output rows.
    const bool reads_topk = role.compress_ratio > 0 && !role.index_source && role.topk_from >= 0;
    if (reads_topk && !(plan.out_rows(role.topk_from) == out))
      p.topk_at = im.add(engine::rows_within(plan.pieces, out, plan.out_rows(role.topk_from)));
    if (role.uses_candidates && role.candidate_from >= 0 && !(plan.out_rows(role.candidate_from) == out)) {
      const std::vector<int64_t> at = engine::rows_within(plan.pieces, out, plan.out_rows(role.candidate_from));
      p.cand_at = im.add(std::vector<int32_t>(at.begin(), at.end()));
    }
  }
  *image = std::move(im.bytes);
  DSV4_ASSIGN_OR_RETURN(uint8_t* dev, put_call_tables(c.meta, *c.scratch, c.stream, *image, "bounded replay tables"));
  auto at = [&](int64_t off) { return off < 0 ? nullptr : dev + off; };
  const RowsDev call_rows{c.rows, c.pos, t.row_piece};
  auto space = [&](int32_t k) -> RowsDev {
    if (k < 0 || spaces[k].pos < 0) return RowsDev{k < 0 ? c.rows : spaces[k].rows, c.pos, t.row_piece};
    return RowsDev{spaces[k].rows, reinterpret_cast<const int64_t*>(at(spaces[k].pos)),
                   reinterpret_cast<const int32_t*>(at(spaces[k].row_piece))};
  };
  c.layer_rows.assign(L, LayerRowsDev{call_rows, call_rows, nullptr});
  for (int l = 0; l < L; ++l) {
    LayerRowsDev& r = c.layer_rows[l];
    r.pieces = t.pieces + l * t.stride;
    if (l < from) continue;
    const LayerParts& p = parts[l];
    r.in = space(p.in_space);
    r.out = space(p.out_space);
    if (p.pieces >= 0) r.pieces = reinterpret_cast<const PieceDev*>(at(p.pieces));
    r.keep = reinterpret_cast<const int64_t*>(at(p.keep));
    r.topk_at = reinterpret_cast<const int64_t*>(at(p.topk_at));
    r.cand_at = reinterpret_cast<const int32_t*>(at(p.cand_at));
  }
  c.layer_rows_staging = std::move(image);
  return ok_status();
}

}  // namespace dsv4::cuda
