// Gate weights to files and back (see gate_checkpoint.h).
#include "family/deepseek_v41/gate_checkpoint.h"

#include <fmt/ranges.h>

#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/gate_weights.h"
#include "family/deepseek_v41/release_encode.h"
#include "family/deepseek_v41/synthetic_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::family {
namespace {

// The gate's seed for the values the oracle does not read, with the source's origin saying so.
StatusOr<TensorSource> gate_source(const Config& c) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const Model> w, written_gate_weights(c));
  DSV4_ASSIGN_OR_RETURN(TensorSource src, release_tensor_source(c, *w, kGateSeed));
  src.origin = fmt::format("dsv4 synth --profile gate, seed {}", kGateSeed);
  return src;
}

}  // namespace

StatusOr<std::shared_ptr<const Model>> with_release_engram_hash(const Config& c, const Model& w) {
  auto m = std::make_shared<Model>(w);
  if (!c.has_engram()) return std::shared_ptr<const Model>(std::move(m));
  const EngramLayout lay = compute_engram_layout(c);
  if (m->engram.layers.size() != lay.layers.size())
    return error(StatusCode::invalid_argument, "the weights have {} Engram layers, the config {}", m->engram.layers.size(),
                 lay.layers.size());
  for (size_t i = 0; i < lay.layers.size(); ++i) {
    const EngramLayerLayout& have = m->engram.layers[i];
    if (have.primes != lay.layers[i].primes || have.offsets != lay.layers[i].offsets)
      return error(StatusCode::invalid_argument, "layers.{}.engram: hash primes [{}], the config's are [{}]",
                   c.engram_layer_ids[i], fmt::join(have.primes, ", "), fmt::join(lay.layers[i].primes, ", "));
  }
  for (size_t i = 0; i < lay.layers.size(); ++i) m->engram.layers[i].multipliers = lay.layers[i].multipliers;
  return std::shared_ptr<const Model>(std::move(m));
}

StatusOr<std::shared_ptr<const Model>> written_gate_weights(const Config& c) {
  const auto w =
      synthetic_weights(c, kGateSeed, c.variant == Variant::v41 && c.num_dspark_stages() > 0, WeightProfile::gate);
  return with_release_engram_hash(c, *w);
}

StatusOr<std::shared_ptr<const Model>> written_exl3_gate_weights(const Config& c, int threads) {
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const Model> x, exl3_gate_weights(c, threads));
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const Model> h, with_release_engram_hash(c, *x));
  // A pack has no ffn.gate.bias_vl: opening it routes image rows with ffn.gate.bias instead.
  auto w = std::make_shared<Model>(*h);
  for (LayerWeights& b : w->weights.layers)
    if (present(b.gate_bias)) b.gate_bias_vl = b.gate_bias;
  return std::shared_ptr<const Model>(std::move(w));
}

StatusOr<SynthResult> write_gate_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o) {
  DSV4_RETURN_IF_ERROR(validate_config(c));
  DSV4_ASSIGN_OR_RETURN(const TensorSource src, gate_source(c));
  return write_checkpoint(c, dir, o, src);
}

StatusOr<Exl3SynthResult> write_gate_exl3_pack(const Config& c, const std::string& dir, Exl3SynthOptions o) {
  DSV4_RETURN_IF_ERROR(validate_config(c));
  DSV4_RETURN_IF_ERROR(exl3_pack_plan(c).status());  // V4-0731 has no pack layout: refused before encoding
  DSV4_ASSIGN_OR_RETURN(const TensorSource src, gate_source(c));
  o.seed = kGateSeed;
  return write_exl3_pack(c, dir, o, src);
}

}  // namespace dsv4::family
