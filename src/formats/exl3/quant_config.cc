// Parsing of EXL3 quantization_config JSON with errors that name the offending key.
#include "formats/exl3/quant_config.h"

#include <nlohmann/json.hpp>

namespace dsv4::exl3 {

using nlohmann::json;

namespace {

Status bad(std::string_view source, std::string_view key, std::string_view what) {
  return error(StatusCode::invalid_argument, "{}: quantization_config.{}: {}", source, key, what);
}

StatusOr<ModuleStorage> parse_module(const json& entry, std::string_view source, const std::string& key) {
  ModuleStorage out;
  if (!entry.is_object()) return bad(source, key, "expected an object");
  const auto tensors = entry.find("stored_tensors");
  if (tensors == entry.end() || !tensors->is_object()) return bad(source, key + ".stored_tensors", "missing or not an object");
  for (const auto& [name, t] : tensors->items()) {
    StoredTensor st;
    const std::string where = key + ".stored_tensors." + name;
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array()) return bad(source, where, "missing shape");
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad(source, where, "shape must hold non-negative integers");
      st.shape.push_back(d.get<int64_t>());
    }
    if (t.contains("n_bytes")) {
      if (!t["n_bytes"].is_number_integer()) return bad(source, where + ".n_bytes", "expected an integer");
      st.n_bytes = t["n_bytes"].get<int64_t>();
    }
    if (t.contains("dtype")) {
      if (!t["dtype"].is_string()) return bad(source, where + ".dtype", "expected a string");
      st.dtype = t["dtype"].get<std::string>();
    }
    out.stored_tensors.emplace(name, std::move(st));
  }
  if (entry.contains("quant_format")) {
    if (!entry["quant_format"].is_string()) return bad(source, key + ".quant_format", "expected a string");
    const std::string format = entry["quant_format"].get<std::string>();
    if (format != "exl3") return bad(source, key + ".quant_format", "unsupported format '" + format + "'");
    out.exl3 = true;
    if (!entry.contains("bits_per_weight") || !entry["bits_per_weight"].is_number_integer())
      return bad(source, key + ".bits_per_weight", "missing or not an integer");
    out.bits_per_weight = entry["bits_per_weight"].get<int>();
    if (out.bits_per_weight < 1 || out.bits_per_weight > 8)
      return bad(source, key + ".bits_per_weight", "must be 1..8");
  }
  const auto check_multiplier = [&](const char* name, uint32_t expect, Codebook cb) -> Status {
    if (!entry.contains(name)) return ok_status();
    if (!entry[name].is_number_unsigned() || entry[name].get<uint64_t>() != expect)
      return bad(source, key + "." + name, fmt::format("expected {}", expect));
    out.codebook = cb;
    return ok_status();
  };
  DSV4_RETURN_IF_ERROR(check_multiplier("mcg_multiplier", kMcgMultiplier, Codebook::mcg));
  DSV4_RETURN_IF_ERROR(check_multiplier("mul1_multiplier", kMul1Multiplier, Codebook::mul1));
  return out;
}

}  // namespace

StatusOr<QuantConfig> parse_quant_config(std::string_view json_text, std::string_view source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(StatusCode::invalid_argument, "{}: not valid JSON", source);
  if (j.contains("quantization_config")) j = j["quantization_config"];  // a whole config.json
  if (!j.is_object()) return bad(source, "", "expected an object");
  QuantConfig out;
  if (!j.contains("quant_method") || !j["quant_method"].is_string() || j["quant_method"] != "exl3")
    return bad(source, "quant_method", "expected \"exl3\"");
  if (j.contains("version")) {
    if (!j["version"].is_string()) return bad(source, "version", "expected a string");
    out.version = j["version"].get<std::string>();
  }
  if (!j.contains("bits") || !j["bits"].is_number()) return bad(source, "bits", "missing or not a number");
  out.bits = j["bits"].get<double>();
  if (j.contains("head_bits")) {
    if (!j["head_bits"].is_number_integer()) return bad(source, "head_bits", "expected an integer");
    out.head_bits = j["head_bits"].get<int>();
  }
  if (j.contains("mtp_bits")) {
    if (!j["mtp_bits"].is_number_integer()) return bad(source, "mtp_bits", "expected an integer");
    out.mtp_bits = j["mtp_bits"].get<int>();
  }
  if (j.contains("out_scales")) {
    if (!j["out_scales"].is_string()) return bad(source, "out_scales", "expected a string");
    out.out_scales = j["out_scales"].get<std::string>();
  }
  if (j.contains("codebook")) {
    if (!j["codebook"].is_string()) return bad(source, "codebook", "expected a string");
    const auto cb = codebook_from_name(j["codebook"].get<std::string>());
    if (!cb) return bad(source, "codebook", "unknown codebook '" + j["codebook"].get<std::string>() + "'");
    out.codebook = *cb;
  }
  if (j.contains("tensor_storage")) {
    if (!j["tensor_storage"].is_object()) return bad(source, "tensor_storage", "expected an object");
    for (const auto& [key, entry] : j["tensor_storage"].items()) {
      DSV4_ASSIGN_OR_RETURN(ModuleStorage m, parse_module(entry, source, "tensor_storage." + key));
      out.tensor_storage.emplace(key, std::move(m));
    }
  }
  return out;
}

std::string quant_config_to_json(const QuantConfig& q) {
  json j{{"quant_method", "exl3"}, {"version", q.version}, {"bits", q.bits}, {"head_bits", q.head_bits},
         {"out_scales", q.out_scales}, {"codebook", std::string(codebook_name(q.codebook))}};
  if (q.mtp_bits) j["mtp_bits"] = *q.mtp_bits;
  if (!q.tensor_storage.empty()) {
    json ts = json::object();
    for (const auto& [key, m] : q.tensor_storage) {
      json e{{"stored_tensors", json::object()}};
      for (const auto& [name, t] : m.stored_tensors)
        e["stored_tensors"][name] = {{"shape", t.shape}, {"n_bytes", t.n_bytes}, {"dtype", t.dtype}};
      if (m.exl3) {
        e["quant_format"] = "exl3";
        e["bits_per_weight"] = m.bits_per_weight;
        if (m.codebook == Codebook::mcg) e["mcg_multiplier"] = kMcgMultiplier;
        if (m.codebook == Codebook::mul1) e["mul1_multiplier"] = kMul1Multiplier;
      }
      ts[key] = e;
    }
    j["tensor_storage"] = ts;
  }
  return j.dump(1) + "\n";
}

}  // namespace dsv4::exl3
