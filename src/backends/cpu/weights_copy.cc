// Copies of decoded weights sharing their EXL3 linears (see weights_copy.h).
#include "backends/cpu/weights_copy.h"

namespace dsv4::cpu {
namespace {

// Plain members copy as values (a shared_ptr<const Exl3Weight> copies as a shared pointer); only the
// unique_ptr members need spelling out.
BlockWeights copy_block(const BlockWeights& b) {
  BlockWeights c;
  c.attn = b.attn;
  c.ffn = b.ffn;
  c.attn_norm = b.attn_norm;
  c.ffn_norm = b.ffn_norm;
  c.hc_attn = b.hc_attn;
  c.hc_ffn = b.hc_ffn;
  if (b.engram) c.engram = std::make_unique<EngramWeights>(*b.engram);
  return c;
}

}  // namespace

std::shared_ptr<ModelWeights> copy_sharing_exl3(const ModelWeights& w) {
  auto c = std::make_shared<ModelWeights>();
  c->config = w.config;
  c->embed = w.embed;
  for (const BlockWeights& b : w.layers) c->layers.push_back(copy_block(b));
  c->norm = w.norm;
  c->head = w.head;
  if (w.dspark) {
    const DsparkWeights& S = *w.dspark;
    auto d = std::make_unique<DsparkWeights>();
    for (const BlockWeights& b : S.stages) d->stages.push_back(copy_block(b));
    d->main_proj = S.main_proj;
    d->main_norm = S.main_norm;
    d->norm = S.norm;
    d->markov_embed = S.markov_embed;
    d->markov_head = S.markov_head;
    d->confidence = S.confidence;
    c->dspark = std::move(d);
  }
  if (w.hc_head) c->hc_head = std::make_unique<HcHeadWeights>(*w.hc_head);
  c->engram_token_map = w.engram_token_map;
  return c;
}

}  // namespace dsv4::cpu
