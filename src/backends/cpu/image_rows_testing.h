// Test helpers for prompts with an image span (given embedding rows) on any forward (the oracle, CUDA): the span's
// rows, the pieces that carry their cut of it, a prompt fed in pieces, and a model whose bias_vl is replaced.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "engine/stream_forward.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cpu::image_testing {

// An image span: positions [start, start + count) of a prompt fed as `values` (bf16 [count, D]).
struct Span {
  int64_t start = 0, count = 0;
  std::vector<uint16_t> values;
  bool image = true;
};

// bf16 values in [-1, 1) from a 32-bit LCG seeded with `seed`: rows [count, D].
inline std::vector<uint16_t> lcg_rows(int64_t count, int64_t D, uint32_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(count * D));
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = f32_to_bf16(static_cast<float>(s >> 8) / 8388608.0f - 1.0f);
  }
  return v;
}

// Rows of the model's own embedding table (tokens from an LCG): values of the text rows' distribution.
inline std::vector<uint16_t> embedding_rows(const family::Model& m, int64_t count, uint32_t seed) {
  const TensorView& e = m.weights.embed;
  const int64_t D = e.dim(1), V = e.dim(0);
  std::vector<uint16_t> v(static_cast<size_t>(count * D));
  const uint16_t* table = static_cast<const uint16_t*>(e.data);
  uint32_t s = seed;
  for (int64_t r = 0; r < count; ++r) {
    s = s * 1664525u + 1013904223u;
    std::copy_n(table + static_cast<int64_t>((s >> 8) % static_cast<uint32_t>(V)) * D, D, v.begin() + r * D);
  }
  return v;
}

// Tokens [pos, pos + n) of `tokens` on `stream`, every row's logits asked for when `logits`, carrying the part of
// each of `spans` (in prompt order, disjoint) inside them.
inline engine::Piece spans_piece(int32_t stream, const std::vector<int32_t>& tokens, int64_t pos, int64_t n,
                                 const std::vector<const Span*>& spans, int64_t D, bool logits = true) {
  engine::Piece p{stream, {tokens.begin() + pos, tokens.begin() + pos + n}, {}, {}};
  if (logits)
    for (int32_t i = 0; i < n; ++i) p.logit_rows.push_back(i);
  for (const Span* span : spans) {
    const int64_t from = std::max(pos, span->start), to = std::min(pos + n, span->start + span->count);
    if (from < to)
      p.embeds.push_back(engine::EmbedRows{
          from - pos, to - from,
          std::span<const uint16_t>(span->values)
              .subspan(static_cast<size_t>((from - span->start) * D), static_cast<size_t>((to - from) * D)),
          span->image});
  }
  return p;
}
inline engine::Piece span_piece(int32_t stream, const std::vector<int32_t>& tokens, int64_t pos, int64_t n,
                                const Span& span, int64_t D, bool logits = true) {
  return spans_piece(stream, tokens, pos, n, {&span}, D, logits);
}

// The model with every backbone layer's ffn.gate.bias_vl replaced by `bias` (f32 [E], held with the model).
inline std::shared_ptr<const family::Model> with_bias_vl(const std::shared_ptr<const family::Model>& m,
                                                         const std::vector<float>& bias) {
  struct Held {
    family::Model model;
    std::vector<float> bias;
  };
  auto h = std::make_shared<Held>(Held{*m, bias});
  for (family::LayerWeights& l : h->model.weights.layers)
    l.gate_bias_vl = TensorView{h->bias.data(), DType::f32, {static_cast<int64_t>(h->bias.size())},
                                static_cast<int64_t>(h->bias.size() * 4)};
  return std::shared_ptr<const family::Model>(h, &h->model);
}

// A bias_vl far from any checkpoint's: expert e gets 4e, so every layer prefers its last experts.
inline std::vector<float> skewed_bias(int64_t experts) {
  std::vector<float> b(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) b[static_cast<size_t>(e)] = 4.0f * static_cast<float>(e);
  return b;
}

}  // namespace dsv4::cpu::image_testing
