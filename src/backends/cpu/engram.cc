// Engram primes and hash rows (see engram.h).
#include "backends/cpu/engram.h"

#include <set>

namespace dsv4::cpu {

namespace {
bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}
}  // namespace

std::vector<std::vector<int64_t>> engram_primes(int64_t vocab, int n_layers, int max_ngram, int heads) {
  std::set<int64_t> seen;
  std::vector<std::vector<int64_t>> out(n_layers);
  for (int l = 0; l < n_layers; ++l)
    for (int n = 2; n <= max_ngram; ++n) {
      int64_t current = vocab - 1;
      for (int h = 0; h < heads; ++h) {
        int64_t c = current + 1;
        while (!is_prime(c) || seen.count(c)) ++c;
        seen.insert(c);
        out[l].push_back(c);
        current = c;
      }
    }
  return out;
}

void engram_hash_rows(const EngramLayout& L, const int64_t* c, int64_t p, int64_t pad, int64_t* rows) {
  const int N = L.max_ngram;
  int64_t P[16];
  bool blocked = false;
  for (int s = 0; s < N; ++s) {
    blocked = blocked || p < s || c[p - s] == -1;
    const int64_t t = blocked ? pad : c[p - s];
    P[s] = t * L.multipliers[s];
  }
  int64_t R = P[0];
  for (int n = 2; n <= N; ++n) {
    R ^= P[n - 1];
    for (int h = 0; h < L.heads; ++h) {
      const int idx = (n - 2) * L.heads + h;
      rows[idx] = R % L.primes[idx] + L.offsets[idx];
    }
  }
}

}  // namespace dsv4::cpu
