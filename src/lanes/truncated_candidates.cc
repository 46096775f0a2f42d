// The truncated-draw candidate rule on the host (see truncated_candidates.h).
#include "lanes/truncated_candidates.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace dsv4::lanes {
namespace {

double host_exp(double x) { return std::exp(x); }
double host_log(double x) { return std::log(x); }

}  // namespace

bool truncated_keyed(const SamplingParams& params) {
  if (params.greedy() || plain_gumbel(params) || !std::isfinite(params.temperature)) return false;
  return !(params.min_p > 1.0f);
}

TruncationCut truncation_cut(const SamplingParams& params, int64_t vocab) {
  TruncationCut c;
  c.top_k = params.top_k > 0 && params.top_k < vocab ? params.top_k : 0;
  c.top_p = params.top_p < 1.0f ? static_cast<double>(params.top_p) : 1.0;
  c.log_min_p = params.min_p > 0.0f ? std::log(static_cast<double>(params.min_p))
                                    : -std::numeric_limits<double>::infinity();
  c.temperature = keyed_temperature(params);
  return c;
}

TruncatedVerdict truncated_candidates(std::span<const float> logits, const TruncationCut& cut, uint64_t key, size_t cap,
                                      std::vector<TokenId>* ids, double (*exp)(double), double (*log)(double)) {
  if (exp == nullptr) exp = host_exp;
  if (log == nullptr) log = host_log;
  ids->clear();
  const size_t n = logits.size();
  // Regularity and a: the first id of largest logit.
  size_t a = n;
  for (size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) return TruncatedVerdict::irregular;
    if (l != -std::numeric_limits<float>::infinity() && (a == n || l > logits[a])) a = i;
  }
  if (a == n) return TruncatedVerdict::irregular;
  const double T = cut.temperature;
  const double x_top = static_cast<double>(logits[a]) / T;
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = logit_order_key(logits[i]);

  // P_k: the key of the k'-th best id, and whether exactly k' ids reach it.
  uint32_t lo = 0, hi = 0;
  if (cut.top_k > 0) {
    std::vector<uint32_t> sorted = keys;
    std::nth_element(sorted.begin(), sorted.begin() + (cut.top_k - 1), sorted.end(), std::greater<>());
    const uint32_t k_key = sorted[static_cast<size_t>(cut.top_k - 1)];
    const size_t reach =
        static_cast<size_t>(std::count_if(keys.begin(), keys.end(), [&](uint32_t k) { return k >= k_key; }));
    const bool exact = reach == static_cast<size_t>(cut.top_k);
    if (!exact && cut.top_p < 1.0) return TruncatedVerdict::uncertain;
    lo = exact ? k_key : k_key + 1;
    hi = k_key;
  }

  // top-p: the device's masses over P_k, a key where they cross need', and the certificate.
  if (cut.top_p < 1.0) {
    std::vector<double> mass(n, 0.0);
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (keys[i] < hi) continue;
      mass[i] = exp(static_cast<double>(logits[i]) / T - x_top);
      total += mass[i];
    }
    const double need = cut.top_p * total;
    // Distinct keys of P_k, best first, with their masses: the first keys whose running masses reach the targets.
    std::vector<std::pair<uint32_t, double>> by_key;
    for (size_t i = 0; i < n; ++i)
      if (keys[i] >= hi) by_key.emplace_back(keys[i], mass[i]);
    std::sort(by_key.begin(), by_key.end(), [](const auto& p, const auto& q) { return p.first > q.first; });
    const double target_lo = need * (1.0 - kMassTarget), target_hi = need * (1.0 + kMassTarget);
    uint32_t t_lo = by_key.back().first, t_hi = by_key.back().first;
    bool lo_found = false;
    double running = 0.0;
    for (size_t j = 0; j < by_key.size(); ++j) {
      running += by_key[j].second;
      if (j + 1 < by_key.size() && by_key[j + 1].first == by_key[j].first) continue;  // not the last of its key
      if (!lo_found && running >= target_lo) {
        t_lo = by_key[j].first;
        lo_found = true;
      }
      if (running >= target_hi) {
        t_hi = by_key[j].first;
        break;
      }
    }
    lo = t_lo + 1;
    hi = t_hi;
    double m_lo = 0.0, m_hi = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (keys[i] >= lo) m_lo += mass[i];
      if (keys[i] >= hi) m_hi += mass[i];
    }
    if (!mass_cut_certified(m_lo, m_hi, need)) return TruncatedVerdict::uncertain;
  }

  // S and its best b; then the candidates over P_hi above the floor.
  const double floor = x_top + cut.log_min_p;
  std::vector<double> xs(n), score(n);
  size_t b = a;
  for (size_t i = 0; i < n; ++i) {
    xs[i] = static_cast<double>(logits[i]) / T;
    if (keys[i] < hi || xs[i] < floor || xs[i] == -std::numeric_limits<double>::infinity()) continue;
    score[i] = xs[i] - log(-log(key_uniform(token_key(key, static_cast<TokenId>(i)))));
  }
  for (size_t i = 0; i < n; ++i) {
    const bool in_s = i == a || (keys[i] >= lo && xs[i] >= floor && xs[i] != -std::numeric_limits<double>::infinity());
    if (in_s && (score[i] > score[b] || (score[i] == score[b] && xs[i] > xs[b]))) b = i;
  }
  const double right = score[b] - gumbel_slack(xs[b]);
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] < hi || xs[i] < floor || xs[i] == -std::numeric_limits<double>::infinity()) continue;
    if (score[i] + gumbel_slack(xs[i]) < right) continue;
    if (i != a && keys[i] < lo) {
      ids->clear();
      return TruncatedVerdict::uncertain;
    }
    if (ids->size() == cap) {
      ids->clear();
      return TruncatedVerdict::too_many;
    }
    ids->push_back(static_cast<TokenId>(i));
  }
  return TruncatedVerdict::ok;
}

}  // namespace dsv4::lanes
