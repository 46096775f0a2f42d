// oracle_gate_fma: the CPU oracle compiled with fused multiply-adds (-mfma -ffp-contract=fast), a
// second valid float evaluation order of the same equations, run on the gate's prompts. It stands
// in for "another correct backend" in oracle_gate_test (docs/numerics.md): per prompt it prints its
// ref32's distance to its own ref64 and an FNV-1a hash of that ref64, which the test requires to
// equal the plain build's ref64 bit for bit (so the distances are to the gate's reference).
//
// Usage: oracle_gate_fma PRESET VARIANT [PROMPTS [exl3]]   (tiny|small, v41|v4-0731; PROMPTS <= 8;
//        exl3: the EXL3 gate weights, family::exl3_gate_weights, V4.1 only)
// Output: one line per prompt "prompt K err2 ref2 rows top1 ref64_hash top1_hash" (top1_hash: of
// its ref64's top-1 ids, gate::top1_ids); exit 77 without FMA.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/gate.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synthetic_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"

namespace {

template <typename T>
uint64_t fnv1a(const std::vector<T>& v) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  if (!__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "oracle_gate_fma: this CPU has no FMA instructions\n");
    return 77;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: oracle_gate_fma PRESET VARIANT [PROMPTS [exl3]]\n");
    return 2;
  }
  auto preset = family::parse_preset(argv[1]);
  auto variant = family::parse_variant(argv[2]);
  const int n = argc > 3 ? std::atoi(argv[3]) : cpu::gate::kPrompts;
  if (!preset.ok() || !variant.ok() || n < 1 || n > cpu::gate::kPrompts) {
    std::fprintf(stderr, "oracle_gate_fma: bad arguments\n");
    return 2;
  }
  const bool exl3 = argc > 4 && std::strcmp(argv[4], "exl3") == 0;
  const family::Config fc = family::preset_config(*preset, *variant);
  std::shared_ptr<const family::Model> w;
  if (exl3) {
    auto e = family::exl3_gate_weights(fc);
    if (!e.ok()) {
      std::fprintf(stderr, "oracle_gate_fma: %s\n", e.status().to_string().c_str());
      return 1;
    }
    w = std::move(*e);
  } else {
    w = family::synthetic_weights(fc, cpu::gate::kSeed, false, family::WeightProfile::gate);
  }
  for (int k = 0; k < n; ++k) {
    auto l32 = cpu::gate::oracle_logits(w, cpu::Precision::ref32, k);
    auto l64 = cpu::gate::oracle_logits(w, cpu::Precision::ref64, k);
    if (!l32.ok() || !l64.ok()) {
      std::fprintf(stderr, "oracle_gate_fma: %s\n", (l32.ok() ? l64.status() : l32.status()).to_string().c_str());
      return 1;
    }
    cpu::gate::Distance d;
    d.add(*l32, *l64, fc.vocab_size);
    std::printf("prompt %d %.17g %.17g %" PRId64 " %" PRId64 " %016" PRIx64 " %016" PRIx64 "\n", k, d.err2, d.ref2,
                d.rows, d.top1, fnv1a(*l64), fnv1a(cpu::gate::top1_ids(*l64, fc.vocab_size)));
  }
  return 0;
}
