// `dsv4 bench`: the CUDA forward on full-width V4.1 (or V4-Flash-0731) layers generated on the device (no files); see
// backends/cuda/forward/forward_perf.h for what is measured.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/command.h"

// The options struct is device-free: every build parses the same flags, only a CUDA build runs them.
#include "backends/cuda/forward/forward_perf.h"

namespace dsv4::cli {
namespace {

int bench_main(int argc, char** argv) {
  CLI::App app{"dsv4 bench - the CUDA forward on full-width V4.1 or V4-Flash-0731 layers generated on the GPU (no files): decode "
               "steps vs the memory floor, verify windows, prefill chunks with and without bounded replay",
               "dsv4 bench"};
  cuda::ForwardBenchOptions f;
  app.add_option("--layers", f.layers,
                 "layers of the full plan (its first N, roles unchanged) to build; unused with --layer-ids / --roles")
      ->capture_default_str();
  app.add_option("--decoder-layers", f.decoder_layers,
                 "then the first M layers of the plan's decoder (V4.1: layers 20.., docs/replay.md), renumbered after "
                 "the first N")
      ->capture_default_str();
  std::string variant = "v41";
  app.add_option("--variant", variant, "model variant: v41 (DeepSeek-V4.1-Flash) or v4-0731 (DeepSeek-V4-Flash-0731)")
      ->check(CLI::IsMember({"v41", "v4-0731"}))
      ->capture_default_str();
  app.add_option("--batch", f.batches, "decode batches (streams per step), e.g. 1,8,32")->delimiter(',')->capture_default_str();
  app.add_option("--context", f.contexts, "positions each stream holds when a step is timed, e.g. 4096,65536")->delimiter(',')->capture_default_str();
  app.add_option("--verify-rows", f.verify_rows, "rows of each verify window")->capture_default_str();
  app.add_option("--prefill", f.prefill, "prefill chunk sizes (rows of one call), e.g. 2048,4096")->delimiter(',')->capture_default_str();
  app.add_option("--layer-ids", f.layer_ids,
                 "build these layers of the full plan instead of the first N (plan ids, e.g. 23,25; the layers they read "
                 "compressed KV rows, top-k, index keys, candidates or Engram primes from are added and printed), "
                 "renumbered in order; adds the per-layer prefill table")
      ->delimiter(',');
  app.add_flag("--roles", f.roles,
               "build one layer of each role of the plan (V4.1: window, window+engram, full-r2, reuse-r2, "
               "full-r2+engram, full-r1+cand-src, reuse-r1, reindex-r1+cand; 0731: window+hash, csa-r4+hash, "
               "hca-r128, csa-r4), with the layers they read from; with --layer-ids, both sets; adds the per-layer "
               "prefill table. The drafter (dspark) is listed, not built; Engram layers are built without Engram");
  app.add_option("--prefill-context", f.prefill_contexts,
                 "rows already cached before each chunk of the per-layer prefill table, e.g. 0,32768,131072 (default "
                 "0). The stream is declared to hold them (as --context does for decode): its window, compressed-KV and "
                 "index-key rows are allocated and zero-valued, so the chunk reads and scores as many rows as at that "
                 "context (timing only, never outputs). Set alone: the table of the first N layers")
      ->delimiter(',');
  app.add_option("--ttft-prompts", f.ttft_prompts,
                 "with --roles: prompt lengths (tokens) whose time to first token is projected besides 8192, 32768 and "
                 "131072, e.g. 4096,65536. The projection sums the per-role times of the per-layer table over every "
                 "layer of the full plan, chunk by chunk at each --prefill size (linear in the cached rows between the "
                 "--prefill-context points), without and with bounded replay (docs/bench.md)")
      ->delimiter(',');
  app.add_option("--iters", f.iters, "timed steps per measurement (after one warm-up)")->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the synthetic weights")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const int max_layers = variant == "v41" ? 40 : 43;
  const bool by_layer = !f.layer_ids.empty() || f.roles;
  if (by_layer && f.decoder_layers > 0) {
    std::fprintf(stderr, "dsv4 bench: --decoder-layers cuts the first N layers; with --layer-ids / --roles list the "
                         "decoder's layers by id instead\n");
    return 2;
  }
  for (int64_t p : f.prefill_contexts)
    if (p < 0) {
      std::fprintf(stderr, "dsv4 bench: --prefill-context %lld below 0\n", static_cast<long long>(p));
      return 2;
    }
  for (int64_t p : f.ttft_prompts)
    if (p < 1) {
      std::fprintf(stderr, "dsv4 bench: --ttft-prompts %lld below 1\n", static_cast<long long>(p));
      return 2;
    }
  if (!f.ttft_prompts.empty() && !f.roles) {
    std::fprintf(stderr, "dsv4 bench: --ttft-prompts projects from the per-role times: add --roles\n");
    return 2;
  }
  if (!by_layer && (f.layers < 1 || f.layers > max_layers)) {
    std::fprintf(stderr, "dsv4 bench: --layers %d outside 1..%d of %s\n", f.layers, max_layers, variant.c_str());
    return 2;
  }
  if (f.decoder_layers < 0) {
    std::fprintf(stderr, "dsv4 bench: --decoder-layers %d below 0\n", f.decoder_layers);
    return 2;
  }
#ifdef DSV4_WITH_CUDA
  f.variant = variant == "v41" ? family::Variant::v41 : family::Variant::v4;
  const Status st = cuda::run_forward_bench(f, stdout);
  if (!st.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
#else
  std::fprintf(stderr, "dsv4 bench: this build has no CUDA backend (configure with a CUDA compiler to benchmark GPUs)\n");
  return 1;
#endif
}

}  // namespace

DSV4_COMMAND("bench", "benchmark the CUDA forward on full-width synthetic V4.1 / V4-0731 layers (GPU only)", bench_main);

}  // namespace dsv4::cli
