// The host's instance of the partition sum (see partition_sum.h). This file is compiled with floating-point
// contraction off (CMakeLists.txt), so each operation below rounds once, as a device's non-fusing operations do.
#include "lanes/partition_sum.h"

#include <bit>
#include <cmath>
#include <limits>

namespace dsv4::lanes {
namespace {

struct HostOps {
  static double add(double a, double b) { return a + b; }
  static double sub(double a, double b) { return a - b; }
  static double mul(double a, double b) { return a * b; }
  static double pow2(int k) { return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52); }
};

}  // namespace

double partition_exp(double d) { return partition_exp_with<HostOps>(d); }

PartitionSum partition_sum(std::span<const float> logits, double max) {
  unsigned __int128 sum = 0;
  for (float l : logits) {
    const double v = std::isnan(l) ? -std::numeric_limits<double>::infinity() : static_cast<double>(l);
    sum += partition_fixed(partition_exp(v - max));
  }
  return {static_cast<uint64_t>(sum), static_cast<uint64_t>(sum >> 64)};
}

double partition_value(const PartitionSum& sum) {
  const unsigned __int128 s = (static_cast<unsigned __int128>(sum.hi) << 64) | sum.lo;
  return static_cast<double>(s) * 0x1.0p-62;
}

}  // namespace dsv4::lanes
