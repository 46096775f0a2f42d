// Gate weights to files and back (see gate_checkpoint.h).
#include "backends/cpu/gate_checkpoint.h"

#include <fmt/ranges.h>

#include "backends/cpu/gate.h"
#include "backends/cpu/load.h"
#include "backends/cpu/release_encode.h"
#include "backends/cpu/synthetic.h"
#include "backends/cpu/synthetic_exl3.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/exl3_layout.h"

namespace dsv4::cpu {
namespace {

// The gate's seed for the values the oracle does not read, with the source's origin saying so.
StatusOr<family::TensorSource> gate_source(const family::Config& c) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<ModelWeights> w, written_gate_weights(c));
  DSV4_ASSIGN_OR_RETURN(family::TensorSource src, release_tensor_source(c, *w, gate::kSeed));
  src.origin = fmt::format("dsv4 synth --profile gate, seed {}", gate::kSeed);
  return src;
}

}  // namespace

Status use_release_engram_hash(const family::Config& c, ModelWeights& w) {
  if (!c.has_engram()) return ok_status();
  const family::EngramLayout lay = family::compute_engram_layout(c);
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    const int32_t l = c.engram_layer_ids[i];
    if (l < 0 || l >= static_cast<int32_t>(w.layers.size()) || !w.layers[l].engram)
      return error(StatusCode::invalid_argument, "layers.{}.engram: missing from the weights", l);
    const EngramLayout& have = w.layers[l].engram->layout;
    if (have.primes != lay.layers[i].primes || have.offsets != lay.layers[i].offsets)
      return error(StatusCode::invalid_argument, "layers.{}.engram: hash primes [{}], the config's are [{}]", l,
                   fmt::join(have.primes, ", "), fmt::join(lay.layers[i].primes, ", "));
  }
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i)
    w.layers[c.engram_layer_ids[i]].engram->layout.multipliers = lay.layers[i].multipliers;
  return ok_status();
}

StatusOr<std::shared_ptr<ModelWeights>> written_gate_weights(const family::Config& c) {
  const ModelConfig mc = model_config_from(c);
  std::shared_ptr<ModelWeights> w = synthetic_weights(mc, gate::kSeed, mc.dspark_stages > 0, WeightProfile::gate);
  DSV4_RETURN_IF_ERROR(use_release_engram_hash(c, *w));
  return w;
}

StatusOr<std::shared_ptr<ModelWeights>> written_exl3_gate_weights(const family::Config& c, int threads) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<ModelWeights> w, exl3_gate_weights(c, threads));
  DSV4_RETURN_IF_ERROR(use_release_engram_hash(c, *w));
  // A pack has no ffn.gate.bias_vl: load_weights routes image rows with ffn.gate.bias instead.
  for (BlockWeights& b : w->layers)
    if (!b.ffn.bias.empty()) b.ffn.bias_vl = b.ffn.bias;
  return w;
}

StatusOr<family::SynthResult> write_gate_checkpoint(const family::Config& c, const std::string& dir,
                                                    const family::SynthOptions& o) {
  DSV4_RETURN_IF_ERROR(family::validate_config(c));
  DSV4_ASSIGN_OR_RETURN(const family::TensorSource src, gate_source(c));
  return family::write_checkpoint(c, dir, o, src);
}

StatusOr<family::Exl3SynthResult> write_gate_exl3_pack(const family::Config& c, const std::string& dir,
                                                       family::Exl3SynthOptions o) {
  DSV4_RETURN_IF_ERROR(family::validate_config(c));
  DSV4_RETURN_IF_ERROR(family::exl3_pack_plan(c).status());  // V4-0731 has no pack layout: refused before encoding
  DSV4_ASSIGN_OR_RETURN(const family::TensorSource src, gate_source(c));
  o.seed = gate::kSeed;
  return family::write_exl3_pack(c, dir, o, src);
}

}  // namespace dsv4::cpu
