// EXL3 codebooks: a 16-bit trellis state -> one fp16 weight value (formats.md §1.8).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4::exl3 {

enum class Codebook : uint8_t {
  inst3,  // "3INST": no marker tensor
  mcg,    // marker tensor `.mcg`, value 0xCBAC1FED
  mul1,   // marker tensor `.mul1`, value 0x83DCD12D
};

inline constexpr uint32_t kMcgMultiplier = 0xCBAC1FEDu;
inline constexpr uint32_t kMul1Multiplier = 0x83DCD12Du;

std::string_view codebook_name(Codebook cb);  // "3inst", "mcg", "mul1"
std::optional<Codebook> codebook_from_name(std::string_view name);

// The fp16 bit pattern of the codebook value of `state`, exactly as the reference kernel computes it
// (one fp16 rounding of an exact sum / fused multiply-add).
uint16_t codebook_value_bits(Codebook cb, uint16_t state);

// All 65,536 values of a codebook as fp16 bits, computed once and cached.
const uint16_t* codebook_table(Codebook cb);

}  // namespace dsv4::exl3
