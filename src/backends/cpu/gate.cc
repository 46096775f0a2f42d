// The whole-model gate's prompts, distances and verdict (see gate.h).
#include "backends/cpu/gate.h"

#include <cmath>

#include <fmt/format.h>

namespace dsv4::cpu::gate {

std::vector<int32_t> prompt(int k, int64_t vocab) {
  std::vector<int32_t> t(kPromptLength);
  uint32_t s = 1000u + static_cast<uint32_t>(k);
  for (auto& x : t) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

std::vector<int32_t> top1_ids(std::span<const float> logits, int64_t vocab) {
  DSV4_CHECK(vocab > 0 && logits.size() % vocab == 0);
  std::vector<int32_t> ids(logits.size() / vocab);
  for (size_t r = 0; r < ids.size(); ++r) {
    const float* a = &logits[r * vocab];
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (a[v] > a[best]) best = v;
    ids[r] = static_cast<int32_t>(best);
  }
  return ids;
}

void Distance::add(std::span<const float> x, std::span<const float> ref, int64_t vocab) {
  DSV4_CHECK(x.size() == ref.size() && vocab > 0 && ref.size() % vocab == 0);
  const int64_t n = static_cast<int64_t>(ref.size()) / vocab;
  for (int64_t r = 0; r < n; ++r) {
    const float* a = &x[r * vocab];
    const float* b = &ref[r * vocab];
    int64_t ia = 0, ib = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = static_cast<double>(a[v]) - b[v];
      err2 += d * d;
      ref2 += static_cast<double>(b[v]) * b[v];
      if (a[v] > a[ia]) ia = v;
      if (b[v] > b[ib]) ib = v;
    }
    top1 += ia == ib;
  }
  rows += n;
}

void Distance::add(const Distance& d) {
  err2 += d.err2;
  ref2 += d.ref2;
  rows += d.rows;
  top1 += d.top1;
}

double Distance::nrms() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }

std::string Verdict::summary() const {
  return fmt::format("F = NRMS(ref32, ref64) = {:.4e}, NRMS(backend, ref64) = {:.4e} = {:.3f} F (gate {:.2f} F), "
                     "top-1 vs ref64: backend {}/{}, ref32 {}/{}: {}",
                     floor.nrms(), backend.nrms(), ratio(), kTolerance, backend.top1, backend.rows, floor.top1,
                     floor.rows, pass() ? "pass" : "FAIL");
}

StatusOr<std::vector<float>> oracle_logits(std::shared_ptr<const family::Model> w, Precision p, int k, int threads) {
  OracleOptions o;
  o.precision = p;
  o.threads = threads;
  return oracle_logits(std::move(w), o, k);
}

StatusOr<std::vector<float>> oracle_logits(std::shared_ptr<const family::Model> w, const OracleOptions& o, int k) {
  const int64_t V = w->config.vocab_size;
  DSV4_ASSIGN_OR_RETURN(auto oracle, Oracle::create(std::move(w), o));
  Piece piece{oracle->open_stream(), prompt(k, V), {}, {}, {}};
  for (int i = 0; i < kPromptLength; ++i) piece.logit_rows.push_back(i);
  DSV4_ASSIGN_OR_RETURN(auto r, oracle->forward({piece}));
  return std::move(r[0].logits);
}

}  // namespace dsv4::cpu::gate
