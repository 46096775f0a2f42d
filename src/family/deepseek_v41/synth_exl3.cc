// write_exl3_pack: release bytes of a tensor source -> dense linears -> EXL3 tensors, native tensors copied.
#include "family/deepseek_v41/synth_exl3.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "core/safetensors_writer.h"
#include "core/sha256.h"
#include "family/deepseek_v41/exl3_sources.h"
#include "family/deepseek_v41/linear_values.h"
#include "formats/exl3/quantize.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4::family {
namespace {

bool contains(const std::string& s, std::string_view x) { return s.find(x) != std::string::npos; }

exl3::Codebook synth_codebook(const Exl3Group& g) {
  if (contains(g.release, "shared_experts")) return exl3::Codebook::mcg;
  if (g.release == "head") return exl3::Codebook::inst3;
  return exl3::Codebook::mul1;
}

// The whole stored bytes of `t` from `src`.
StatusOr<std::vector<uint8_t>> all_bytes(const TensorSource& src, const TensorSpec& t) {
  std::vector<uint8_t> b(static_cast<size_t>(t.bytes()));
  DSV4_RETURN_IF_ERROR(src.fill(t, 0, b));
  return b;
}

// The release linear's exact values, [out, in] row-major, decoded from its release bytes in `src`.
StatusOr<std::vector<float>> release_dense(const Config& c, const TensorTable& t, const std::string& group,
                                           const TensorSource& src) {
  const TensorSpec* w = t.find(group + ".weight");
  DSV4_CHECK(w != nullptr);
  const int64_t out = w->shape[0];
  DSV4_ASSIGN_OR_RETURN(const std::vector<uint8_t> wb, all_bytes(src, *w));
  if (w->role == TensorRole::linear) return matrix_values(wb.data(), DType::bf16, static_cast<int64_t>(wb.size() / 2));
  const TensorSpec* s = t.find(group + ".scale");
  DSV4_CHECK(s != nullptr);
  DSV4_ASSIGN_OR_RETURN(const std::vector<uint8_t> sb, all_bytes(src, *s));
  const int64_t scols = s->shape[1];
  if (w->role == TensorRole::fp4_weight) return fp4_linear_values(wb.data(), sb.data(), out, w->shape[1] * 2, scols);
  return fp8_linear_values(wb.data(), sb.data(), out, w->shape[1], c.quant.weight_block_out, c.quant.weight_block_in,
                           scols);
}

std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The tensor_storage entry ExLlamaV3 writes for one EXL3 linear (formats.md §1.10).
exl3::ModuleStorage storage_of(const exl3::Linear& L) {
  exl3::ModuleStorage m;
  const std::string p = L.name + ".";
  m.stored_tensors[p + "trellis"] = {{L.in_features / 16, L.out_features / 16, 16 * L.bits},
                                     int64_t(L.trellis.size()) * 2, "torch.int16"};
  m.stored_tensors[p + "suh"] = {{L.in_features}, L.in_features * 2, "torch.float16"};
  m.stored_tensors[p + "svh"] = {{L.out_features}, L.out_features * 2, "torch.float16"};
  if (L.codebook != exl3::Codebook::inst3)
    m.stored_tensors[p + (L.codebook == exl3::Codebook::mcg ? "mcg" : "mul1")] = {{}, 4, "torch.int32"};
  m.exl3 = true;
  m.bits_per_weight = L.bits;
  if (L.codebook != exl3::Codebook::inst3) m.codebook = L.codebook;
  return m;
}

Status add_exl3(SafetensorsWriter& w, const exl3::Linear& L) {
  const std::string p = L.name + ".";
  DSV4_RETURN_IF_ERROR(w.add(p + "trellis", DType::i16, {L.in_features / 16, L.out_features / 16, 16 * L.bits},
                             std::vector<uint8_t>(L.trellis.bytes(), L.trellis.bytes() + L.trellis.nbytes())));
  DSV4_RETURN_IF_ERROR(w.add(p + "suh", DType::f16, {L.in_features}, u16_bytes(L.suh)));
  DSV4_RETURN_IF_ERROR(w.add(p + "svh", DType::f16, {L.out_features}, u16_bytes(L.svh)));
  if (L.codebook == exl3::Codebook::inst3) return ok_status();
  const uint32_t marker = L.codebook == exl3::Codebook::mcg ? exl3::kMcgMultiplier : exl3::kMul1Multiplier;
  std::vector<uint8_t> mb(4);
  std::memcpy(mb.data(), &marker, 4);
  return w.add(p + (L.codebook == exl3::Codebook::mcg ? "mcg" : "mul1"), DType::i32, {}, std::move(mb));
}

Status write_text(const std::string& path, std::string_view text, bool sync) {
  return write_file_atomically(path, sync, [&](const auto& sink) {
    return sink({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  });
}

Status add_release_tensor(SafetensorsWriter& w, const TensorSpec* t, const TensorSource& src) {
  return w.add_generated(t->name, t->dtype, t->shape,
                         [&src, t](int64_t off, std::span<uint8_t> out) { return src.fill(*t, off, out); });
}

}  // namespace

int exl3_synth_bits(const Exl3Group& g) {
  const std::string& r = g.release;
  if (r.rfind("mtp.", 0) == 0 || r == "head" || contains(r, "shared_experts") || contains(r, "engram.")) return 4;
  if (contains(r, ".experts.")) {
    const size_t a = r.find(".experts.") + 9;
    return std::stoi(r.substr(a, r.find('.', a) - a)) % 2 ? 3 : 2;
  }
  return 5;
}

exl3::Linear encode_synth_exl3(const Exl3Group& g, std::span<const float> dense, uint64_t seed) {
  const int64_t row0 = g.slice < 0 ? 0 : int64_t{g.slice} * g.out;
  DSV4_CHECK(static_cast<int64_t>(dense.size()) >= (row0 + g.out) * g.in);
  std::vector<float> wt(g.in_padded * g.out_padded, 0.0f);  // W [in, out] = release rows transposed
  for (int64_t k = 0; k < g.in; ++k)
    for (int64_t n = 0; n < g.out; ++n) wt[k * g.out_padded + n] = dense[(row0 + n) * g.in + k];
  return exl3::quantize_linear(g.prefix, wt, g.in_padded, g.out_padded, exl3_synth_bits(g), synth_codebook(g), seed);
}

StatusOr<Exl3SynthResult> write_synthetic_exl3_pack(const Config& c, const std::string& dir, const Exl3SynthOptions& o) {
  return write_exl3_pack(c, dir, o, synthetic_tensor_source(c, o.seed));
}

StatusOr<Exl3SynthResult> write_exl3_pack(const Config& c, const std::string& dir, const Exl3SynthOptions& o,
                                          const TensorSource& src) {
  DSV4_RETURN_IF_ERROR(validate_config(c));
  DSV4_ASSIGN_OR_RETURN(const Exl3PackPlan plan, exl3_pack_plan(c));
  if (o.release_dir.empty() && !plan.release_shards.empty())
    return error(StatusCode::invalid_argument, "an EXL3 pack with Engram layers needs a directory for the release shards");
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& d : {dir, o.release_dir}) {
    if (d.empty()) continue;
    fs::create_directories(d, ec);
    if (ec) return error(StatusCode::invalid_argument, "{}: cannot create directory: {}", d, ec.message());
  }
  const TensorTable& table = plan.release;
  SafetensorsWriteOptions wo;
  wo.sync = o.sync;
  Exl3SynthResult result;

  // The release shards holding the Engram tables, written whole as the release writer would.
  EngramSources sources;
  sources.origin = fmt::format("synthetic release shards ({})", src.origin);
  std::map<int32_t, std::vector<std::string>> table_shards;
  for (size_t i : plan.release_shards) table_shards[table.tensors[i].shard].push_back(table.tensors[i].name);
  for (const auto& [shard, names] : table_shards) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const TensorSpec& t : table.tensors)
      if (t.shard == shard) DSV4_RETURN_IF_ERROR(add_release_tensor(w, &t, src));
    const std::string path = (fs::path(o.release_dir) / table.shard_file(shard)).string();
    DSV4_RETURN_IF_ERROR(w.write(path, wo));
    DSV4_ASSIGN_OR_RETURN(std::string digest, sha256_file_hex(path));
    sources.shards.push_back({table.shard_file(shard), static_cast<int64_t>(fs::file_size(path, ec)), digest, names});
    ++result.release_shards;
  }

  // The pack, shard by shard in the release's numbering.
  std::vector<bool> in_pack(table.tensors.size(), false);
  for (const auto* list : {&plan.native, &plan.native_optional})
    for (size_t i : *list) in_pack[i] = true;
  ShardedSafetensorsWriter sharded(dir, wo);
  double bit_weights = 0, weights = 0;
  exl3::QuantConfig q;
  const int64_t total = table.total_bytes();
  for (int32_t shard = 1; shard <= table.num_shards; ++shard) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (size_t i = 0; i < table.tensors.size(); ++i)
      if (in_pack[i] && table.tensors[i].shard == shard)
        DSV4_RETURN_IF_ERROR(add_release_tensor(w, &table.tensors[i], src));
    std::string dense_of;
    std::vector<float> dense;  // [out, in] of the release group, reused across wo_a slices
    for (const Exl3Group& g : plan.groups) {
      if (g.shard != shard) continue;
      if (dense_of != g.release) {
        DSV4_ASSIGN_OR_RETURN(dense, release_dense(c, table, g.release, src));
        dense_of = g.release;
      }
      const exl3::Linear L = encode_synth_exl3(g, dense, o.seed);
      DSV4_RETURN_IF_ERROR(add_exl3(w, L));
      q.tensor_storage[L.name] = storage_of(L);
      bit_weights += double(L.bits) * g.in_padded * g.out_padded;
      weights += double(g.in_padded) * g.out_padded;
      ++result.exl3_linears;
    }
    if (w.tensors().empty()) continue;
    const std::string file = table.shard_file(shard);
    DSV4_RETURN_IF_ERROR(sharded.write_shard(file, w));
    result.payload_bytes += w.payload_bytes();
    result.tensors += static_cast<int64_t>(w.tensors().size());
    ++result.shards;
    if (o.progress) o.progress({shard, table.num_shards, file, result.payload_bytes, total});
  }
  DSV4_RETURN_IF_ERROR(sharded.finish());
  result.bits = weights > 0 ? bit_weights / weights : 0;

  q.version = "dsv4-synth";
  q.bits = result.bits;
  q.head_bits = 4;
  q.mtp_bits = 4;
  q.out_scales = "always";
  q.codebook = exl3::Codebook::mul1;
  DSV4_RETURN_IF_ERROR(write_text(dir + "/config.json", exl3_pack_config_json(c, q), o.sync));
  DSV4_RETURN_IF_ERROR(write_text(dir + "/quantization_config.json", exl3::quant_config_to_json(q), o.sync));
  if (!sources.shards.empty())
    DSV4_RETURN_IF_ERROR(write_text(dir + "/" + std::string(kEngramSourcesFile), engram_sources_json(sources), o.sync));
  if (c.has_engram()) {
    DSV4_ASSIGN_OR_RETURN(const EngramTokenMap map, engram_token_map_of(c, src));
    DSV4_RETURN_IF_ERROR(write_engram_token_map_file(dir + "/" + std::string(kEngramTokenMapFile), map));
  }
  if (auto tok = synth_tokenizer_json()) DSV4_RETURN_IF_ERROR(write_text(dir + "/tokenizer.json", *tok, o.sync));
  return result;
}

}  // namespace dsv4::family
