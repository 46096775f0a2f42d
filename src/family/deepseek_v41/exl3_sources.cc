// EXL3 pack config parsing and the release shards of the Engram tables (see exl3_sources.h).
#include "family/deepseek_v41/exl3_sources.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/sha256.h"

namespace dsv4::family {

using nlohmann::json;

namespace {

// The V4.1 release's quantization_config (formats.md §2.1).
json v41_release_quant() {
  return json{{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {32, 32}},
              {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"}};
}

json parse_or_null(std::string_view text) {
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

bool is_exl3_config_text(std::string_view json_text) {
  const json j = parse_or_null(json_text);
  if (!j.is_object() || !j.contains("quantization_config")) return false;
  const json& q = j["quantization_config"];
  return q.is_object() && q.contains("quant_method") && q["quant_method"] == "exl3";
}

StatusOr<Exl3PackConfig> parse_exl3_pack_config(std::string_view json_text) {
  json root = parse_or_null(json_text);
  if (!root.is_object()) return error(StatusCode::invalid_argument, "config.json: not a JSON object");
  if (!root.contains("quantization_config"))
    return error(StatusCode::invalid_argument, "config.json: quantization_config missing");
  Exl3PackConfig out;
  DSV4_ASSIGN_OR_RETURN(out.quant, exl3::parse_quant_config(root["quantization_config"].dump(), "config.json"));
  json release = v41_release_quant();
  if (root.contains("original_quantization_config")) {
    if (!root["original_quantization_config"].is_object())
      return error(StatusCode::invalid_argument, "config.json: original_quantization_config is not an object");
    release = root["original_quantization_config"];
    root.erase("original_quantization_config");
  }
  root["quantization_config"] = release;
  DSV4_ASSIGN_OR_RETURN(out.config, parse_config(root.dump()));
  return out;
}

std::string exl3_pack_config_json(const Config& c, const exl3::QuantConfig& q) {
  json root = json::parse(config_to_json(c));
  root["original_quantization_config"] = root["quantization_config"];
  json e{{"quant_method", "exl3"}, {"version", q.version}, {"bits", q.bits}, {"head_bits", q.head_bits},
         {"out_scales", q.out_scales}, {"codebook", std::string(exl3::codebook_name(q.codebook))}};
  if (q.mtp_bits) e["mtp_bits"] = *q.mtp_bits;
  root["quantization_config"] = e;
  return root.dump(2) + "\n";
}

Status check_pack_tensor_storage(const std::string& pack_dir, const Exl3PackPlan& plan,
                                 const std::vector<FoundTensor>& found) {
  const std::string path = pack_dir + "/quantization_config.json";
  std::ifstream in{path, std::ios::binary};
  if (!in) return ok_status();
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  DSV4_ASSIGN_OR_RETURN(const exl3::QuantConfig q, exl3::parse_quant_config(text, path));
  return validate_tensor_storage(plan, q, found).with_context(path);
}

EngramSources v41_flash_release_engram_sources() {
  // File sizes: model-spec.md §5.5 (shard map, file bytes from the release manifest). The tables are
  // layers.1 in shard 47 and layers.14 in shard 48 (formats.md §2.5). No digest is recorded.
  EngramSources s;
  s.origin = "DeepSeek-V4.1-Flash release (deepseek-ai/DeepSeek-V4.1-Flash @ dba1be0a40aa45a94ad051997016db3960a90277)";
  s.shards.push_back({"model-00047-of-00048.safetensors", 101535150936, "",
                      {"layers.1.engram.embed.scale", "layers.1.engram.embed.weight"}});
  s.shards.push_back({"model-00048-of-00048.safetensors", 101537926640, "",
                      {"layers.14.engram.embed.scale", "layers.14.engram.embed.weight"}});
  return s;
}

std::string engram_sources_json(const EngramSources& s) {
  json j{{"origin", s.origin}, {"shards", json::array()}};
  for (const ReleaseShard& r : s.shards)
    j["shards"].push_back({{"file", r.file}, {"bytes", r.bytes}, {"sha256", r.sha256}, {"tensors", r.tensors}});
  return j.dump(2) + "\n";
}

StatusOr<EngramSources> parse_engram_sources(std::string_view json_text, std::string_view source) {
  const json j = parse_or_null(json_text);
  const auto bad = [&](std::string_view what) { return error(StatusCode::invalid_argument, "{}: {}", source, what); };
  if (!j.is_object() || !j.contains("shards") || !j["shards"].is_array()) return bad("expected {\"shards\": [...]}");
  EngramSources s;
  if (j.contains("origin") && j["origin"].is_string()) s.origin = j["origin"].get<std::string>();
  for (const json& e : j["shards"]) {
    ReleaseShard r;
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string()) return bad("a shard entry lacks \"file\"");
    r.file = e["file"].get<std::string>();
    if (r.file.find('/') != std::string::npos) return bad(fmt::format("shard file '{}' is not a plain file name", r.file));
    if (e.contains("bytes")) {
      if (!e["bytes"].is_number_integer()) return bad(fmt::format("{}: bytes is not an integer", r.file));
      r.bytes = e["bytes"].get<int64_t>();
    }
    if (e.contains("sha256")) {
      if (!e["sha256"].is_string()) return bad(fmt::format("{}: sha256 is not a string", r.file));
      r.sha256 = e["sha256"].get<std::string>();
    }
    if (!e.contains("tensors") || !e["tensors"].is_array()) return bad(fmt::format("{}: tensors missing", r.file));
    for (const json& t : e["tensors"]) {
      if (!t.is_string()) return bad(fmt::format("{}: tensors must be names", r.file));
      r.tensors.push_back(t.get<std::string>());
    }
    s.shards.push_back(std::move(r));
  }
  return s;
}

StatusOr<EngramSources> engram_sources_for(const std::string& pack_dir, const Config& c, const TensorTable& release) {
  const std::string path = pack_dir + "/" + std::string(kEngramSourcesFile);
  if (std::ifstream in{path, std::ios::binary}) {
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_engram_sources(ss.str(), path);
  }
  const EngramSources real = v41_flash_release_engram_sources();
  bool matches = release.num_shards == 48;
  for (const ReleaseShard& r : real.shards)
    for (const std::string& t : r.tensors) {
      const TensorSpec* s = release.find(t);
      matches = matches && s && release.shard_file(s->shard) == r.file;
    }
  if (matches && c.engram_num_embeddings == std::vector<int64_t>{384006168, 384016682}) return real;
  return error(StatusCode::not_found,
               "{}: no {} and the config's Engram tables are not the V4.1-Flash release's, so the release shards "
               "holding them are unknown", pack_dir, kEngramSourcesFile);
}

StatusOr<std::vector<Checkpoint>> open_engram_shards(const std::string& dir, const EngramSources& s,
                                                     const TensorTable& release, std::vector<std::string>* notes) {
  namespace fs = std::filesystem;
  std::vector<Checkpoint> out;
  for (const ReleaseShard& r : s.shards) {
    const std::string path = (fs::path(dir) / r.file).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      return error(StatusCode::not_found, "release shard {} is missing from {} (it holds {}; record: {})", r.file, dir,
                   fmt::join(r.tensors, ", "), s.origin);
    const int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
    if (r.bytes > 0 && size != r.bytes)
      return error(StatusCode::data_loss, "{}: {} bytes, the release shard has {} (truncated or a different file)",
                   path, size, r.bytes);
    if (!r.sha256.empty()) {
      DSV4_ASSIGN_OR_RETURN(std::string digest, sha256_file_hex(path));
      if (digest != r.sha256)
        return error(StatusCode::data_loss, "{}: SHA-256 {}, expected {} (record: {})", path, digest, r.sha256, s.origin);
    } else if (notes) {
      notes->push_back(fmt::format("{}: no SHA-256 recorded for this shard; checked size, header, names, dtypes "
                                   "and shapes only", path));
    }
    DSV4_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(path));
    for (const std::string& name : r.tensors) {
      const TensorSpec* e = release.find(name);
      if (!e) return error(StatusCode::invalid_argument, "{}: recorded tensor '{}' is not in this config", r.file, name);
      auto t = ck.find(name);
      if (!t.ok()) return error(StatusCode::data_loss, "{}: tensor '{}' is missing", path, name);
      const DType dt = t->view.dtype;
      const bool dtype_ok = dt == e->dtype || (e->dtype == DType::f8_e8m0 && dt == DType::u8);
      if (!dtype_ok || t->view.shape != e->shape)
        return error(StatusCode::data_loss, "{}: tensor '{}' is {} [{}], expected {} [{}]", path, name,
                     dtype_name(dt), fmt::join(t->view.shape, ", "), dtype_name(e->dtype), fmt::join(e->shape, ", "));
    }
    out.push_back(std::move(ck));
  }
  return out;
}

}  // namespace dsv4::family
