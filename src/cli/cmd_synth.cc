// `dsv4 synth`: writes a synthetic checkpoint in the release layout (random values or the whole-model
// gate's weights), or an EXL3 pack, or lists its tensor table.
#include <CLI/CLI.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "cli/command.h"
#include "family/deepseek_v41/gate_checkpoint.h"
#include "family/deepseek_v41/gate_weights.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/synth_exl3.h"
#include "family/deepseek_v41/tensors.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4::cli {
namespace {

using namespace dsv4::family;

int run_synth(int argc, char** argv) {
  CLI::App app{"Write a synthetic checkpoint (config.json, sharded safetensors with the official names, "
               "dtypes, shapes and shard grouping, model.safetensors.index.json, tokenizer.json)",
               "dsv4 synth"};
  std::string preset_s, variant_s = "v41", out, format = "release", engram_out, profile = "random", sparse_s = "none";
  uint64_t seed = 0;
  int64_t layers = 0;
  int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  bool list = false, no_sync = false;
  app.add_option("--preset", preset_s, "tiny (CPU, seconds, every layer role), small (CPU-friendly) or full "
                                       "(the release shape: 510 GB for v41, 167 GB for v4-0731; free space is checked first)")->required();
  app.add_option("--variant", variant_s, "v41 (V4.1-Flash) or v4-0731 (V4-Flash-0731)")->capture_default_str();
  app.add_option("--seed", seed, "seed of the random weights; same seed, same bytes (--profile random only)")
      ->capture_default_str();
  app.add_option("--profile", profile, "random (the random weights of --seed) or gate (the whole-model gate's weights, "
                                       "docs/numerics.md: tiny and small presets; with --format exl3 their linears "
                                       "encoded as the EXL3 gate weights are)")
      ->check(CLI::IsMember({"random", "gate"}))->capture_default_str();
  app.add_option("--out", out, "output directory (created if absent; same-named files are replaced)");
  app.add_flag("--list", list, "print the tensor table (name, dtype, [shape], shard file; tab-separated) "
                               "and write nothing; totals go to stderr");
  app.add_option("--format", format, "release (DeepSeek's FP8/FP4 layout) or exl3 (an EXL3 pack in the Mia layout: "
                                     "linears re-encoded as EXL3, Engram tables left to the release shards)")
      ->check(CLI::IsMember({"release", "exl3"}))->capture_default_str();
  app.add_option("--engram-out", engram_out, "with --format exl3: where the release shards holding the Engram "
                                             "tables are written (default: OUT/release-engram)");
  app.add_option("--sparse", sparse_s, "all: every tensor's bytes left as file holes (release layout and sizes, "
                                      "almost no disk; holes read as zeros); engram: only the Engram tables'. Zero "
                                      "weights are for load tests only (not with --profile gate or --format exl3)")
      ->check(CLI::IsMember({"none", "all", "engram"}))->capture_default_str();
  app.add_option("--layers", layers, "keep only the first N >= 1 backbone layers at the preset's full width (head, "
                                     "final norm and DSpark stages stay; layer roles cut as docs/synth.md says)");
  app.add_option("--threads", threads, "shards generated and written at once (--profile random --format release; "
                                       "default: the CPU count, at most 16)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_flag("--no-sync", no_sync, "skip fsync of the written files (faster, for throwaway output)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto preset = parse_preset(preset_s);
  auto variant = parse_variant(variant_s);
  if (!preset.ok() || !variant.ok()) {
    std::fprintf(stderr, "dsv4 synth: %s\n", (!preset.ok() ? preset.status() : variant.status()).to_string().c_str());
    return 2;
  }
  Config c = preset_config(*preset, *variant);
  const int32_t all_layers = c.num_hidden_layers;
  if (app.count("--layers")) {
    auto cut = with_layers(c, static_cast<int32_t>(std::clamp<int64_t>(layers, INT32_MIN, INT32_MAX)));
    if (!cut.ok()) {
      std::fprintf(stderr, "dsv4 synth: --layers %lld: %s\n", static_cast<long long>(layers),
                   cut.status().message().c_str());
      return 2;
    }
    c = *std::move(cut);
  }
  const SynthSparse sparse = *parse_synth_sparse(sparse_s);  // CLI11 checked the name
  if (list) {
    const TensorTable t = expected_tensors(c);
    std::string line;
    for (const TensorSpec& s : t.tensors) {
      line = fmt::format("{}\t{}\t[{}]\t{}\n", s.name, dtype_name(s.dtype), fmt::join(s.shape, ", "),
                         t.shard_file(s.shard));
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
    std::fprintf(stderr, "# %s %s: %zu tensors, %lld bytes, %d shards\n", std::string(preset_name(*preset)).c_str(),
                 std::string(variant_name(*variant)).c_str(), t.tensors.size(),
                 static_cast<long long>(t.total_bytes()), t.num_shards);
    return 0;
  }
  if (out.empty()) {
    std::fprintf(stderr, "dsv4 synth: --out DIR is required unless --list is given\n");
    return 2;
  }
  const bool gate = profile == "gate";
  if (sparse != SynthSparse::none && (gate || format == "exl3")) {
    // Holes are zeros: gate weights with zero tables are no gate, and a pack's linears are re-encoded.
    std::fprintf(stderr, "dsv4 synth: --sparse writes zero weights for load tests; it is for --profile random "
                 "--format release only, not %s\n", gate ? "--profile gate" : "--format exl3");
    return 2;
  }
  if (gate) {
    // The gate weights are built in memory before they are written: a full preset would not fit.
    if (*preset == Preset::full) {
      std::fprintf(stderr, "dsv4 synth: --profile gate is for the tiny and small presets, not full\n");
      return 2;
    }
    if (app.count("--seed") && seed != kGateSeed) {
      std::fprintf(stderr, "dsv4 synth: --profile gate writes the gate weights of seed %llu; --seed is for "
                   "--profile random\n", static_cast<unsigned long long>(kGateSeed));
      return 2;
    }
    seed = kGateSeed;
    if (c.has_engram())
      std::fprintf(stderr, "note: the Engram hash multipliers are the release's (derived from the layer ids; no file "
                   "holds them): every tensor is the gate weights', but V4.1 logits differ from those of the in-memory "
                   "gate weights (docs/numerics.md, \"The gate on written files\")\n");
  }
  {
    // Refuse up front when the files cannot fit (the full presets are 167-510 GB), naming both sizes;
    // only bytes that will be written count (holes take no disk).
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path probe = fs::absolute(out, ec);
    while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
    const auto space = fs::space(probe.empty() ? fs::path(".") : probe, ec);
    if (!ec) {
      const Status st = check_synth_space(out, probe.string(), synth_disk_bytes(c, sparse),
                                          static_cast<int64_t>(std::min<uintmax_t>(space.available, INT64_MAX)));
      if (!st.ok()) {
        std::fprintf(stderr, "dsv4 synth: %s\n", st.message().c_str());
        return 2;
      }
    }
  }
  const std::string what = gate ? "gate profile" : "seed " + std::to_string(seed);
  if (format == "exl3") {
    Exl3SynthOptions xo;
    xo.seed = seed;
    xo.sync = !no_sync;
    xo.release_dir = engram_out.empty() ? out + "/release-engram" : engram_out;
    xo.progress = [](const SynthProgress& p) {
      std::fprintf(stderr, "\rsynth exl3: shard %d/%d", p.shard, p.num_shards);
      if (p.shard == p.num_shards) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
    auto r = gate ? write_gate_exl3_pack(c, out, xo) : write_synthetic_exl3_pack(c, out, xo);
    if (!r.ok()) {
      std::fprintf(stderr, "dsv4 synth: %s\n", r.status().to_string().c_str());
      return 1;
    }
    std::printf("wrote %s: EXL3 pack, %s %s %s, %lld tensors (%d EXL3 linears, %.2f bits/weight), %lld bytes in "
                "%d shards; %d release shard(s) with the Engram tables in %s\n", out.c_str(),
                std::string(preset_name(*preset)).c_str(), std::string(variant_name(*variant)).c_str(),
                what.c_str(), static_cast<long long>(r->tensors), r->exl3_linears, r->bits,
                static_cast<long long>(r->payload_bytes), r->shards, r->release_shards, xo.release_dir.c_str());
    return 0;
  }
  SynthOptions o;
  o.seed = seed;
  o.sync = !no_sync;
  o.sparse = sparse;
  o.threads = threads;
  o.progress = [](const SynthProgress& p) {
    std::fprintf(stderr, "\rsynth: %d/%d shards  %.1f / %.1f MB", p.shard, p.num_shards, p.bytes_done / 1e6,
                 p.bytes_total / 1e6);
    if (p.shard == p.num_shards) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  auto r = gate ? write_gate_checkpoint(c, out, o) : write_synthetic_checkpoint(c, out, o);
  if (!r.ok()) {
    std::fprintf(stderr, "dsv4 synth: %s\n", r.status().to_string().c_str());
    return 1;
  }
  const std::string cut = c.num_hidden_layers < all_layers
                              ? fmt::format(" ({} of {} layers)", c.num_hidden_layers, all_layers) : std::string();
  const std::string holes = sparse == SynthSparse::none ? std::string()
                            : fmt::format(" ({} bytes left as file holes, --sparse {})", r->hole_bytes, sparse_s);
  std::printf("wrote %s: %s %s%s %s, %lld tensors, %lld bytes in %d shards%s%s\n", out.c_str(),
              std::string(preset_name(*preset)).c_str(), std::string(variant_name(*variant)).c_str(), cut.c_str(),
              what.c_str(), static_cast<long long>(r->tensors),
              static_cast<long long>(r->payload_bytes), r->shards, holes.c_str(),
              r->wrote_tokenizer ? ", tokenizer.json" : " (no tokenizer.json in this build)");
  return 0;
}

}  // namespace

DSV4_COMMAND("synth", "write a synthetic checkpoint in the release layout, random or the gate's weights (or --list "
                      "its tensors)", run_synth);

}  // namespace dsv4::cli
