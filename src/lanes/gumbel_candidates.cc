// The Gumbel candidate rule on the host and the draw decided from candidates (see gumbel_candidates.h).
#include "lanes/gumbel_candidates.h"

#include <algorithm>
#include <limits>

namespace dsv4::lanes {
namespace {

double logit_value(float x) {
  return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x);
}

double host_log(double x) { return std::log(x); }

}  // namespace

bool plain_gumbel(const SamplingParams& params) {
  // The same tests sample_keyed and sample_unsorted make, so a NaN parameter reads as it does there.
  if (params.greedy() || !std::isfinite(params.temperature)) return false;
  return params.top_p >= 1.0f && params.top_k <= 0 && !(params.min_p > 0.0f);
}

double keyed_temperature(const SamplingParams& params) {
  return std::max(static_cast<double>(params.temperature), 1e-6);
}

CandidateVerdict gumbel_candidates(std::span<const float> logits, double temperature, uint64_t key, size_t cap,
                                   std::vector<TokenId>* ids, double (*log)(double)) {
  if (log == nullptr) log = host_log;
  ids->clear();
  for (float l : logits) {
    if (!std::isfinite(l)) return CandidateVerdict::irregular;
  }
  // The scores with this logarithm, and b: the first id of largest (score, x).
  std::vector<double> score(logits.size()), xs(logits.size());
  size_t b = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const uint64_t bits = token_key(key, static_cast<TokenId>(i));
    xs[i] = static_cast<double>(logits[i]) / temperature;
    score[i] = xs[i] - log(-log(key_uniform(bits)));
    if (i == 0 || score[i] > score[b] || (score[i] == score[b] && xs[i] > xs[b])) b = i;
  }
  if (logits.empty()) return CandidateVerdict::ok;
  const double right = score[b] - gumbel_slack(xs[b]);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (score[i] + gumbel_slack(xs[i]) < right) continue;
    if (ids->size() == cap) {
      ids->clear();
      return CandidateVerdict::too_many;
    }
    ids->push_back(static_cast<TokenId>(i));
  }
  return CandidateVerdict::ok;
}

TokenId sample_gumbel_candidates(std::span<const TokenId> ids, std::span<const float> logits,
                                 const SamplingParams& params, uint64_t seed, int64_t position) {
  // sample_unsorted's scan (sampling.cc) over the candidates: the first of largest (score, x) in id order.
  const double temperature = keyed_temperature(params);
  const uint64_t row = row_key(seed, position);
  TokenId best = -1;
  double best_score = -std::numeric_limits<double>::infinity(), best_x = 0.0;
  for (size_t k = 0; k < ids.size() && k < logits.size(); ++k) {
    const double x = logit_value(logits[k]) / temperature;
    const double score = gumbel_score(x, token_key(row, ids[k]));
    if (best < 0 || score > best_score || (score == best_score && x > best_x)) {
      best = ids[k];
      best_score = score;
      best_x = x;
    }
  }
  return best < 0 ? 0 : best;
}

}  // namespace dsv4::lanes
