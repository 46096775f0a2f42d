// The softmax normalizer of a logits row as every sampler computes it, host or device, to the same bits: a sum that
// does not depend on the order of its terms, of terms computed with one fixed sequence of roundings.
//
// log_partition (sampling.h) is log(sum_i exp(l_i - max)). A double sum depends on its order and a library exp on its
// implementation, so a device could only bound the host's value, and a logprob rounded to float near a rounding
// boundary (or a confident token's logprob near 0, where floats are dense) would stay undecided. Instead the sum is
// defined so both sides compute it exactly:
//   - each term is partition_exp(d), d = logit_value(l) - max (the same double on both sides), an exp written with
//     IEEE additions, subtractions and multiplications alone, each rounded once in a fixed sequence (the host compiles
//     its instance with contraction off; a device supplies operations that never fuse, CUDA's __dadd_rn and
//     __dmul_rn), so both sides get the same double;
//   - each term is truncated to a multiple of 2^-62 (exact: a power-of-two scaling, then truncation to an integer)
//     and the integers are added: integer addition is associative, so any order, tree or set of atomics gives the
//     same sum (a row of at most 2^20 terms, each at most 2^62 (1 + 2^-50), fits 128 bits);
//   - log_sum = std::log(sum * 2^-62) on the host, one per row.
// Accuracy: partition_exp is within a few ulps of exp on [-45, 0] (Cody-Waite reduction with ln 2 split so k ln2_hi
// is exact, then the Taylor polynomial of degree 13 on |r| <= 0.35, whose truncation is below 2^-57); terms below
// e^-45 < 2^-62 are 0 whatever their value. The truncations lose at most n 2^-62 <= 2^-42 of a sum that is at least 1
// (the max's own term is exp(0) = 1), so log_sum is within about 2^-42 of log-sum-exp: far below a float logprob's
// rounding.
#pragma once

#include <cstdint>
#include <span>

namespace dsv4::lanes {

constexpr int kPartitionFracBits = 62;        // a term's fixed-point unit: 2^-62
constexpr double kPartitionUnit = 0x1.0p62;   // 2^kPartitionFracBits
constexpr double kPartitionExpMin = -45.0;    // below: the term is 0 (e^-45 < 2^-62)

// partition_exp with the arithmetic `Ops` gives: static add, sub, mul (each one IEEE rounding, never fused) and
// pow2(k) (2^k for integer k in [-70, 0], exact). For d in [kPartitionExpMin, 0]; 0 below (and for d = -inf).
template <class Ops>
constexpr double partition_exp_with(double d) {
  if (!(d >= kPartitionExpMin)) return 0.0;
  constexpr double kLog2e = 0x1.71547652b82fep0;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;  // 32 significant bits: k * kLn2Hi is exact for |k| < 2^21
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  constexpr double kShifter = 0x1.8p52;            // (t + 2^52 1.5) - 2^52 1.5 rounds t to the nearest integer
  const double k = Ops::sub(Ops::add(Ops::mul(d, kLog2e), kShifter), kShifter);
  const double r = Ops::sub(Ops::sub(d, Ops::mul(k, kLn2Hi)), Ops::mul(k, kLn2Lo));
  // 1/j! for j = 13 .. 0, Horner's rule.
  constexpr double kC[14] = {0x1.6124613a86d09p-33, 0x1.1eed8eff8d898p-29, 0x1.ae64567f544e4p-26,
                             0x1.27e4fb7789f5cp-22, 0x1.71de3a556c734p-19, 0x1.a01a01a01a01ap-16,
                             0x1.a01a01a01a01ap-13, 0x1.6c16c16c16c17p-10, 0x1.1111111111111p-7,
                             0x1.5555555555555p-5,  0x1.5555555555555p-3,  0x1.0000000000000p-1,
                             0x1.0000000000000p+0,  0x1.0000000000000p+0};
  double p = kC[0];
  for (int j = 1; j < 14; ++j) p = Ops::add(Ops::mul(p, r), kC[j]);
  return Ops::mul(p, Ops::pow2(static_cast<int>(k)));
}

// The fixed-point value of a term: floor(e 2^62) (e >= 0 and below 2^1.5).
constexpr uint64_t partition_fixed(double e) { return static_cast<uint64_t>(e * kPartitionUnit); }

// A 128-bit unsigned sum of fixed-point terms, as two words.
struct PartitionSum {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PartitionSum&) const = default;
};

// The host's instance of partition_exp_with (compiled with contraction off).
double partition_exp(double d);

// The fixed-point sum of partition_exp(logit_value(l) - max) over the row (NaN logits read as -inf); `max` the row's
// largest logit_value, finite.
PartitionSum partition_sum(std::span<const float> logits, double max);

// sum * 2^-62 rounded to the nearest double.
double partition_value(const PartitionSum& sum);

}  // namespace dsv4::lanes
