// Per-rank device bytes of the stored weights (see weight_share.h).
#include "engine/weight_share.h"


namespace dsv4::engine {

namespace {

bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, std::string_view t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}
bool contains(const std::string& s, std::string_view p) { return s.find(p) != std::string::npos; }

// Adds `bytes` to the ranks as the split `s` of a tensor whose split dimension has `extent` elements gives them.
struct Adder {
  WeightShare& share;
  bool drafter_tensor = false;

  void to_rank(size_t r, int64_t bytes) {
    share.rank_device[r] += bytes;
    if (drafter_tensor) share.rank_drafter[r] += bytes;
  }
  void everywhere(int64_t bytes) {
    for (size_t r = 0; r < share.rank_device.size(); ++r) to_rank(r, bytes);
  }
  // Each rank's share of a tensor cut along a dimension of `extent` elements.
  void by_slices(const fabric::TensorSplit& s, int64_t bytes, int64_t extent) {
    for (size_t r = 0; r < s.ranks.size(); ++r)  // exact for release tensors (bytes a multiple of extent)
      to_rank(r, static_cast<int64_t>(static_cast<__int128>(bytes) * (s.ranks[r].end - s.ranks[r].begin) / extent));
  }
  void owner(const fabric::TensorSplit& s, int64_t bytes) {
    for (size_t r = 0; r < s.ranks.size(); ++r)
      if (s.ranks[r].holds()) to_rank(r, bytes);
  }
};

// A release tensor by its plan entry; a release attn.wo_a is held as bf16 (2 bytes per FP8 weight, no scales).
void place_release(Adder& a, const family::TensorSpec& t, const fabric::TensorSplit& s, int64_t bytes) {
  if (ends_with(t.name, ".attn.wo_a.scale")) return;
  if (ends_with(t.name, ".attn.wo_a.weight") && t.dtype == DType::f8_e4m3) bytes *= 2;
  if (contains(t.name, ".markov_head.")) return a.everywhere(bytes);  // kept whole (rank_weights.h)
  switch (s.kind) {
    case fabric::SplitKind::host: a.share.host_engram += bytes; return;
    case fabric::SplitKind::replicated: return a.everywhere(bytes);
    case fabric::SplitKind::owned: return a.owner(s, bytes);
    case fabric::SplitKind::split: return a.by_slices(s, bytes, t.shape[static_cast<size_t>(s.dim)]);
  }
}

// An EXL3 linear's stored tensor `component` (trellis, suh, su, svh, sv, bias, mcg, mul1) of the pack group
// standing for release tensor `t` (its ".weight").
void place_exl3(Adder& a, const family::TensorSpec& t, const fabric::TensorSplit& s, const family::Exl3Group& g,
                const std::string& component, int64_t bytes) {
  if (contains(t.name, ".markov_head.")) return a.everywhere(bytes);
  if (s.kind == fabric::SplitKind::replicated) return a.everywhere(bytes);
  if (s.kind == fabric::SplitKind::owned) return a.owner(s, bytes);
  if (s.kind != fabric::SplitKind::split) return a.everywhere(bytes);
  const int64_t extent = t.shape[static_cast<size_t>(s.dim)];
  if (g.slice >= 0) {  // wo_a: slice g holds release rows [g * out, (g + 1) * out), kept whole by their rank
    const int64_t row = g.slice * g.out;
    for (size_t r = 0; r < s.ranks.size(); ++r)
      if (row >= s.ranks[r].begin && row < s.ranks[r].end) a.to_rank(r, bytes);
    return;
  }
  // A row cut of the release is a cut of EXL3's out dimension, on 128-column blocks only (exl3_cut.h).
  bool blocks = true;
  for (const fabric::Slice& r : s.ranks) blocks = blocks && r.begin % 128 == 0 && (r.end % 128 == 0 || r.end == extent);
  if (!blocks || component == "suh" || component == "su" || component == "mcg" || component == "mul1")
    return a.everywhere(bytes);
  a.by_slices(s, bytes, extent);
}

}  // namespace

std::vector<StoredTensor> release_tensors(const family::TensorTable& table) {
  std::vector<StoredTensor> out;
  out.reserve(table.tensors.size());
  for (const family::TensorSpec& t : table.tensors) out.push_back({t.name, t.bytes()});
  return out;
}

StatusOr<WeightShare> share_weights(const family::Config& c, const family::TensorTable& release,
                                    const fabric::SplitPlan& plan, const std::vector<StoredTensor>& tensors,
                                    const family::Exl3PackPlan* pack, bool drafter) {
  if (plan.tensors.size() != release.tensors.size())
    return error(StatusCode::invalid_argument, "split plan of {} tensors for a table of {}", plan.tensors.size(),
                 release.tensors.size());
  WeightShare share;
  share.rank_device.assign(static_cast<size_t>(plan.tp), 0);
  share.rank_drafter.assign(static_cast<size_t>(plan.tp), 0);
  for (const StoredTensor& st : tensors) {
    share.stored += st.bytes;
    const bool stage = starts_with(st.name, "mtp.");
    if (family::is_vision_tensor(st.name)) {
      share.not_loaded += st.bytes;
      continue;
    }
    if (stage && !drafter) {
      share.drafter_not_loaded += st.bytes;
      continue;
    }
    Adder a{share, stage};
    const size_t dot = st.name.rfind('.');
    const std::string group = dot == std::string::npos ? st.name : st.name.substr(0, dot);
    if (pack) {
      // A pack may keep an unused copy of an EXL3 linear's release weight ("P.weight"): not loaded.
      if (ends_with(st.name, ".weight") && (pack->find_group(group) || !pack->groups_of(group).empty())) {
        share.not_loaded += st.bytes;
        continue;
      }
      if (const family::Exl3Group* g = pack->find_group(group)) {
        const auto it = release.by_name.find(g->release + ".weight");
        if (it == release.by_name.end())
          return error(StatusCode::invalid_argument, "pack tensor '{}': no release tensor '{}.weight'", st.name,
                       g->release);
        place_exl3(a, release.tensors[it->second], plan.tensors[it->second], *g, st.name.substr(dot + 1), st.bytes);
        continue;
      }
    }
    const auto it = release.by_name.find(st.name);
    if (it == release.by_name.end())
      return error(StatusCode::invalid_argument, "tensor '{}' is neither in the {} release table{}", st.name,
                   family::variant_name(c.variant), pack ? " nor an EXL3 linear of the pack layout" : "");
    place_release(a, release.tensors[it->second], plan.tensors[it->second], st.bytes);
  }
  return share;
}

}  // namespace dsv4::engine
