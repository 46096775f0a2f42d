// Mia layout rules, the per-config EXL3 pack plan, and the pack check (see exl3_layout.h).
#include "family/deepseek_v41/exl3_layout.h"

#include <fmt/ranges.h>

#include <map>
#include <unordered_map>

namespace dsv4::family {
namespace {

constexpr PackRule kMiaRules[] = {
    // EXL3 linears of every block (backbone layers and DSpark stages): formats.md §1.12 "blockGroups".
    {"attn.wq_a", PackStorage::exl3},
    {"attn.wq_b", PackStorage::exl3},
    {"attn.wkv", PackStorage::exl3},
    {"attn.wo_a", PackStorage::exl3_sliced},
    {"attn.wo_b", PackStorage::exl3},
    {"attn.compressor.wkv", PackStorage::exl3},
    {"attn.compressor.wgate", PackStorage::exl3},
    {"attn.indexer.wk", PackStorage::exl3},
    {"attn.indexer.wq_b", PackStorage::exl3},
    {"ffn.shared_experts.w1", PackStorage::exl3},
    {"ffn.shared_experts.w2", PackStorage::exl3},
    {"ffn.shared_experts.w3", PackStorage::exl3},
    {"ffn.experts.*.w1", PackStorage::exl3},
    {"ffn.experts.*.w2", PackStorage::exl3},
    {"ffn.experts.*.w3", PackStorage::exl3},
    {"engram.wkv", PackStorage::exl3},
    {"head", PackStorage::exl3},
    // DSpark stage 0's input projection: a linear of the stage, quantized like the others (formats.md
    // lists DSpark blocks as EXL3 but names only the Markov heads as native; this is our reading).
    {"main_proj", PackStorage::exl3},
    // Not in the pack.
    {"engram.embed", PackStorage::release_shards},
    {"ffn.gate.bias_vl", PackStorage::absent},
    // The vision side: kept as in the release when present.
    {"vision.", PackStorage::native_optional, true},
    {"aligner.", PackStorage::native_optional, true},
    {"image_", PackStorage::native_optional, true},
};

int64_t pad128(int64_t n) { return (n + 127) / 128 * 128; }

bool ends_with(std::string_view s, std::string_view x) {
  return s.size() >= x.size() && s.substr(s.size() - x.size()) == x;
}

// The group name of a release tensor, with its block prefix ("layers.N." / "mtp.N.") split off.
struct GroupName {
  std::string block;  // "layers.3." or "" for top-level tensors
  std::string local;  // "attn.wq_a", "ffn.experts.7.w2", "head", "norm.weight"
};

GroupName group_of(const TensorSpec& t) {
  std::string n = t.name;
  switch (t.role) {
    case TensorRole::fp8_weight: case TensorRole::fp4_weight: case TensorRole::linear:
    case TensorRole::engram_table:
      if (ends_with(n, ".weight")) n.resize(n.size() - 7);
      break;
    case TensorRole::fp8_scale: case TensorRole::fp4_scale: case TensorRole::engram_scale:
      if (ends_with(n, ".scale")) n.resize(n.size() - 6);
      break;
    default: break;
  }
  GroupName g;
  for (std::string_view head : {"layers.", "mtp."}) {
    if (n.rfind(head, 0) != 0) continue;
    const size_t dot = n.find('.', head.size());
    if (dot == std::string::npos) break;
    g.block = n.substr(0, dot + 1);
    n = n.substr(dot + 1);
    break;
  }
  g.local = n;
  return g;
}

// "ffn.experts.17.w2" -> "ffn.experts.*.w2".
std::string wildcard_experts(const std::string& local) {
  constexpr std::string_view head = "ffn.experts.";
  if (local.rfind(head, 0) != 0) return local;
  const size_t dot = local.find('.', head.size());
  return dot == std::string::npos ? local : std::string(head) + "*" + local.substr(dot);
}

}  // namespace

std::string_view pack_storage_name(PackStorage s) {
  switch (s) {
    case PackStorage::exl3: return "exl3";
    case PackStorage::exl3_sliced: return "exl3 (sliced)";
    case PackStorage::native: return "native";
    case PackStorage::native_optional: return "native (optional)";
    case PackStorage::release_shards: return "release shards";
    case PackStorage::absent: return "absent";
  }
  return "?";
}

std::span<const PackRule> mia_layout_rules() { return kMiaRules; }

PackStorage pack_storage_of(const TensorSpec& t) {
  const std::string local = wildcard_experts(group_of(t).local);
  for (const PackRule& r : kMiaRules)
    if (r.name_prefix ? t.name.rfind(r.group, 0) == 0 : local == r.group) return r.storage;
  return PackStorage::native;
}

const Exl3Group* Exl3PackPlan::find_group(std::string_view prefix) const {
  const auto it = by_prefix.find(std::string(prefix));
  return it == by_prefix.end() ? nullptr : &groups[it->second];
}

std::vector<const Exl3Group*> Exl3PackPlan::groups_of(std::string_view release) const {
  std::vector<const Exl3Group*> out;
  const auto it = by_release.find(std::string(release));
  if (it != by_release.end())
    for (size_t i : it->second) out.push_back(&groups[i]);
  return out;
}

StatusOr<Exl3PackPlan> exl3_pack_plan(const Config& c) {
  if (c.variant != Variant::v41)
    return error(StatusCode::unimplemented, "EXL3 packs: no pack layout is known for {} (only V4.1's Mia layout)",
                 variant_name(c.variant));
  Exl3PackPlan plan;
  plan.release = expected_tensors(c);
  std::map<std::string, bool> seen_group;
  for (size_t i = 0; i < plan.release.tensors.size(); ++i) {
    const TensorSpec& t = plan.release.tensors[i];
    const PackStorage s = pack_storage_of(t);
    switch (s) {
      case PackStorage::native: plan.native.push_back(i); continue;
      case PackStorage::native_optional: plan.native_optional.push_back(i); continue;
      case PackStorage::release_shards: plan.release_shards.push_back(i); continue;
      case PackStorage::absent: plan.absent.push_back(i); continue;
      case PackStorage::exl3: case PackStorage::exl3_sliced: break;
    }
    if (t.role == TensorRole::fp8_scale || t.role == TensorRole::fp4_scale) continue;  // the weight names the group
    const GroupName g = group_of(t);
    const std::string release = g.block + g.local;
    if (!seen_group.emplace(release, true).second) continue;
    const int64_t out = t.shape[0];
    const int64_t in = t.role == TensorRole::fp4_weight ? t.shape[1] * 2 : t.shape[1];
    if (s == PackStorage::exl3) {
      plan.groups.push_back({release, release, -1, in, out, pad128(in), pad128(out), t.shard});
    } else {
      const int64_t G = c.o_groups;  // block-diagonal [G*O, H*d/G]: slice g maps its H*d/G inputs to O outputs
      for (int32_t s2 = 0; s2 < G; ++s2)
        plan.groups.push_back({fmt::format("{}.slice.{}", release, s2), release, s2, in, out / G, pad128(in),
                               pad128(out / G), t.shard});
    }
  }
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    plan.by_prefix.emplace(plan.groups[i].prefix, i);
    plan.by_release[plan.groups[i].release].push_back(i);
  }
  return plan;
}

Status validate_exl3_pack(const Exl3PackPlan& plan, const std::vector<FoundTensor>& found) {
  std::vector<std::string> problems;
  std::unordered_map<std::string, const FoundTensor*> by_name;
  for (const FoundTensor& f : found) by_name.emplace(f.name, &f);
  std::unordered_map<std::string, bool> claimed;
  const auto where = [](const FoundTensor& f) { return f.file.empty() ? std::string() : " in " + f.file; };
  const auto describe = [](const FoundTensor& f) {
    return fmt::format("{} [{}]", dtype_name(f.dtype), fmt::join(f.shape, ", "));
  };
  const auto expect = [&](const std::string& name, DType dt, const std::vector<int64_t>& shape) {
    const FoundTensor& f = *by_name.at(name);
    if (f.dtype != dt || f.shape != shape)
      problems.push_back(fmt::format("wrong: {}: {}, expected {} [{}]{}", name, describe(f), dtype_name(dt),
                                     fmt::join(shape, ", "), where(f)));
  };
  for (const Exl3Group& g : plan.groups) {
    const std::string p = g.prefix + ".";
    const auto has = [&](const char* s) { return by_name.count(p + s) != 0; };
    for (const char* s : {"trellis", "suh", "su", "svh", "sv", "mcg", "mul1", "bias", "weight"})
      if (has(s)) claimed[p + s] = true;
    if (!has("trellis")) {
      problems.push_back(fmt::format("missing: {}trellis (EXL3 I16 [{}, {}, 16*bits] for release {}, {})", p,
                                     g.in_padded / 16, g.out_padded / 16, g.release, plan.release.shard_file(g.shard)));
    } else {
      const FoundTensor& t = *by_name.at(p + "trellis");
      const bool ok = t.dtype == DType::i16 && t.shape.size() == 3 && t.shape[0] == g.in_padded / 16 &&
                      t.shape[1] == g.out_padded / 16 && t.shape[2] % 16 == 0 && t.shape[2] >= 16 && t.shape[2] <= 128;
      if (!ok)
        problems.push_back(fmt::format("wrong: {}trellis: {}, expected I16 [{}, {}, 16*bits] with bits 1..8{}", p,
                                       describe(t), g.in_padded / 16, g.out_padded / 16, where(t)));
    }
    for (auto [scale, legacy, n] : {std::tuple{"suh", "su", g.in_padded}, std::tuple{"svh", "sv", g.out_padded}}) {
      if (has(scale)) expect(p + scale, DType::f16, {n});
      else if (has(legacy)) expect(p + legacy, DType::i16, {n / 16});
      else problems.push_back(fmt::format("missing: {}{} (F16 [{}]; or legacy {}{})", p, scale, n, p, legacy));
      if (has(scale) && has(legacy))
        problems.push_back(fmt::format("unexpected: {}{} beside {}{}{}", p, legacy, p, scale, where(*by_name.at(p + legacy))));
    }
    if (has("mcg") && has("mul1"))
      problems.push_back(fmt::format("wrong: {}mcg and {}mul1 are both present (one codebook marker at most){}", p, p,
                                     where(*by_name.at(p + "mul1"))));
    for (const char* m : {"mcg", "mul1"})
      if (has(m)) expect(p + m, DType::i32, {});
    if (has("bias")) expect(p + "bias", DType::f16, {g.out_padded});
  }
  const auto check_spec = [&](size_t i, bool required) {
    const TensorSpec& e = plan.release.tensors[i];
    claimed[e.name] = true;
    if (!by_name.count(e.name)) {
      if (required)
        problems.push_back(fmt::format("missing: {} ({} [{}], kept native in the Mia layout)", e.name,
                                       dtype_name(e.dtype), fmt::join(e.shape, ", ")));
      return;
    }
    const FoundTensor& f = *by_name.at(e.name);
    const bool dtype_ok = f.dtype == e.dtype || (e.dtype == DType::f8_e8m0 && f.dtype == DType::u8);
    if (!dtype_ok || f.shape != e.shape)
      problems.push_back(fmt::format("wrong: {}: {}, expected {} [{}]{}", e.name, describe(f), dtype_name(e.dtype),
                                     fmt::join(e.shape, ", "), where(f)));
  };
  for (size_t i : plan.native) check_spec(i, true);
  for (size_t i : plan.absent) check_spec(i, false);
  size_t optional_present = 0;
  for (size_t i : plan.native_optional) optional_present += by_name.count(plan.release.tensors[i].name);
  if (optional_present > 0 && optional_present < plan.native_optional.size()) {
    for (size_t i : plan.native_optional) check_spec(i, true);
    problems.push_back(fmt::format("incomplete: {} of the {} vision/aligner/image tensors are present (all or none)",
                                   optional_present, plan.native_optional.size()));
  } else {
    for (size_t i : plan.native_optional) check_spec(i, false);
  }
  for (size_t i : plan.release_shards) {
    const std::string& n = plan.release.tensors[i].name;
    if (by_name.count(n))
      problems.push_back(fmt::format("unexpected: {}{} (Engram tables come from the release shards, not the pack)", n,
                                     where(*by_name.at(n))));
    claimed[n] = true;
  }
  for (const FoundTensor& f : found)
    if (!claimed.count(f.name))
      problems.push_back(fmt::format("unexpected: {} ({}){}", f.name, describe(f), where(f)));
  if (problems.empty()) return ok_status();
  std::string msg = fmt::format("EXL3 pack does not match the V4.1 Mia layout for this config: {} problem{}",
                                problems.size(), problems.size() == 1 ? "" : "s");
  for (const std::string& s : problems) msg += "\n  " + s;
  return Status(StatusCode::data_loss, msg);
}

Status validate_tensor_storage(const Exl3PackPlan& plan, const exl3::QuantConfig& q,
                               const std::vector<FoundTensor>& found) {
  if (q.tensor_storage.empty()) return ok_status();
  std::unordered_map<std::string, const FoundTensor*> by_name;
  for (const FoundTensor& f : found) by_name.emplace(f.name, &f);
  std::vector<std::string> problems;
  for (const Exl3Group& g : plan.groups) {
    const auto it = q.tensor_storage.find(g.prefix);
    if (it == q.tensor_storage.end()) {
      problems.push_back(fmt::format("{}: not in tensor_storage", g.prefix));
      continue;
    }
    const exl3::ModuleStorage& m = it->second;
    if (!m.exl3) {
      problems.push_back(fmt::format("{}: tensor_storage says it is not EXL3, the pack holds {}.trellis", g.prefix, g.prefix));
      continue;
    }
    const auto trellis = by_name.find(g.prefix + ".trellis");
    if (trellis != by_name.end() && trellis->second->shape.size() == 3 &&
        trellis->second->shape[2] != 16 * int64_t{m.bits_per_weight})
      problems.push_back(fmt::format("{}: tensor_storage bits_per_weight {}, the trellis has {} bits per weight",
                                     g.prefix, m.bits_per_weight, trellis->second->shape[2] / 16));
    const exl3::Codebook marker = by_name.count(g.prefix + ".mcg")    ? exl3::Codebook::mcg
                                  : by_name.count(g.prefix + ".mul1") ? exl3::Codebook::mul1
                                                                      : exl3::Codebook::inst3;
    const exl3::Codebook listed = m.codebook.value_or(exl3::Codebook::inst3);
    if (listed != marker)
      problems.push_back(fmt::format("{}: tensor_storage codebook {}, the tensors' marker says {}", g.prefix,
                                     exl3::codebook_name(listed), exl3::codebook_name(marker)));
    for (const auto& [name, t] : m.stored_tensors) {
      const auto f = by_name.find(name);
      if (f == by_name.end()) problems.push_back(fmt::format("{}: tensor_storage lists {}, the pack lacks it", g.prefix, name));
      else if (f->second->shape != t.shape)
        problems.push_back(fmt::format("{}: tensor_storage shape [{}], the pack has [{}] (in {})", name,
                                       fmt::join(t.shape, ", "), fmt::join(f->second->shape, ", "), f->second->file));
    }
  }
  if (problems.empty()) return ok_status();
  std::string msg = fmt::format("quantization_config.json does not match the pack's tensors: {} problem{}",
                                problems.size(), problems.size() == 1 ? "" : "s");
  for (const std::string& s : problems) msg += "\n  " + s;
  return Status(StatusCode::data_loss, msg);
}

}  // namespace dsv4::family
