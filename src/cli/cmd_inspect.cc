// `dsv4 inspect`: validates a checkpoint against its config's plan and prints plan, totals and sizes.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "cli/inspect_plan.h"
#include "core/checkpoint.h"
#include "family/deepseek_v41/exl3_sources.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"
#include "family/deepseek_v41/weights.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4::cli {
namespace {

using namespace dsv4::family;

std::string human(int64_t b) { return fmt::format("{} B ({:.2f} GiB)", b, b / 1073741824.0); }

void print_summary(const Config& c, const ModelPlan& plan, const TensorTable& t) {
  std::printf("model: %s (%s), %d layers + %d DSpark stages, hidden %lld, %d heads x %d, %d experts top-%d, "
              "vocab %lld\n\n",
              std::string(variant_name(c.variant)).c_str(), c.model_type.c_str(), c.num_hidden_layers,
              c.num_dspark_stages(), static_cast<long long>(c.hidden_size), c.num_attention_heads, c.head_dim,
              c.n_routed_experts, c.num_experts_per_tok, static_cast<long long>(c.vocab_size));
  std::printf("layer plan:\n%s\n", format_plan(plan).c_str());
  std::map<DType, std::pair<int64_t, int64_t>> by;  // count, bytes
  for (const TensorSpec& s : t.tensors) by[s.dtype].first++, by[s.dtype].second += s.bytes();
  std::printf("tensors by dtype:\n");
  for (const auto& [dt, cb] : by)
    std::printf("  %-8s %8lld tensors %18lld B\n", std::string(dtype_name(dt)).c_str(),
                static_cast<long long>(cb.first), static_cast<long long>(cb.second));
  std::printf("  %-8s %8zu tensors %18lld B in %d shards\n\n", "total", t.tensors.size(),
              static_cast<long long>(t.total_bytes()), t.num_shards);
  const ResidentSizes r = resident_sizes(t);
  std::printf("resident: all weights %s\n", human(r.total).c_str());
  std::printf("          without Engram tables %s\n", human(r.without_engram).c_str());
  std::printf("          also without vision and DSpark %s\n", human(r.text_backbone).c_str());
  std::printf("weight bytes read per decoded token (batch 1, no DSpark): %s\n",
              human(weight_bytes_per_token(c, t)).c_str());
}

// --plan on a directory: a release checkpoint (its config's expected tensors) or an EXL3 pack (its own tensors).
int plan_directory(const PlanFlags& flags, const std::string& dir) {
  std::ifstream in(dir + "/config.json", std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "dsv4 inspect: %s/config.json: cannot open\n", dir.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  if (is_exl3_config_text(text.str())) {
    auto pack = parse_exl3_pack_config(text.str());
    if (!pack.ok()) {
      std::fprintf(stderr, "dsv4 inspect: %s: %s\n", dir.c_str(), pack.status().to_string().c_str());
      return 1;
    }
    return run_plan(flags, pack->config, dir, true);
  }
  auto config = parse_config(text.str());
  if (!config.ok()) {
    std::fprintf(stderr, "dsv4 inspect: %s: %s\n", dir.c_str(), config.status().to_string().c_str());
    return 1;
  }
  return run_plan(flags, *config, dir, false);
}

int run_inspect(int argc, char** argv) {
  CLI::App app{"Validate a checkpoint against the layer plan of its config.json and print the plan, tensor and "
               "byte totals by dtype, resident sizes and weight bytes read per decoded token; with --plan, print "
               "the memory plan of serving it instead (docs/memory.md)",
               "dsv4 inspect"};
  std::string dir, preset_s, variant_s = "v41";
  app.add_option("dir", dir, "checkpoint directory (config.json + safetensors shards), or an EXL3 pack with --plan");
  app.add_option("--preset", preset_s, "inspect a preset's expected layout instead of a directory "
                                       "(tiny, small, full)");
  app.add_option("--variant", variant_s, "with --preset: v41 or v4-0731")->capture_default_str();
  int64_t layers = 0;
  app.add_option("--layers", layers, "with --preset: only its first N >= 1 backbone layers (as dsv4 synth --layers)");
  PlanFlags plan_flags;
  add_plan_flags(app, plan_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!plan_flags.plan)
    for (const char* only : {"--tp", "--gpu-memory", "--host-memory", "--context", "--parallel", "--kv-pool-tokens",
                             "--call-rows", "--engram", "--prompt-cache-mib", "--no-drafter"})
      if (app.count(only)) {
        std::fprintf(stderr, "dsv4 inspect: %s goes with --plan\n", only);
        return 2;
      }
  if (dir.empty() == preset_s.empty()) {
    std::fprintf(stderr, "dsv4 inspect: give a checkpoint directory or --preset (not both)\n");
    return 2;
  }
  if (!preset_s.empty()) {
    auto p = parse_preset(preset_s);
    auto v = parse_variant(variant_s);
    if (!p.ok() || !v.ok()) {
      std::fprintf(stderr, "dsv4 inspect: %s\n", (!p.ok() ? p.status() : v.status()).to_string().c_str());
      return 2;
    }
    Config c = preset_config(*p, *v);
    if (app.count("--layers")) {
      auto cut = with_layers(c, static_cast<int32_t>(std::clamp<int64_t>(layers, INT32_MIN, INT32_MAX)));
      if (!cut.ok()) {
        std::fprintf(stderr, "dsv4 inspect: --layers %lld: %s\n", static_cast<long long>(layers),
                     cut.status().message().c_str());
        return 2;
      }
      c = *std::move(cut);
    }
    if (plan_flags.plan) return run_plan(plan_flags, c, "", false);
    print_summary(c, build_plan(c), expected_tensors(c));
    return 0;
  }
  if (plan_flags.plan) return plan_directory(plan_flags, dir);
  auto config = load_config(dir);
  if (!config.ok()) {
    std::fprintf(stderr, "dsv4 inspect: %s\n", config.status().to_string().c_str());
    return 1;
  }
  const ModelPlan plan = build_plan(*config);
  const TensorTable table = expected_tensors(*config);
  std::printf("checkpoint: %s\n", dir.c_str());
  auto ck = Checkpoint::open(dir);
  Status st = ck.ok() ? validate_checkpoint(*ck, table) : ck.status();
  if (st.ok()) st = bind_weights(*config, plan, *ck).status();
  if (ck.ok())
    for (const auto& note : ck->notes()) std::printf("note: %s\n", note.c_str());
  print_summary(*config, plan, table);
  if (!st.ok()) {
    std::printf("\nvalidation: FAILED\n");
    std::fprintf(stderr, "dsv4 inspect: %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("\nvalidation: ok (%lld tensors, %lld bytes, every name, dtype and shape as the config expects)\n",
              static_cast<long long>(ck->tensor_count()), static_cast<long long>(ck->total_bytes()));
  return 0;
}

}  // namespace

DSV4_COMMAND("inspect", "validate a checkpoint against its config and print plan, totals and sizes", run_inspect);

}  // namespace dsv4::cli
