// Gate weights to files and back (see gate_checkpoint.h).
#include "backends/cpu/gate_checkpoint.h"

#include <fmt/ranges.h>

#include "backends/cpu/gate.h"
#include "backends/cpu/release_encode.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cpu/synthetic_exl3.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/exl3_layout.h"

namespace dsv4::cpu {
namespace {

// The gate's seed for the values the oracle does not read, with the source's origin saying so.
StatusOr<family::TensorSource> gate_source(const family::Config& c) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const family::Model> w, written_gate_weights(c));
  DSV4_ASSIGN_OR_RETURN(family::TensorSource src, release_tensor_source(c, *w, gate::kSeed));
  src.origin = fmt::format("dsv4 synth --profile gate, seed {}", gate::kSeed);
  return src;
}

}  // namespace

StatusOr<std::shared_ptr<const family::Model>> with_release_engram_hash(const family::Config& c, const family::Model& w) {
  auto m = std::make_shared<family::Model>(w);
  if (!c.has_engram()) return std::shared_ptr<const family::Model>(std::move(m));
  const family::EngramLayout lay = family::compute_engram_layout(c);
  if (m->engram.layers.size() != lay.layers.size())
    return error(StatusCode::invalid_argument, "the weights have {} Engram layers, the config {}", m->engram.layers.size(),
                 lay.layers.size());
  for (size_t i = 0; i < lay.layers.size(); ++i) {
    const family::EngramLayerLayout& have = m->engram.layers[i];
    if (have.primes != lay.layers[i].primes || have.offsets != lay.layers[i].offsets)
      return error(StatusCode::invalid_argument, "layers.{}.engram: hash primes [{}], the config's are [{}]",
                   c.engram_layer_ids[i], fmt::join(have.primes, ", "), fmt::join(lay.layers[i].primes, ", "));
  }
  for (size_t i = 0; i < lay.layers.size(); ++i) m->engram.layers[i].multipliers = lay.layers[i].multipliers;
  return std::shared_ptr<const family::Model>(std::move(m));
}

StatusOr<std::shared_ptr<const family::Model>> written_gate_weights(const family::Config& c) {
  const auto w = family::synthetic_weights(c, gate::kSeed, c.variant == family::Variant::v41 && c.num_dspark_stages() > 0,
                                   family::WeightProfile::gate);
  return with_release_engram_hash(c, *w);
}

StatusOr<std::shared_ptr<const family::Model>> written_exl3_gate_weights(const family::Config& c, int threads) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const family::Model> x, exl3_gate_weights(c, threads));
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const family::Model> h, with_release_engram_hash(c, *x));
  // A pack has no ffn.gate.bias_vl: opening it routes image rows with ffn.gate.bias instead.
  auto w = std::make_shared<family::Model>(*h);
  for (family::LayerWeights& b : w->weights.layers)
    if (family::present(b.gate_bias)) b.gate_bias_vl = b.gate_bias;
  return std::shared_ptr<const family::Model>(std::move(w));
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
