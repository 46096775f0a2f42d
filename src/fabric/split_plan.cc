// The split plan: per tensor, which slice each rank holds (see split_plan.h).
#include "fabric/split_plan.h"

#include <regex>

namespace dsv4::fabric {
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// The name without its ".weight" / ".scale" suffix.
std::string stem(const std::string& name) {
  for (std::string_view t : {".weight", ".scale"})
    if (ends_with(name, t)) return name.substr(0, name.size() - t.size());
  return name;
}

struct Builder {
  const family::Config& c;
  int32_t tp;

  // Cut `extent` (along dim) into tp equal ranges; every boundary must be a multiple of `align`.
  StatusOr<TensorSplit> even(const family::TensorSpec& t, int32_t dim, SplitReason reason, int64_t align,
                             const char* what) const {
    const int64_t extent = t.shape[static_cast<size_t>(dim)];
    if (extent % tp != 0 || (extent / tp) % align != 0)
      return error(StatusCode::invalid_argument,
                   "{}: {} of {} does not split over {} ranks in whole blocks of {}", t.name, what, extent, tp, align);
    TensorSplit s{t.name, SplitKind::split, reason, dim, {}};
    for (int32_t r = 0; r < tp; ++r) s.ranks.push_back(Slice{r * extent / tp, (r + 1) * extent / tp});
    return s;
  }
  TensorSplit whole(const family::TensorSpec& t, SplitKind kind, SplitReason reason) const {
    TensorSplit s{t.name, kind, reason, -1, {}};
    for (int32_t r = 0; r < tp; ++r) s.ranks.push_back(Slice{0, t.shape.empty() ? 1 : t.shape[0]});
    return s;
  }
};

}  // namespace

const char* expert_split_name(ExpertSplit s) {
  return s == ExpertSplit::tp_intermediate ? "tp_intermediate" : "expert_parallel";
}

const char* split_kind_name(SplitKind k) {
  switch (k) {
    case SplitKind::replicated: return "replicated";
    case SplitKind::split: return "split";
    case SplitKind::owned: return "owned";
    case SplitKind::host: return "host";
  }
  return "?";
}

StatusOr<SplitPlan> make_split_plan(const family::Config& c, const family::TensorTable& table, int32_t tp,
                                    ExpertSplit experts) {
  if (tp < 1) return error(StatusCode::invalid_argument, "tensor-parallel size {} is below 1", tp);
  if (c.num_attention_heads % tp != 0)
    return error(StatusCode::invalid_argument, "{} attention heads do not split over {} ranks", c.num_attention_heads, tp);
  if (c.o_groups % tp != 0)
    return error(StatusCode::invalid_argument, "{} output groups do not split over {} ranks", c.o_groups, tp);
  const Builder b{c, tp};
  const int64_t bo = c.quant.weight_block_out, bi = c.quant.weight_block_in;
  const int64_t head_rows = c.head_dim;  // wq_b rows per head
  static const std::regex expert_re(R"(\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale)$)");
  SplitPlan plan;
  plan.tp = tp;
  plan.experts = experts;
  for (const family::TensorSpec& t : table.tensors) {
    const std::string s = stem(t.name);
    const bool scale = ends_with(t.name, ".scale");
    const bool fp8 = t.role == family::TensorRole::fp8_weight || t.role == family::TensorRole::fp8_scale;
    StatusOr<TensorSplit> ts = b.whole(t, SplitKind::replicated, SplitReason::replicated);
    std::smatch m;
    const bool in_dspark_or_layer = contains(t.name, "layers.") || contains(t.name, "mtp.");
    if (t.role == family::TensorRole::engram_table || t.role == family::TensorRole::engram_scale) {
      ts = b.whole(t, SplitKind::host, SplitReason::host_table);
    } else if (t.name == "embed.weight" || t.name == "head.weight" || ends_with(t.name, "markov_head.embed.weight") ||
               ends_with(t.name, "markov_head.head.weight")) {
      ts = b.even(t, 0, SplitReason::vocab, 1, "the vocabulary");
    } else if (in_dspark_or_layer && ends_with(s, ".attn.wq_b")) {
      // Rows are heads x head_dim; a rank's rows are whole heads, whole FP8 row tiles.
      ts = b.even(t, 0, SplitReason::heads, scale ? head_rows / bo : head_rows, "query rows");
    } else if (in_dspark_or_layer && ends_with(t.name, ".attn.attn_sink")) {
      ts = b.even(t, 0, SplitReason::heads, 1, "heads");
    } else if (in_dspark_or_layer && ends_with(s, ".attn.wo_a")) {
      ts = b.even(t, 0, SplitReason::out_groups, scale ? c.o_lora_rank / bo : c.o_lora_rank, "group rows");
    } else if (std::regex_search(t.name, m, expert_re)) {
      const int64_t e = std::stoll(m[1].str());
      const std::string w = m[2].str();
      if (experts == ExpertSplit::expert_parallel) {
        const int64_t n = contains(t.name, "mtp.") ? c.dspark_n_routed_experts : c.n_routed_experts;
        if (n % tp != 0)
          return error(StatusCode::invalid_argument, "{} routed experts do not split over {} ranks", n, tp);
        TensorSplit o{t.name, SplitKind::owned, SplitReason::experts, -1, std::vector<Slice>(static_cast<size_t>(tp))};
        o.ranks[static_cast<size_t>(e / (n / tp))] = Slice{0, t.shape[0]};
        ts = o;
      } else if (w == "w2") {
        // [D, I/2] packed codes or [D, I/32] scales: K = intermediate, FP4 scale groups of 32 along K.
        ts = b.even(t, 1, SplitReason::intermediate, scale ? 1 : 16, "the intermediate width");
      } else {
        ts = b.even(t, 0, SplitReason::intermediate, 1, "the intermediate width");
      }
    }
    // wo_b and the shared expert stay whole (replicated): wo_b reads the gathered groups of every rank and the
    // shared expert runs whole, so each sums its whole K in one order, as on one GPU (split_plan.h).
    (void)fp8;
    (void)bi;
    if (!ts.ok()) return ts.status();
    plan.tensors.push_back(std::move(ts).value());
  }
  return plan;
}

int64_t rank_device_bytes(const SplitPlan& plan, const family::TensorTable& table, int32_t rank) {
  int64_t total = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorSplit& s = plan.tensors[i];
    const family::TensorSpec& t = table.tensors[i];
    switch (s.kind) {
      case SplitKind::host: break;
      case SplitKind::replicated: total += t.bytes(); break;
      case SplitKind::owned:
        if (s.ranks[static_cast<size_t>(rank)].holds()) total += t.bytes();
        break;
      case SplitKind::split: {
        const Slice& r = s.ranks[static_cast<size_t>(rank)];
        total += t.bytes() / t.shape[static_cast<size_t>(s.dim)] * (r.end - r.begin);
        break;
      }
    }
  }
  return total;
}

}  // namespace dsv4::fabric
