// engram_hash_rows: multiplicative-XOR n-gram hashes into the per-column prime buckets (see engram_hash.h).
#include "family/deepseek_v41/engram_hash.h"

namespace dsv4::family {

void engram_hash_rows(const EngramLayout& lay, const EngramLayerLayout& layer, const int64_t* c, int64_t p,
                      int64_t pad, int64_t* rows) {
  const int N = lay.max_ngram;
  int64_t P[16];
  bool blocked = false;
  for (int s = 0; s < N; ++s) {
    blocked = blocked || p < s || c[p - s] == -1;
    const int64_t t = blocked ? pad : c[p - s];
    P[s] = t * layer.multipliers[s];
  }
  int64_t R = P[0];
  for (int n = 2; n <= N; ++n) {
    R ^= P[n - 1];
    for (int h = 0; h < lay.n_heads; ++h) {
      const int idx = (n - 2) * lay.n_heads + h;
      rows[idx] = R % layer.primes[idx] + layer.offsets[idx];
    }
  }
}

}  // namespace dsv4::family
