// EXL3 codebook evaluation (3INST, MCG, mul1) and cached 65,536-entry tables.
#include "formats/exl3/codebook.h"

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "formats/exl3/half.h"

namespace dsv4::exl3 {

std::string_view codebook_name(Codebook cb) {
  switch (cb) {
    case Codebook::inst3: return "3inst";
    case Codebook::mcg: return "mcg";
    case Codebook::mul1: return "mul1";
  }
  return "?";
}

std::optional<Codebook> codebook_from_name(std::string_view name) {
  if (name == "3inst") return Codebook::inst3;
  if (name == "mcg") return Codebook::mcg;
  if (name == "mul1") return Codebook::mul1;
  return std::nullopt;
}

namespace {

// 3INST and MCG: mask/xor the hashed state into two fp16 halves and add them. The two halves have
// exponents in [-3, 1), so their sum is exact in double and one rounding gives __hadd's result.
uint16_t two_half_sum(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const double sum = half_bits_to_double(static_cast<uint16_t>(x & 0xFFFF)) +
                     half_bits_to_double(static_cast<uint16_t>(x >> 16));
  return double_to_half_bits(sum);
}

// mul1: h = 1024 + the four unsigned bytes of x (the dp4a trick), then fma(h, 0x1EEE, 0xC931) with
// one fp16 rounding; h·k and the bias add are exact in double.
uint16_t mul1_value(uint32_t x) {
  const uint32_t byte_sum = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
  const double h = 1024.0 + static_cast<double>(byte_sum);
  const double k = half_bits_to_double(0x1EEE);
  const double bias = half_bits_to_double(0xC931);
  return double_to_half_bits(h * k + bias);
}

}  // namespace

uint16_t codebook_value_bits(Codebook cb, uint16_t state) {
  const uint32_t s = state;
  switch (cb) {
    case Codebook::inst3: return two_half_sum(s * 89226354u + 64248484u);
    case Codebook::mcg: return two_half_sum(s * kMcgMultiplier);
    case Codebook::mul1: return mul1_value(s * kMul1Multiplier);
  }
  return 0;
}

const uint16_t* codebook_table(Codebook cb) {
  static std::once_flag once[3];
  static std::array<std::vector<uint16_t>, 3> tables;
  const int i = static_cast<int>(cb);
  std::call_once(once[i], [&] {
    tables[i].resize(65536);
    for (uint32_t s = 0; s < 65536; ++s) tables[i][s] = codebook_value_bits(cb, static_cast<uint16_t>(s));
  });
  return tables[i].data();
}

}  // namespace dsv4::exl3
