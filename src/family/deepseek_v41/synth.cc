// write_checkpoint: the expected tensor table streamed into shards with the bytes of a tensor source.
#include "family/deepseek_v41/synth.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <memory>
#include <system_error>
#include <utility>

#include "core/safetensors_writer.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/v41_tokenizer.h"
#include "family/deepseek_v41/synth_prefetch.h"
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

StatusOr<EngramTokenMap> synth_engram_token_map(const Config& c) {
  // The release's map when the config has the real vocabulary and compressed vocabulary.
  if (c.vocab_size == 129280 && !synth_tokenizer_json().value_or("").empty()) {
    DSV4_ASSIGN_OR_RETURN(const Tokenizer tok, load_v41_tokenizer());
    DSV4_ASSIGN_OR_RETURN(EngramTokenMap real,
                          build_engram_token_map(tok, static_cast<int32_t>(c.engram_pad_token_id)));
    if (real.vocab_size == c.vocab_size && real.compressed_vocab_size == c.engram_compressed_vocab_size)
      return real;
  }
  EngramTokenMap m;
  m.token_map = synthetic_engram_token_map(c);
  m.vocab_size = static_cast<int32_t>(c.vocab_size);
  m.compressed_vocab_size = static_cast<int32_t>(c.engram_compressed_vocab_size);
  m.pad_id = m.token_map[static_cast<size_t>(c.engram_pad_token_id)];
  return m;
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

std::string_view synth_sparse_name(SynthSparse s) {
  switch (s) {
    case SynthSparse::none: return "none";
    case SynthSparse::all: return "all";
    case SynthSparse::engram: return "engram";
  }
  return "?";
}

StatusOr<SynthSparse> parse_synth_sparse(std::string_view name) {
  for (SynthSparse s : {SynthSparse::none, SynthSparse::all, SynthSparse::engram})
    if (name == synth_sparse_name(s)) return s;
  return error(StatusCode::invalid_argument, "unknown sparse mode '{}' (all or engram)", name);
}

bool synth_hole(SynthSparse s, const TensorSpec& t) {
  switch (s) {
    case SynthSparse::none: return false;
    case SynthSparse::all: return true;
    case SynthSparse::engram: return t.role == TensorRole::engram_table || t.role == TensorRole::engram_scale;
  }
  return false;
}

int64_t synth_disk_bytes(const Config& c, SynthSparse sparse) {
  constexpr int64_t kBlock = int64_t{64} << 10;  // above any common file system block (4 KiB)
  const TensorTable t = expected_tensors(c);
  int64_t bytes = 0, hole_runs = 0;
  bool in_hole = false;
  int32_t shard = 0;
  for (const TensorSpec& s : t.tensors) {
    // Its shard header entry (name + ~90 characters) and its index line (name + ~45).
    bytes += 2 * static_cast<int64_t>(s.name.size()) + 160;
    if (s.shard != shard) in_hole = false;  // a hole never spans two files
    shard = s.shard;
    const bool hole = synth_hole(sparse, s);
    if (hole && !in_hole) ++hole_runs;  // adjacent holes are one hole with two partial edge blocks
    in_hole = hole;
    if (!hole) bytes += s.bytes();
  }
  bytes += (t.num_shards + 4) * kBlock + 2 * hole_runs * kBlock;  // shards, index, config, map, tokenizer
  bytes += static_cast<int64_t>(synth_tokenizer_json().value_or("").size() + config_to_json(c).size());
  if (c.has_engram()) bytes += c.vocab_size * 12;  // engram_token_map.json: one id and a comma per token
  return bytes;
}

namespace {

constexpr int64_t kPrefetchWindow = int64_t{128} << 20;  // bytes generated ahead per shard writer

std::string human_bytes(int64_t b) {
  return b >= 1000000000 ? fmt::format("{:.1f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
}

}  // namespace

Status check_synth_space(std::string_view out, std::string_view where, int64_t need, int64_t available) {
  if (available >= need) return ok_status();
  return error(StatusCode::resource_exhausted, "{} needs {} on disk but {} has {} free", out, human_bytes(need),
               where, human_bytes(available));
}

namespace {

// After a shard with holes: a file system without sparse files allocates them (as zeros). Refused
// once more than half the hole bytes hold blocks; the shard is removed so the disk is not left full.
Status check_holes_kept(const std::string& path, int64_t hole_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ok_status();  // the writer already reported what it could
  const int64_t allocated = int64_t{st.st_blocks} * 512, written = static_cast<int64_t>(st.st_size) - hole_bytes;
  if (allocated <= written + hole_bytes / 2 + (int64_t{1} << 20)) return ok_status();
  ::unlink(path.c_str());
  return error(StatusCode::unimplemented, "{}: the file system allocated {} bytes for {} written and {} left as "
               "holes: it does not keep sparse files, so --sparse would fill the disk (use ext4, xfs, btrfs or tmpfs)",
               path, allocated, written, hole_bytes);
}

Status write_text(const std::string& path, std::string_view text, bool sync) {
  return write_file_atomically(path, sync, [&](const auto& sink) {
    return sink({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  });
}

}  // namespace

TensorSource synthetic_tensor_source(const Config& c, uint64_t seed) {
  // The table is the source's own: scale tensors are generated from their weight's spec.
  auto ct = std::make_shared<const std::pair<Config, TensorTable>>(c, expected_tensors(c));
  TensorSource s;
  s.fill = [ct, seed](const TensorSpec& t, int64_t off, std::span<uint8_t> out) {
    synth_bytes(ct->first, ct->second, t, seed, off, out);
    return ok_status();
  };
  s.origin = fmt::format("dsv4 synth, seed {}", seed);
  s.concurrent = true;  // synth_bytes is a pure function of its arguments
  return s;
}

StatusOr<SynthResult> write_synthetic_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o) {
  return write_checkpoint(c, dir, o, synthetic_tensor_source(c, o.seed));
}

StatusOr<SynthResult> write_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o,
                                       const TensorSource& src) {
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
  // Each shard's first tensor: shards are written by `workers` threads taking the next unwritten one.
  std::vector<size_t> first(static_cast<size_t>(table.num_shards) + 2, table.tensors.size());
  for (size_t i = table.tensors.size(); i-- > 0;) first[static_cast<size_t>(table.tensors[i].shard)] = i;
  for (int32_t shard = table.num_shards; shard >= 1; --shard)
    first[static_cast<size_t>(shard)] = std::min(first[static_cast<size_t>(shard)], first[static_cast<size_t>(shard) + 1]);
  std::mutex mu;  // result, done, written, failure
  int64_t done = 0;
  int32_t written = 0;
  Status failure = ok_status();
  std::atomic<int32_t> next{1};
  const int workers = src.concurrent ? std::clamp(o.threads, 1, std::max(table.num_shards, 1)) : 1;
  std::atomic<int> writing{0};  // shards being written: each one's generation helpers share o.threads
  auto write_one = [&](int32_t shard) -> Status {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    std::vector<const TensorSpec*> generated;
    for (size_t i = first[static_cast<size_t>(shard)]; i < first[static_cast<size_t>(shard) + 1]; ++i)
      if (!synth_hole(o.sparse, table.tensors[i])) generated.push_back(&table.tensors[i]);
    // With threads to spare, the shard's tensors are generated ahead of the writer by several threads.
    std::optional<TensorPrefetch> ahead;
    if (workers > 1)
      ahead.emplace(generated, src, [&] { return o.threads / std::max(writing.load(), 1); }, kPrefetchWindow);
    size_t k = 0;
    for (size_t i = first[static_cast<size_t>(shard)]; i < first[static_cast<size_t>(shard) + 1]; ++i) {
      const TensorSpec* t = &table.tensors[i];
      if (synth_hole(o.sparse, *t)) {
        DSV4_RETURN_IF_ERROR(w.add_hole(t->name, t->dtype, t->shape));
        continue;
      }
      TensorFill fill = [&src, t](int64_t off, std::span<uint8_t> out) { return src.fill(*t, off, out); };
      if (ahead) fill = [&ahead, k](int64_t off, std::span<uint8_t> out) { return ahead->fill(k, off, out); };
      ++k;
      DSV4_RETURN_IF_ERROR(w.add_generated(t->name, t->dtype, t->shape, std::move(fill)));
    }
    const std::string file = table.shard_file(shard);
    DSV4_RETURN_IF_ERROR(sharded.write_shard(file, w));
    if (w.hole_bytes() > 0) DSV4_RETURN_IF_ERROR(check_holes_kept(dir + "/" + file, w.hole_bytes()));
    std::lock_guard<std::mutex> lock(mu);
    done += w.payload_bytes();
    result.hole_bytes += w.hole_bytes();
    result.tensors += static_cast<int64_t>(w.tensors().size());
    if (o.progress) o.progress({++written, table.num_shards, file, done, total});
    return ok_status();
  };
  auto worker = [&] {
    for (int32_t shard = next++; shard <= table.num_shards; shard = next++) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure.ok()) return;
      }
      ++writing;
      Status st = write_one(shard);
      --writing;
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = std::move(st);
        return;
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int k = 1; k < workers; ++k) pool.emplace_back(worker);
    worker();
  }
  DSV4_RETURN_IF_ERROR(failure);
  DSV4_RETURN_IF_ERROR(sharded.finish());
  DSV4_RETURN_IF_ERROR(write_text(dir + "/config.json", config_to_json(c), o.sync));
  if (c.has_engram()) {
    DSV4_ASSIGN_OR_RETURN(const EngramTokenMap map, engram_token_map_of(c, src));
    DSV4_RETURN_IF_ERROR(write_engram_token_map_file(dir + "/" + std::string(kEngramTokenMapFile), map));
  }
  if (auto tok = synth_tokenizer_json()) {
    DSV4_RETURN_IF_ERROR(write_text(dir + "/tokenizer.json", *tok, o.sync));
    result.wrote_tokenizer = true;
  }
  result.payload_bytes = done;
  result.shards = table.num_shards;
  return result;
}

StatusOr<EngramTokenMap> engram_token_map_of(const Config& c, const TensorSource& src) {
  if (src.engram_token_map) return *src.engram_token_map;
  return synth_engram_token_map(c);
}

}  // namespace dsv4::family
