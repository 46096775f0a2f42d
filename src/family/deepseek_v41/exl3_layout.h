// The Mia layout of a V4.1 EXL3 pack (formats.md §1.12) as data, and a pack's tensors checked against it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/tensors.h"
#include "formats/exl3/quant_config.h"

namespace dsv4::family {

// Where a tensor group of the release checkpoint lives in an EXL3 pack.
enum class PackStorage : uint8_t {
  exl3,             // one EXL3 linear `P`: P.trellis, P.suh (or legacy P.su), P.svh (or P.sv),
                    // optional codebook marker P.mcg | P.mul1, optional P.bias, an ignored P.weight copy
  exl3_sliced,      // attn.wo_a: one EXL3 linear per output group, P.slice.{g} (g = 0..o_groups-1)
  native,           // the same name, dtype and shape as in the release
  native_optional,  // as native, but a pack may leave the whole set out (vision tower, aligner, image_*)
  release_shards,   // not in the pack: read from the original release shards (Engram tables)
  absent,           // not in the pack and not needed by the text model (ffn.gate.bias_vl)
};
std::string_view pack_storage_name(PackStorage s);

// A rule matched against a release group name with its "layers.N." / "mtp.N." prefix removed and
// expert ids written as '*' ("ffn.experts.*.w2"), or (name_prefix) against the start of the full name.
// Groups: a linear's ".weight"/".scale" pair (or the BF16 ".weight" of a plain linear) is one group
// named without the suffix; the Engram table pair is "engram.embed"; any other tensor is its own group.
// Unmatched groups are native.
struct PackRule {
  std::string_view group;
  PackStorage storage;
  bool name_prefix = false;
};
std::span<const PackRule> mia_layout_rules();

// One EXL3 linear the pack must hold.
struct Exl3Group {
  std::string prefix;          // pack module key: "layers.3.attn.wq_a", "layers.3.attn.wo_a.slice.1"
  std::string release;         // the release group it stands for: "layers.3.attn.wo_a"
  int32_t slice = -1;          // wo_a output group g, else -1
  int64_t in = 0, out = 0;     // logical W [in, out], y = x·W (the release's [out, in] transposed)
  int64_t in_padded = 0, out_padded = 0;  // rounded up to 128: EXL3 pads every linear (formats.md §1.2)
  int32_t shard = 0;           // the release shard holding the group
};

struct Exl3PackPlan {
  TensorTable release;              // the release checkpoint's table for the config
  std::vector<Exl3Group> groups;    // every EXL3 linear, in release order
  std::vector<size_t> native;       // indices into release.tensors, by storage
  std::vector<size_t> native_optional;
  std::vector<size_t> release_shards;
  std::vector<size_t> absent;
  std::unordered_map<std::string, size_t> by_prefix;   // Exl3Group::prefix -> index into groups
  std::unordered_map<std::string, std::vector<size_t>> by_release;  // release group -> its groups (slices in order)
  const Exl3Group* find_group(std::string_view prefix) const;
  // The groups standing for one release linear ("layers.3.attn.wo_a" -> its slices); empty if none.
  std::vector<const Exl3Group*> groups_of(std::string_view release) const;
};

// The plan for a validated config. EXL3 packs are known for V4.1 only; V4-0731 is refused by name.
StatusOr<Exl3PackPlan> exl3_pack_plan(const Config& c);

// The storage rule for one release tensor (exposed for tests and `dsv4 synth --list`).
PackStorage pack_storage_of(const TensorSpec& t);

// Checks a pack's tensors against the plan: each EXL3 group complete and well-shaped (trellis I16
// [in_padded/16, out_padded/16, 16·K], K = 1..8; suh F16 [in_padded] or su I16 [in_padded/16]; svh
// likewise; marker I32 scalar, at most one; bias F16 [out_padded]), every native tensor as in the
// release, optional sets all or none, absent tensors absent or as in the release, the Engram tables
// not in the pack, nothing else. One data_loss error lists every problem with its tensor and file.
Status validate_exl3_pack(const Exl3PackPlan& plan, const std::vector<FoundTensor>& found);

// Cross-checks a pack's quantization_config.json tensor_storage with its tensors (call after
// validate_exl3_pack): every EXL3 linear listed with quant_format exl3, bits_per_weight equal to its
// trellis width, the codebook of its marker, and each stored tensor present with the listed shape.
// An empty tensor_storage (config.json only) checks nothing. One data_loss error lists every problem.
Status validate_tensor_storage(const Exl3PackPlan& plan, const exl3::QuantConfig& q,
                               const std::vector<FoundTensor>& found);

}  // namespace dsv4::family
