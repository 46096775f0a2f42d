// A truncated keyed draw (top-k, top-p, min-p) decided from a few candidates instead of the whole row: the rule by
// which a device sampler picks them with its own exponentials and logarithms, why the host's winner is always among
// them, and when the row must go whole instead. The decision over the candidates is gumbel_candidates.h's
// (sample_gumbel_candidates), so the draw is the host sampler's, bit for bit.
//
// What sample_keyed computes for such a row (sampling.cc), with x_i = logit_i / T (T = keyed_temperature) and the
// best-first order (larger logit, then lower id):
//   - P_k: the k' best ids, k' = top_k when 0 < top_k < V, else every id;
//   - top-p: the host's masses e_i = std::exp(x_i - x_top), total = their double sum over P_k in best-first order,
//     need = top_p * total, and the kept prefix K_p: the shortest best-first prefix of P_k whose running double sum
//     reaches need (at least one id);
//   - min-p: K = the ids of K_p with x >= floor, floor = x_top + std::log(min_p) (at least the first);
//   - the token: the first id in best-first order of largest gumbel_score over K.
// A device can reproduce every x, every key bit and the floor exactly (the host hands it log(min_p) as a double), but
// not the host's exponentials nor the order of its sums, so it cannot know K_p exactly. It brackets it instead:
//
// The rule, on a regular row (no logit NaN or +inf, at least one finite; T finite and > 0): with "key" the logit's
// order (logit_order_key) and two thresholds hi <= lo, P_lo = {key >= lo} and P_hi = {key >= hi} (both best-first
// prefixes, as every set of ids above a logit is) are chosen so that P_lo is inside K_p and K_p inside P_hi:
//   - no top-p: lo = hi = the key of the k'-th best id (0 without top-k) when exactly k' ids reach it; with more ids
//     tied at that key (some of them are outside P_k), lo = that key + 1 and hi = that key;
//   - top-p (only when exactly k' ids reach the top-k key, else the row goes whole): from the device's masses e'_i
//     (any exponential, any order of summation), T' = their sum over P_k, need' = top_p * T', the keys t_lo and t_hi
//     where the device's best-first running masses first reach need' (1 - kMassTarget) and need' (1 + kMassTarget)
//     (t_hi: the lowest key of P_k if they never do), lo = t_lo + 1, hi = t_hi; the device's masses M_lo of P_lo and
//     M_hi of P_hi must pass mass_cut_certified(M_lo, M_hi, need'), or the row goes whole. The targets leave the
//     certificate room (any keys that pass it are correct); the ids between hi and lo, where the host's cut may lie,
//     hold about 2 kMassTarget of the kept mass, so a candidate rarely falls there even when the host's cut is among
//     thousands of ids of tiny mass (top_p near 1 on a flat row).
// Then S = (P_lo with x >= floor) + {a} (a: the first id of largest logit, always the host's first kept id) is inside
// K, and K inside P_hi with x >= floor. With the device's scores s_i, b the first id of largest (s, x) over S (ids of
// x = -inf left out: they never win on a row with a finite logit), id i is a candidate iff
//     i in P_hi, x_i >= floor, x_i > -inf, and s_i + gumbel_slack(x_i) >= s_b - gumbel_slack(x_b)
// and the row goes whole when a candidate lies outside S (the cut is not known there) or there are more than the cap.
//
// Why the host's winner w is a candidate: w is in K, inside P_hi above the floor, with finite x; b is in S, inside K,
// so w's host score is at least b's, and gumbel_candidates.h's bound on |s - h| gives s_w + slack >= h_w >= h_b >=
// s_b - slack (its +inf case too). Every candidate lies in S, inside K, so the host's scan of the candidates in id
// order (first of largest (h, x)) ends at w: that scan over K is sample_keyed's best-first scan (first of largest h),
// because x is strictly increasing in the logit on finite logits (distinct floats divided by one T in double stay
// distinct: their quotients differ by far more than a double's rounding, and neither overflows nor underflows for
// T in [1e-6, 3.4e38]), so "larger x, then lower id" is the best-first order.
//
// Why mass_cut_certified proves P_lo inside K_p and K_p inside P_hi. Both sides' masses are sums of the same terms
// E_i = exp(d_i) (d_i = x_i - x_top, the same double on both sides): each side's exponential is within a few ulps of
// E_i (glibc's and CUDA's double exp are documented within 1 ulp; a few ulps is 2^-50 relative), and any order of
// summation of n <= 2^20 nonnegative terms is within (n - 1) 2^-53 < 2^-33 of their exact sum (Higham, "Accuracy and
// Stability of Numerical Algorithms", 4.2). The top id's term is exp(0) = 1 on both sides and lies in every nonempty
// prefix, so subnormal terms (absolute error 2^-1074 each) change nothing at this scale. So each side's mass of a
// best-first prefix Q is within 2^-32.9 of the exact sum of Q, and the host's mass H(Q) and the device's D(Q) differ
// by at most 2^-31.8 D(Q); the same holds for the totals, and need adds one rounding (2^-53). The host keeps the
// shortest prefix whose running sum reaches need (the running sum after q ids is H of the first q ids), so
//   H(P_lo) < need  ==>  K_p is longer than P_lo,     H(P_hi) >= need  ==>  K_p is no longer than P_hi.
// mass_cut_certified asks M_lo (1 + s) < need' (1 - s) and M_hi (1 - s) >= need' (1 + s) with s = kMassSlack = 2^-28,
// each side rounded once (2^-53): 2 s = 2^-27 of relative room, where the two facts above need less than 2^-30
// (twice the 2^-31.8 between the sides, and four roundings).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lanes/gumbel_candidates.h"
#include "lanes/sampling.h"

namespace dsv4::lanes {

// Whether the rule covers rows drawn with these params: keyed (not greedy), not plain Gumbel (some top-k, top-p or
// min-p as sample_keyed reads them), a finite temperature, and min_p at most 1 (sample_keyed's sorted and unsorted
// paths disagree above 1; such rows go whole).
bool truncated_keyed(const SamplingParams& params);

// The cut of a truncated row as the device needs it, read exactly as sample_keyed reads params (vocab: the row's
// length).
struct TruncationCut {
  int32_t top_k = 0;                // k' when 0 < top_k < vocab; 0: no top-k
  double top_p = 1.0;               // < 1: top-p with this mass (the float's double); 1: none
  double log_min_p = -INFINITY;     // std::log(min_p) when min_p > 0; -inf: none
  double temperature = 1.0;         // keyed_temperature
};
TruncationCut truncation_cut(const SamplingParams& params, int64_t vocab);

// A logit's place in the best-first order as an unsigned key, larger for larger logits (-0 reads as +0, as the two
// compare equal). Not for NaN (rows with a NaN go whole).
inline uint32_t logit_order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// The rule's margin on masses (see the top of this file).
constexpr double kMassSlack = 0x1.0p-28;
// Where the device places P_lo and P_hi: masses this far below and above need' (a margin over kMassSlack so that the
// certificate passes whatever the device's location masses were off by).
constexpr double kMassTarget = 0x1.0p-26;
// Whether device masses M_lo of P_lo and M_hi of P_hi prove that the host's top-p prefix holds P_lo and lies in P_hi,
// need' being top_p times the device's total.
constexpr bool mass_cut_certified(double m_lo, double m_hi, double need) {
  return m_lo * (1.0 + kMassSlack) < need * (1.0 - kMassSlack) &&
         m_hi * (1.0 - kMassSlack) >= need * (1.0 + kMassSlack);
}

enum class TruncatedVerdict {
  ok,         // *ids holds the candidates, ascending
  irregular,  // a logit is NaN or +inf, or none is finite: the row goes whole
  uncertain,  // the cut could not be placed exactly where it matters: the row goes whole
  too_many,   // more than `cap` candidates: the row goes whole
};

// The rule on the host (a reference for device samplers and their tests): the candidates of `logits` under `cut` and
// row key `key`, with `exp` and `log` as the device's exponential and logarithm (null: std::exp, std::log). The
// masses are summed in id order (a device's order differs; the rule allows any).
TruncatedVerdict truncated_candidates(std::span<const float> logits, const TruncationCut& cut, uint64_t key, size_t cap,
                                      std::vector<TokenId>* ids, double (*exp)(double) = nullptr,
                                      double (*log)(double) = nullptr);

}  // namespace dsv4::lanes
