// A rank's slice of the decoded weights, cut where the split plan says (see rank_weights.h).
#include "fabric/rank_weights.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "fabric/exl3_cut.h"

namespace dsv4::fabric {
namespace {

// The plan's tensors by name.
class PlanIndex {
 public:
  PlanIndex(const SplitPlan& plan, int32_t rank) : rank_(rank) {
    for (const TensorSplit& t : plan.tensors) by_name_[t.name] = &t;
  }
  // Rank's range along `dim` of tensor `name`, checked: split along `dim` with `extent` stored elements.
  StatusOr<Slice> cut(const std::string& name, int32_t dim, int64_t extent) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return error(StatusCode::invalid_argument, "the split plan has no tensor {}", name);
    const TensorSplit& t = *it->second;
    if (t.kind != SplitKind::split || t.dim != dim)
      return error(StatusCode::invalid_argument, "{}: the plan {} it (dim {}), the rank slice expects a split of dim {}",
                   name, split_kind_name(t.kind), t.dim, dim);
    const Slice s = t.ranks.at(static_cast<size_t>(rank_));
    const Slice last = t.ranks.back();
    if (last.end != extent)
      return error(StatusCode::invalid_argument, "{}: the plan cuts {} stored elements, the weights hold {}", name,
                   last.end, extent);
    return s;
  }

  // Every rank's range of tensor `name` (checked by cut() first).
  const std::vector<Slice>& ranks(const std::string& name) const { return by_name_.at(name)->ranks; }

  // Whether this rank holds tensor `name`, which the plan gives whole to one rank (expert_parallel experts).
  StatusOr<bool> owns(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return error(StatusCode::invalid_argument, "the split plan has no tensor {}", name);
    if (it->second->kind != SplitKind::owned)
      return error(StatusCode::invalid_argument, "{}: the plan {} it, the rank slice expects one owner", name,
                   split_kind_name(it->second->kind));
    return it->second->ranks.at(static_cast<size_t>(rank_)).holds();
  }

 private:
  int32_t rank_;
  std::map<std::string, const TensorSplit*> by_name_;
};

// Rows [b, e) along dim 0 of a view (a view into the same bytes: nothing is read).
TensorView take_rows(const TensorView& v, int64_t b, int64_t e) {
  TensorView out = v;
  const int64_t row = v.dim(0) > 0 ? v.nbytes / v.dim(0) : 0;
  out.data = v.bytes() + b * row;
  out.shape[0] = e - b;
  out.nbytes = (e - b) * row;
  return out;
}

// An EXL3 linear standing for a release [out, in] weight: release rows [b, e) are EXL3's outputs (it stores
// W [in, out]), cut on the output Hadamard's 128-column blocks (exl3_cut.h).
template <typename W>
Status cut_exl3_rows(W& w, Slice s, const std::string& name) {
  DSV4_ASSIGN_OR_RETURN(w.exl3, exl3_outputs(*w.exl3, s.begin, s.end, name));
  return ok_status();
}

// FP8 [out, in] with block x block scale tiles: rows [b, e), whole tiles only.
Status cut_fp8_rows(family::Fp8Linear& w, Slice s, const std::string& name) {
  if (w.exl3) return cut_exl3_rows(w, s, name);
  const int64_t blk = w.block;
  if (s.begin % blk != 0 || s.end % blk != 0)
    return error(StatusCode::invalid_argument, "{}: cut [{}, {}) is not on {}-wide scale tiles", name, s.begin, s.end, blk);
  w.scale = take_rows(w.scale, s.begin / blk, s.end / blk);
  w.weight = take_rows(w.weight, s.begin, s.end);
  return ok_status();
}

Status cut_matrix_rows(family::Matrix& w, Slice s, const std::string& name) {
  if (w.exl3) return cut_exl3_rows(w, s, name);
  w.weight = take_rows(w.weight, s.begin, s.end);
  return ok_status();
}

// One block's share (a layer, or a DSpark stage with prefix "mtp.S."): wq_b rows and attn_sink of the rank's
// heads, wo_a rows of its output groups, its routed experts (the others left empty: expert ids stay global).
Status cut_block(family::LayerWeights& B, const std::string& p, const PlanIndex& index) {
  DSV4_ASSIGN_OR_RETURN(Slice q, index.cut(p + "attn.wq_b.weight", 0, B.wq_b.out()));
  DSV4_RETURN_IF_ERROR(cut_fp8_rows(B.wq_b, q, p + "attn.wq_b"));
  DSV4_ASSIGN_OR_RETURN(Slice h, index.cut(p + "attn.attn_sink", 0, B.attn_sink.dim(0)));
  B.attn_sink = take_rows(B.attn_sink, h.begin, h.end);
  DSV4_ASSIGN_OR_RETURN(Slice ga, index.cut(p + "attn.wo_a.weight", 0, B.wo_a.out()));
  DSV4_RETURN_IF_ERROR(cut_fp8_rows(B.wo_a, ga, p + "attn.wo_a"));
  for (size_t e = 0; e < B.experts.size(); ++e) {
    const std::string x = fmt::format("{}ffn.experts.{}.", p, e);
    DSV4_ASSIGN_OR_RETURN(bool mine, index.owns(x + "w1.weight"));
    if (!mine) B.experts[e] = family::Expert{};  // FP4 or EXL3 alike: whole on its owner
  }
  return ok_status();
}

}  // namespace

StatusOr<std::shared_ptr<const family::Model>> rank_model(const family::Model& whole, const SplitPlan& plan,
                                                          int32_t rank) {
  const int32_t tp = plan.tp;
  if (rank < 0 || rank >= tp) return error(StatusCode::invalid_argument, "rank {} outside a plan of {} ranks", rank, tp);
  if (plan.experts != ExpertSplit::expert_parallel)
    return error(StatusCode::unimplemented, "the {} expert split is not run by the tensor-parallel forward (expert_parallel is)",
                 expert_split_name(plan.experts));
  if (whole.config.variant != family::Variant::v41)
    return error(StatusCode::unimplemented, "tensor-parallel weights: only V4.1 checkpoints are cut so far");
  auto m = std::make_shared<family::Model>(whole);
  if (tp == 1) return std::shared_ptr<const family::Model>(std::move(m));
  family::ModelWeights& w = m->weights;
  const PlanIndex index(plan, rank);
  for (size_t l = 0; l < w.layers.size(); ++l)
    DSV4_RETURN_IF_ERROR(cut_block(w.layers[l], fmt::format("layers.{}.", l), index));
  // The DSpark stages split like the layers (heads, groups, experts); the Markov head's embedding and head
  // (bf16 [V, R], R = 256: 64 MiB each at full width) stay whole, since each of the draft's sequential steps reads
  // its bias row at once and a vocabulary cut would put a gather in every step.
  for (size_t s = 0; s < w.dspark.size(); ++s)
    DSV4_RETURN_IF_ERROR(cut_block(w.dspark[s], fmt::format("mtp.{}.", s), index));
  DSV4_ASSIGN_OR_RETURN(Slice v, index.cut("head.weight", 0, w.head.out()));
  // An EXL3 head is cut only when every rank's vocabulary slice falls on 128-column blocks (V = 129,280 =
  // 1,010 blocks does at TP 2, not at TP 4 or 8); otherwise it stays whole on every rank, and each rank
  // computes the whole logits itself (backends/cuda/tp/tp_forward.h tp_head_logits). Decided from the plan, so
  // every rank decides alike.
  bool cut_head = true;
  if (w.head.exl3)
    for (const Slice& r : index.ranks("head.weight"))
      cut_head = cut_head && exl3_check_cut(*w.head.exl3, r.begin, r.end, "head").ok();
  if (cut_head) DSV4_RETURN_IF_ERROR(cut_matrix_rows(w.head, v, "head.weight"));
  DSV4_ASSIGN_OR_RETURN(Slice ev, index.cut("embed.weight", 0, w.embed.dim(0)));
  w.embed = take_rows(w.embed, ev.begin, ev.end);
  family::Config& c = m->config;
  if (c.num_attention_heads % tp != 0 || c.o_groups % tp != 0)
    return error(StatusCode::invalid_argument, "{} heads / {} output groups do not split over {} ranks",
                 c.num_attention_heads, c.o_groups, tp);
  c.num_attention_heads /= tp;
  c.o_groups /= tp;
  return std::shared_ptr<const family::Model>(std::move(m));
}

}  // namespace dsv4::fabric
