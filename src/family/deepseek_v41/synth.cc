// write_synthetic_checkpoint: the expected tensor table streamed into shards with generated values.
#include "family/deepseek_v41/synth.h"

#include <filesystem>
#include <system_error>

#include "core/safetensors_writer.h"
#include "tokenizer/v41_tokenizer.h"
#include "family/deepseek_v41/synth_values.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {

std::optional<std::string_view> synth_tokenizer_json() {
  // The V4.1 tokenizer.json embedded by the tokenizer module. V4-0731's differs only in one image
  // token (tokenizer-and-chat.md §1.5) and has the same 129,280 ids, so it serves both variants.
  const std::string_view json = v41_tokenizer_json();
  if (json.empty()) return std::nullopt;
  return json;
}

std::vector<int32_t> synthetic_engram_token_map(const Config& c) {
  // Surjective onto [0, C): ids below C keep their id (so pad 2 -> 2 as in the release map), the
  // rest fold onto a hashed compressed id, as many raw ids share one normalized key in the release.
  const int64_t C = c.engram_compressed_vocab_size;
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    uint64_t z = static_cast<uint64_t>(v) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ULL;
    map[static_cast<size_t>(v)] = static_cast<int32_t>(v < C ? v : static_cast<int64_t>((z ^ (z >> 29)) % C));
  }
  return map;
}

namespace {

Status write_text(const std::string& path, std::string_view text, bool sync) {
  return write_file_atomically(path, sync, [&](const auto& sink) {
    return sink({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  });
}

}  // namespace

StatusOr<SynthResult> write_synthetic_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o) {
  DSV4_RETURN_IF_ERROR(validate_config(c));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(StatusCode::invalid_argument, "{}: cannot create directory: {}", dir, ec.message());

  const TensorTable table = expected_tensors(c);
  const int64_t total = table.total_bytes();
  SafetensorsWriteOptions wo;
  wo.sync = o.sync;
  ShardedSafetensorsWriter sharded(dir, wo);
  SynthResult result;
  size_t i = 0;
  int64_t done = 0;
  for (int32_t shard = 1; shard <= table.num_shards; ++shard) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (; i < table.tensors.size() && table.tensors[i].shard == shard; ++i) {
      const TensorSpec* t = &table.tensors[i];
      DSV4_RETURN_IF_ERROR(w.add_generated(t->name, t->dtype, t->shape,
                                           [&c, &table, t, seed = o.seed](int64_t off, std::span<uint8_t> out) {
                                             synth_bytes(c, table, *t, seed, off, out);
                                             return ok_status();
                                           }));
    }
    const std::string file = table.shard_file(shard);
    DSV4_RETURN_IF_ERROR(sharded.write_shard(file, w));
    done += w.payload_bytes();
    result.tensors += static_cast<int64_t>(w.tensors().size());
    if (o.progress) o.progress({shard, table.num_shards, file, done, total});
  }
  DSV4_RETURN_IF_ERROR(sharded.finish());
  DSV4_RETURN_IF_ERROR(write_text(dir + "/config.json", config_to_json(c), o.sync));
  if (c.has_engram()) {
    std::string text = "{\"source\": \"dsv4 synth: a synthetic map (ids below engram_compressed_vocab_size keep "
                       "their id, the others fold onto a hashed id), not the release's normalization-based map\",\n"
                       " \"token_map\": [";
    const std::vector<int32_t> map = synthetic_engram_token_map(c);
    for (size_t v = 0; v < map.size(); ++v) text += (v ? "," : "") + std::to_string(map[v]);
    text += "]}\n";
    DSV4_RETURN_IF_ERROR(write_text(dir + "/" + std::string(kEngramTokenMapFile), text, o.sync));
  }
  if (auto tok = synth_tokenizer_json()) {
    DSV4_RETURN_IF_ERROR(write_text(dir + "/tokenizer.json", *tok, o.sync));
    result.wrote_tokenizer = true;
  }
  result.payload_bytes = done;
  result.shards = table.num_shards;
  return result;
}

}  // namespace dsv4::family
