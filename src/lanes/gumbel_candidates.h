// A keyed Gumbel draw decided from a few candidates instead of the whole row: the rule by which a device sampler picks
// them with its own logarithms, why the host's winner is always among them, and the host's decision over them.
//
// sample_keyed draws a plain Gumbel row (plain_gumbel: not greedy, no top-k / top-p / min-p) as the first id in id
// order with the largest (score, x), x = logit / T, score = gumbel_score(x, bits) = x - log(-log(u)). A device can
// compute every score, but its double log may differ from the host's in the last bits, so it must not decide: it
// returns the ids whose device score could still be the host's best, with their logits, and the host decides among
// them with gumbel_score itself (sample_gumbel_candidates). The draw is then the host sampler's, bit for bit.
//
// The rule, on a regular row (every logit finite; T finite and > 0, so every x is finite): with s_i the device's
// scores and b any id of largest (s, x), id i is a candidate iff
//     s_i + gumbel_slack(x_i) >= s_b - gumbel_slack(x_b)         (both sides evaluated in double)
// A row with a non-finite logit, or with more than a fixed number of candidates, goes whole to the host instead.
//
// Why the host's winner w is a candidate. x_i is the same double on both sides (IEEE division); so is u_i (integer
// mixing, then exact arithmetic: key_uniform). If u_i = 1, -log(u_i) is -0 and log(-0) = -inf on both sides (CUDA
// documents log(1) = +0 and log(+-0) = -inf), so both scores are +inf. Otherwise a* = -log(u_i) lies in
// [1.1e-16, 37.5]: CUDA documents its double log within 1 ulp over the full range (CUDA C++ Programming Guide,
// "Mathematical Functions": log, max 1 ulp), and glibc's double log is within 1 ulp as well (the glibc manual's table
// of known maximum errors), so each side's a is a*(1 + e), |e| <= 2^-52. Then log(a) = log(a*) + log(1 + e) is off by
// at most 2^-52 (1 + 2^-50), and each side's rounded log of a (|log a| < 37, so 1 ulp <= 37 * 2^-52 < 2^-46.7) adds
// at most 2^-46.7: the two logs differ by at most 2 * (2^-51.9 + 2^-46.7) < 2^-44. The score x - log(a) is rounded
// once on each side (half an ulp, <= 2^-53 |x - log a| <= 2^-53 (|x| + 37)), so
//     |s_i - h_i| <= B(x_i) = 2^-44 + 2^-52 (|x_i| + 37)           (h_i: the host's score)
// and gumbel_slack(x) = 2^-40 + 2^-48 |x| is at least 13 B(x): room for the roundings of the rule's own two sides
// (each within 2^-53 (|x| + 38), under B(x) / 2) and for logarithms several ulps worse than documented.
//   - If h_w = +inf: u_w = 1, so s_w = +inf and the left side is +inf: w is a candidate.
//   - Otherwise every host score is finite (w's is the largest), so no u is 1 and every device score is finite too;
//     w's (h, x) is the largest, so h_w >= h_b, and s_w + B(x_w) >= h_w >= h_b >= s_b - B(x_b): w is a candidate.
// The decision among the candidates (ascending ids) is sample_keyed's: its scan of the whole row keeps the first id
// of largest (h, x) (no score is NaN on a regular row, and the ids it skips can neither win nor tie), so the same
// scan over any subset that holds that id, in id order, ends at the same id.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "lanes/sampling.h"

namespace dsv4::lanes {

// Whether sample_keyed draws rows with these params by Gumbel-max over the whole row with no cut (not greedy; no
// top-k, top-p or min-p, read exactly as sample_keyed reads them) at a finite temperature.
bool plain_gumbel(const SamplingParams& params);

// The temperature sample_keyed divides the logits by: max(T, 1e-6).
double keyed_temperature(const SamplingParams& params);

// The rule's margin for a token of scaled logit x (see the top of this file).
constexpr double kGumbelSlackAbs = 0x1.0p-40;
constexpr double kGumbelSlackRel = 0x1.0p-48;
constexpr double gumbel_slack(double x) { return kGumbelSlackAbs + kGumbelSlackRel * (x < 0.0 ? -x : x); }
// An upper bound of the Gumbel term -log(-log(u)) for every u < 1 (u <= 1 - 2^-53, so -log(u) >= 1.1e-16 and the term
// is at most 36.8 with any logarithm within a few ulps): a token with x + bound + slack below the rule's right side
// is no candidate, whatever its logarithms (a device skips them). u = 1 (term +inf) is the one exception.
constexpr double kGumbelTermBound = 37.0;
// key_uniform(bits) is exactly 1 iff the top 53 bits are all ones.
constexpr bool key_uniform_is_one(uint64_t bits) { return (bits >> 11) == (uint64_t{1} << 53) - 1; }

// Most candidates a reduced row carries; a row with more goes whole to the host.
constexpr int kMaxGumbelCandidates = 32;

enum class CandidateVerdict {
  ok,         // *ids holds the candidates, ascending
  irregular,  // a logit is NaN or infinite: the row goes whole
  too_many,   // more than `cap` ids qualify: the row goes whole
};

// The rule on the host (a reference for device samplers and their tests): the candidates of `logits` at `temperature`
// (keyed_temperature) and row key `key` (row_key(seed, position)), with `log` as the logarithm (null: std::log).
CandidateVerdict gumbel_candidates(std::span<const float> logits, double temperature, uint64_t key, size_t cap,
                                   std::vector<TokenId>* ids, double (*log)(double) = nullptr);

// sample_keyed's draw of a plain Gumbel row (plain_gumbel(params)) from its candidates: `ids` ascending, `logits`
// their logits. Equals sample_keyed on the whole row whenever the ids hold its winner (always, for the candidates of
// a regular row); with every id of the row it equals sample_keyed on any row.
TokenId sample_gumbel_candidates(std::span<const TokenId> ids, std::span<const float> logits,
                                 const SamplingParams& params, uint64_t seed, int64_t position);

}  // namespace dsv4::lanes
